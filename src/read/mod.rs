//! Trace files in: the decompressed bytes of plain or multi-member gzip input (`members`), a
//! trace's header and events in order, told to a visitor (`events`), which events a filter
//! keeps, with the binding of flow ends to their events (`filter`), which rank a file is
//! (`ranks`), many files read on threads (`sources`: the one pool of merge, summary and
//! parquet), unions of intervals and their lengths (`intervals`), which GPU work each CPU
//! operator owns (`attribution`), the fast hasher of lookups by trace text (`hash`), and
//! the categories of GPU activities and their launches (`categories`).

pub(crate) mod attribution;
pub(crate) mod categories;
pub(crate) mod events;
pub(crate) mod filter;
pub(crate) mod hash;
pub(crate) mod intervals;
pub(crate) mod members;
pub(crate) mod ranks;
pub(crate) mod sources;
