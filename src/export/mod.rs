//! The exporter: columnar activity batches (`trace`) -> event text (`format`, with `fragment`
//! for JSON fragments and `graphs` for CUDA-graph annotations) -> bytes, driven by `pipeline`
//! on its writer thread; `fallback` streams older torch's own output into place.

pub(crate) mod fallback;
pub(crate) mod format;
pub(crate) mod fragment;
pub(crate) mod graphs;
pub(crate) mod pipeline;
pub(crate) mod trace;
