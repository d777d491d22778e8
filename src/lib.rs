//! kinetrace: exact Chrome-trace export for the PyTorch profiler.
//!
//! The module map (every module of the crate; `tests/test_layout.py` checks the list, and that
//! imports run one way with no circle, between folders and between the files of a folder):
//!
//! - `python` (feature `python`): the bindings, the crate's only entry point (`_Exporter` and
//!   the module in `mod.rs`), one file per tool family:
//!   `python::{reader, fallback, gzip_writer, check, repair, compress, split, merge, summary,
//!   diff, parquet, ops}`,
//!   with `python::interrupt` (the one way a binding waits) and `python::errors` (error to
//!   exception).
//! - `tools`: the tools over existing trace files: `tools::check` (trace rules),
//!   `tools::repair` (`tools::repair::{copy, tolerant, untangle, tests}`), `tools::compress`,
//!   `tools::split` (`split` / `filter`, and `keep=` / `split_mb=` at export time),
//!   `tools::merge` (many traces on one timeline, a file per pass or concern:
//!   `tools::merge::{probe, steps, survey, rewrite, write, ids, names, ranks, record,
//!   tests}`), `tools::summary` (where each rank's GPU time went:
//!   `tools::summary::{events, exact, hta, report}`), `tools::diff` (`diff`'s one read per
//!   file for its summary, operators and steps: `tools::diff::read`; each step's GPU busy
//!   time and counts: `tools::diff::steps`; `diff --rules hta`'s side
//!   over summary's `hta` reading: `tools::diff::hta`), `tools::parquet`
//!   (trace files as one Parquet dataset: `tools::parquet::{rows, runs, table, ops}`),
//!   `tools::ops`
//!   (FLOPs and bytes of each operator from its recorded shapes, per family:
//!   `tools::ops::{args, dtype, gemm, elementwise, reduce, norm, conv, attention, extensions,
//!   exact, memory, coverage, peaks, peaks_tests, roofline, rates, groups,
//!   reference_tests}`: `memory` the memory-bound operators only the exact rules model,
//!   `coverage` how much of the rows' GPU time has a model, `peaks` the GPUs' peak compute
//!   and bandwidth, `roofline` the GPU and peak each row is measured against, `rates` the
//!   roofline arithmetic of a row or a group, `groups` the rows of every rank with their
//!   roofline, grouped and ranked); `tools::overlap` (Perfetto's rule for overlapping slices, fed
//!   by check and repair alike), `tools::parts` (the time-window plan and part
//!   writers split and merge share) and `tools::report` (one kind counted with its first
//!   places: check's findings and repair's changes, and the collector of both).
//! - `export`: the exporter. `export::trace` (columnar batches and the first-pass summary)
//!   -> `export::format` (event text, with `export::fragment` for JSON fragments and
//!   `export::graphs` for CUDA-graph annotations) -> `output`, driven by `export::pipeline`,
//!   which runs formatting and writing on their own thread. `export::fallback` streams older
//!   torch's own output (Kineto's writer) into place, strict JSON:
//!   `export::fallback::{in_place, stream, text, validator}`.
//! - `read`: trace files in: `read::members` (gzip member decoding), `read::events` (a
//!   trace's events in order, read in parallel chunks where the file allows; the one place
//!   the top level is decided: an object with `traceEvents`, or the JSON Array Format),
//!   `read::filter` (which events a filter keeps, flow ends bound to their events),
//!   `read::ranks` (which rank a file is, for `merge` and `summary`), `read::sources` (the
//!   one pool reading many files on threads, for `merge`, `summary` and `parquet`),
//!   `read::intervals` (unions of
//!   intervals, ns or float µs: summary's figures and attribution's busy time),
//!   `read::attribution` (the GPU work each CPU operator owns:
//!   `read::attribution::{collect, tree, groups, tests}`, for `ops` and `diff`),
//!   `read::hash` (the one fast hasher of lookups by trace text or number),
//!   `read::categories` (the categories of GPU activities and their launches, one list
//!   for `summary` and the attribution).
//! - `json`: JSON text: `json::lexer` (the strict streaming lexer), `json::scan` (its fast
//!   path over text in memory), `json::tolerant` (the tolerant reader of `repair`),
//!   `json::render` (numbers and strings), `json::object` (members of an object's text),
//!   `json::decimal` (numbers as exact decimals: times in ns, never through a float),
//!   `json::compact` (a value's text in one form), `json::value` (a short value as a tree:
//!   operators' recorded inputs).
//! - `output`: bytes out: `output::sink` (atomic file output), `output::temps` (temporary
//!   names), `output::gzip` (parallel single-member compression:
//!   `output::gzip::{encoder, slice, pool, worker, writer, crc, testing}`), `output::interrupt` (how
//!   every wait stays answerable to Ctrl-C).
//! - `error`: the one error type, used by all. `testing` (tests only): shared test helpers.
//! - `counts` (feature `counts`, never in a wheel): the instruction-count benchmarks'
//!   entry point (`benches/counts.rs` calls it; `counts::synthetic` the export's fixed
//!   activities), beside `python` at the top: it calls what the bindings call.
//!   `extra_work` (feature `count-hooks`, never in a wheel), at the bottom: more work in a
//!   per-event path, for the tests that show the count gate catches it.
//!
//! Arrows run down this list: a module uses only modules of its own folder or of folders
//! below it (`python`, `counts` > `tools` > `export` > `read` > `json` > `output` > `error`,
//! `extra_work`).

// Every module is private and the bindings are the only entry point: without the `python`
// feature the whole library would be reported dead. Unused code is reported by the build
// with the bindings (`cargo clippy --all-targets --all-features`).
#![cfg_attr(not(feature = "python"), allow(dead_code, unused_imports))]
// Every function at most 80 lines (`clippy.toml`), or a `// Long because ...` comment above
// its `#[allow(clippy::too_many_lines)]` (`tests/test_layout.py` checks it).
#![warn(clippy::too_many_lines)]

mod error;
mod export;
mod json;
mod output;
mod read;
mod tools;

#[cfg(test)]
mod testing;

#[cfg(feature = "python")]
mod python;

#[cfg(feature = "counts")]
pub mod counts;

#[cfg(feature = "count-hooks")]
mod extra_work;
