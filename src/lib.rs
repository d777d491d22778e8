//! kinetrace: exact Chrome-trace export for the PyTorch profiler.
//!
//! Data flows through the modules in this order:
//! `trace` (columnar batches and the first-pass summary) -> `format` (event text, using
//! `render` for numbers/strings, `fragment` for JSON fragments and `graphs` for CUDA-graph
//! annotations) -> `gzip` (optional
//! parallel single-member compression) -> `sink` (atomic file output), driven by
//! `pipeline`, which runs formatting and writing on their own thread.
//! The tools over existing trace files read them through `members` (gzip member decoding)
//! and `lexer` (the strict streaming JSON lexer): `check` (trace rules, `kinetrace check`),
//! `split` (`kinetrace split` / `filter`, and `keep=` / `split_mb=` at export time);
//! `recompress` (`kinetrace compress`) needs only `members`.
//! `fallback` streams older torch's own output (Kineto's writer) into place, strict JSON.
//! `interrupt` is how every wait stays answerable to Ctrl-C.
//! The Python bindings live in `python` and are compiled only with the `python` feature.

pub mod check;
pub mod error;
pub(crate) mod events;
pub mod fallback;
pub mod format;
pub mod fragment;
pub mod graphs;
pub mod gzip;
pub mod interrupt;
pub(crate) mod lexer;
pub(crate) mod members;
pub mod pipeline;
pub mod recompress;
pub mod render;
pub(crate) mod scan;
pub mod sink;
pub mod split;
pub mod trace;

#[cfg(test)]
mod testing;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};
