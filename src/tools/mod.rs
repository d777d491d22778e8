//! The tools over existing trace files, one module each: `check`, `repair`, `compress`,
//! `split` (with `filter`), `merge`, `summary`, `parquet`; `overlap` (Perfetto's rule for overlapping
//! slices, used by check and repair), `parts` (the time-window plan and part writers split and
//! merge share) and `report` (the counted findings and changes of check and repair, and their
//! collector).

pub(crate) mod check;
pub(crate) mod compress;
pub(crate) mod diff;
pub(crate) mod merge;
pub(crate) mod ops;
pub(crate) mod overlap;
pub(crate) mod parquet;
pub(crate) mod parts;
pub(crate) mod repair;
pub(crate) mod report;
pub(crate) mod split;
pub(crate) mod summary;
