//! Bytes out: atomic file output (`sink`), temporary names (`temps`), the parallel gzip
//! encoder (`gzip`), and the short waits that keep every wait answerable to Ctrl-C
//! (`interrupt`).

pub(crate) mod gzip;
pub(crate) mod interrupt;
pub(crate) mod sink;
pub(crate) mod temps;
