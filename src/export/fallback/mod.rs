//! The fallback: the export path for torch < 2.13, whose `_ProfilerResult` has no
//! `trace_activities()`. Kineto's own writer (`result.save(path)`, the C++
//! ChromeTraceLogger) is the only exporter there, and Python points it at one of two
//! places:
//!
//! - a private file beside a plain `.json` destination ([`InPlace`]): Kineto writes it at
//!   full speed while a thread checks it, then it is edited where it lies and renamed;
//! - FIFOs ([`Stream`]), for gzip and for destinations written in place: what arrives is
//!   streamed into the destination, so no full-size copy of the trace lands on disk.
//!
//! Kineto writes `path + ".tmp"` and renames it over `path` (the Kineto of torch 2.11 to
//! 2.15), or writes `path` itself (older Kineto): both names are prepared, and the one that
//! receives data is the trace. On the way Kineto's text is checked and made strict JSON
//! ([`validator`]: a `"` Kineto left unescaped in a name is escaped), and what Kineto would
//! mangle is carried past it ([`text`]): a trace that is still not strict JSON fails the
//! export instead of being written.
//!
//! - `in_place`: the private file, its reader, the edits and the rename.
//! - `stream`: the FIFO readers, the claimed output, finishing and aborting.
//! - `text`: the quote verdict, inserted metadata, the trace-name rewrite.
//! - `validator`: the strict check that also finds the repairs and counts the events.

mod in_place;
mod stream;
mod text;
mod validator;

pub(crate) use in_place::{directory_for, InPlace};
pub(crate) use stream::Stream;
pub(crate) use text::TraceNameRewrite;
