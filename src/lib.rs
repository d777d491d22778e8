//! kinetrace: exact Chrome-trace export for the PyTorch profiler.
//!
//! Data flows through the modules in this order:
//! `trace` (columnar batches and the first-pass summary) -> `format` (event text, using
//! `render` for numbers/strings and `fragment` for JSON fragments) -> `gzip` (optional
//! parallel single-member compression) -> `sink` (atomic file output), driven by
//! `pipeline`, which runs formatting and writing on their own thread.
//! The Python bindings live in `python` and are compiled only with the `python` feature.

pub mod check;
pub mod error;
pub mod format;
pub mod fragment;
pub mod gzip;
pub mod kineto;
pub mod pipeline;
pub mod render;
pub mod sink;
pub mod trace;

#[cfg(test)]
mod testing;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};
