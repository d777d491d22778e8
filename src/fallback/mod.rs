//! The fallback: the export path for torch < 2.13, whose `_ProfilerResult` has no
//! `trace_activities()`. Kineto's own writer (`result.save(path)`, the C++
//! ChromeTraceLogger) is the only exporter there; Python points it at FIFOs and hands their
//! ends to a [`Stream`], which streams what arrives into the destination.
//!
//! Kineto writes `path + ".tmp"` and renames it over `path` (newer Kineto), or writes `path`
//! itself (older Kineto): there is a FIFO at each, and the one that receives data is the
//! trace. On the way Kineto's text is made strict JSON and what Kineto would mangle is
//! carried past it ([`text`]), and the result is checked ([`validator`]): a trace that is
//! still not strict JSON fails the export instead of being written.
//!
//! - `stream`: the readers, the claimed output, finishing and aborting.
//! - `text`: the per-chunk transforms (quote repair, inserted metadata, trace-name rewrite,
//!   event count).
//! - `validator`: the strict checker on a thread of its own.

mod stream;
mod text;
mod validator;

pub(crate) use stream::Stream;
pub use text::TraceNameRewrite;
