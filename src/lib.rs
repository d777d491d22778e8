//! kinetrace: exact Chrome-trace export for the PyTorch profiler.
//!
//! Data flows through the modules in this order:
//! `trace` (columnar batches and the first-pass summary) -> `format` (event text, using
//! `render` for numbers/strings, `fragment` for JSON fragments and `graphs` for CUDA-graph
//! annotations) -> `gzip` (optional
//! parallel single-member compression) -> `sink` (atomic file output), driven by
//! `pipeline`, which runs formatting and writing on their own thread.
//! The tools over existing trace files read them through `members` (gzip member decoding)
//! and `lexer` (the strict streaming JSON lexer, with `scan` its fast path over text in memory):
//! `check` (trace rules, `kinetrace check`), and `events` (a trace's events in order, read
//! in parallel chunks where the file allows) for `split` (`kinetrace split` / `filter`, and
//! `keep=` / `split_mb=` at export time);
//! `recompress` (`kinetrace compress`) needs only `members`.
//! `fallback` streams older torch's own output (Kineto's writer) into place, strict JSON.
//! `interrupt` is how every wait stays answerable to Ctrl-C.
//! The Python bindings live in `python` and are compiled only with the `python` feature.

// Every module is private and the bindings are the only entry point: without the `python`
// feature the whole library would be reported dead. Unused code is reported by the build
// with the bindings (`cargo clippy --all-targets --all-features`).
#![cfg_attr(not(feature = "python"), allow(dead_code, unused_imports))]

mod check;
mod error;
mod events;
mod fallback;
mod format;
mod fragment;
mod graphs;
mod gzip;
mod interrupt;
mod lexer;
mod members;
mod merge;
mod overlap;
mod pipeline;
mod recompress;
mod render;
mod repair;
mod scan;
mod sink;
mod split;
mod temps;
mod tolerant;
mod trace;

#[cfg(test)]
mod testing;

#[cfg(feature = "python")]
mod python;
