//! `kinetrace repair`: the best loadable trace a damaged file holds, and (with
//! `--untangle`) a trace in which Perfetto drops no complete event for overlapping.
//!
//! A *change* is one kind of edit, counted, with its first places (offset in the
//! decompressed JSON of the source, index in `traceEvents`). What is changed:
//! - gzip: data after a corrupt or truncated point of the gzip stream is lost (what
//!   decompressed before it is kept); several members become one; data after the last
//!   member that is not gzip is dropped;
//! - the JSON text, read by [`crate::json::tolerant`] (strings, bare words, stray commas, each
//!   counted as its own change); an event it cannot repair is dropped (and counted), and
//!   reading goes on at the next line starting an event (`,`, a newline, `{`); elements of
//!   `traceEvents` that are not objects are dropped;
//! - a text that ends early keeps every complete event before the cut, byte for byte, and
//!   the document is closed after it (members of the top-level object after the cut are
//!   lost); so is a text that cannot be read on from some point (no later event start);
//! - a top level that is an array of events (the JSON Array Format, which loads) becomes
//!   `{"traceEvents": [...]}`, its events copied byte for byte, and closed when it had no
//!   `]` (which the format allows); a missing `traceEvents` is added, empty; text after the
//!   top-level value is dropped.
//! - `--untangle`: each `X` event Perfetto would drop for overlapping on its thread (the
//!   rule of [`crate::tools::overlap`]) moves to the first extra thread of its process where it
//!   fits, a *lane*: a new `tid` (above the process's largest), named after the thread
//!   (`stream 7 (overlap 1)`) by a `thread_name` metadata event (and sorted with it when it
//!   has a `thread_sort_index`). A flow end goes with the event it belongs to (the last
//!   non-flow event before it on its thread whose span holds its `ts`, as `split` binds).
//!
//! How: the source is first checked ([`crate::tools::check`], parallel). If it loads in the
//! object form and nothing is to be untangled, its JSON text is copied unchanged ("nothing to repair": the copy is
//! byte-identical for a plain `.json` destination; a `.gz` one gets the same text as one
//! gzip member). Otherwise the text is read once by the tolerant reader, which copies what
//! is valid verbatim (whitespace included) and writes the repairs; untangling reads a
//! loadable text twice more (the rule, then the writing). The source is never modified;
//! the destination appears atomically ([`crate::output::sink`]), or not at all.
//!
//! Memory: the tolerant reader holds the value being read (1 MiB at first, at most
//! [`tolerant::MAX_VALUE`]: a longer event or top-level value is dropped); untangling holds the
//! overlap rule's state ([`crate::tools::overlap`]), about 30 bytes per moved event, and the names
//! of threads.
//!
//! Files: this one (the entry point [`repair`], its options and report, the choice of
//! passes), `copy.rs` (the source's decompressed text, forgiving of gzip damage, and the
//! unchanged copy), `tolerant.rs` (the tolerant pass, over [`crate::json::tolerant`]),
//! `untangle.rs` (the survey through [`crate::tools::overlap`], the lanes, the rewriting),
//! `tests.rs`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::json::tolerant::Fix;
use crate::output::sink::{Encoding, Sink};
use crate::read::events::Form;
use crate::tools::check::{self, CheckOptions, FindingKind};
use crate::tools::report::{Counted, ReportKind, Tally};

use copy::copy_text;
use tolerant::tolerant_pass;
use untangle::untangle;

mod copy;
mod tolerant;
mod untangle;

#[cfg(test)]
mod tests;

/// One kind of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ChangeKind {
    GzipDamage,
    GzipMembers,
    Truncated,
    UnreadableTail,
    TrailingData,
    WrappedArray,
    ClosedArray,
    AddedTraceEvents,
    DroppedMembers,
    DroppedEvents,
    DroppedElements,
    Fixed(Fix),
    MovedSlices,
    AddedLanes,
}

impl ChangeKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ChangeKind::GzipDamage => "gzip_damage",
            ChangeKind::GzipMembers => "gzip_members",
            ChangeKind::Truncated => "truncated",
            ChangeKind::UnreadableTail => "unreadable_tail",
            ChangeKind::TrailingData => "trailing_data",
            ChangeKind::WrappedArray => "wrapped_array",
            ChangeKind::ClosedArray => "closed_array",
            ChangeKind::AddedTraceEvents => "added_trace_events",
            ChangeKind::DroppedMembers => "dropped_members",
            ChangeKind::DroppedEvents => "dropped_events",
            ChangeKind::DroppedElements => "dropped_elements",
            ChangeKind::Fixed(Fix::Quote) => "escaped_quotes",
            ChangeKind::Fixed(Fix::Backslash) => "escaped_backslashes",
            ChangeKind::Fixed(Fix::Control) => "escaped_control_characters",
            ChangeKind::Fixed(Fix::Utf8) => "replaced_invalid_utf8",
            ChangeKind::Fixed(Fix::NonFinite) => "non_finite_numbers",
            ChangeKind::Fixed(Fix::BareWord) => "bare_words",
            ChangeKind::Fixed(Fix::Comma) => "commas",
            ChangeKind::MovedSlices => "moved_slices",
            ChangeKind::AddedLanes => "added_lanes",
        }
    }
}

impl ReportKind for ChangeKind {
    /// What `n` of them are.
    fn describe(self, n: u64) -> String {
        match self {
            ChangeKind::GzipDamage => {
                "the gzip data is corrupt or truncated: kept what decompressed before it".into()
            }
            ChangeKind::GzipMembers => format!("{n} gzip members joined into one text"),
            ChangeKind::Truncated => {
                "the text ended early: closed the document after the last complete event".into()
            }
            ChangeKind::UnreadableTail => {
                "the rest of the text could not be read on: closed the document there".into()
            }
            ChangeKind::TrailingData => "dropped data after the top-level value".into(),
            ChangeKind::WrappedArray => {
                "the top level was an array of events: wrapped as {\"traceEvents\": [...]}".into()
            }
            ChangeKind::ClosedArray => "the array of events had no closing ']' (the JSON Array \
                Format allows it): closed after its last event"
                .into(),
            ChangeKind::AddedTraceEvents => "no \"traceEvents\": added an empty one".into(),
            ChangeKind::DroppedMembers => {
                format!("{n} top-level members dropped (unrepairable, or a second \"traceEvents\")")
            }
            ChangeKind::DroppedEvents => format!("{n} events dropped: damage not repairable"),
            ChangeKind::DroppedElements => {
                format!("{n} elements of \"traceEvents\" that are not objects dropped")
            }
            ChangeKind::Fixed(Fix::Quote) => format!("{n} raw '\"' in strings escaped"),
            ChangeKind::Fixed(Fix::Backslash) => {
                format!("{n} backslash(es) starting no valid escape escaped")
            }
            ChangeKind::Fixed(Fix::Control) => {
                format!("{n} raw control characters in strings escaped")
            }
            ChangeKind::Fixed(Fix::Utf8) => {
                format!("{n} invalid UTF-8 sequences replaced by U+FFFD")
            }
            ChangeKind::Fixed(Fix::NonFinite) => {
                format!("{n} NaN/Infinity numbers written as strings")
            }
            ChangeKind::Fixed(Fix::BareWord) => {
                format!("{n} other bare words written as strings")
            }
            ChangeKind::Fixed(Fix::Comma) => format!("{n} stray or missing commas fixed"),
            ChangeKind::MovedSlices => format!(
                "{n} X events Perfetto would drop for overlapping moved to extra thread lanes"
            ),
            ChangeKind::AddedLanes => format!("{n} thread lanes added"),
        }
    }
}

/// One kind of change, counted, with its first places.
pub(crate) type Change = Counted<ChangeKind>;

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RepairReport {
    /// The changes, in a fixed order of kinds; empty when there was nothing to repair.
    pub(crate) changes: Vec<Change>,
    /// Bytes of JSON read from the source (decompressed, last pass) and written.
    pub(crate) json_bytes_read: u64,
    pub(crate) json_bytes_written: u64,
    /// Elements of `traceEvents` read, and events written.
    pub(crate) events_read: u64,
    pub(crate) events_written: u64,
}

/// How [`repair`] works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RepairOptions {
    /// Move the events Perfetto drops for overlapping to extra lanes.
    pub(crate) untangle: bool,
    /// Places kept per kind of change.
    pub(crate) examples: usize,
    /// The destination's encoding.
    pub(crate) encoding: Encoding,
}

/// A private file beside `dst` for an intermediate text, removed on drop.
struct Intermediate(PathBuf);

impl Drop for Intermediate {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Writes to `dst` the best loadable trace `src` holds (see the module docs); returns what
/// was changed (nothing: the text was copied unchanged). `src` is never written; `dst`
/// appears atomically, or not at all.
pub(crate) fn repair(
    src: &Path,
    dst: &Path,
    options: RepairOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<RepairReport> {
    let encoding = options.encoding.validate()?;
    check_paths(src, dst)?;
    let checked = check::check_path(
        src,
        CheckOptions {
            examples: 0,
            ..CheckOptions::default()
        },
        progress,
    )?;
    let loads = checked.valid();
    let overlapping = checked
        .warnings
        .iter()
        .any(|w| w.kind == FindingKind::OverlappingSlices);
    let members = checked.summary.gzip_members;
    let mut changes = Tally::new(options.examples);
    // The array form loads, but it is written as the object form: untangled, or by the
    // tolerant pass, which copies its events byte for byte and notes the changes.
    let array = matches!(checked.form, Form::Array { .. });
    let mut report = if !loads {
        if options.untangle {
            let (r, fixed) =
                tolerant_then_untangle(src, dst, encoding, changes, options, progress)?;
            changes = fixed;
            r
        } else {
            let out = Sink::create(dst, encoding)?;
            let (r, fixed) = tolerant_pass(src, out, changes, progress)?;
            changes = fixed;
            r
        }
    } else if options.untangle && (overlapping || array) {
        if members > 1 {
            changes.count(ChangeKind::GzipMembers, u64::from(members));
        }
        note_array(&mut changes, checked.form, checked.summary.json_bytes);
        let out = Sink::create(dst, encoding)?;
        untangle(src, out, &mut changes, options.examples, progress)?
    } else if array {
        let out = Sink::create(dst, encoding)?;
        let (r, fixed) = tolerant_pass(src, out, changes, progress)?;
        changes = fixed;
        r
    } else {
        if members > 1 {
            changes.count(ChangeKind::GzipMembers, u64::from(members));
        }
        let out = Sink::create(dst, encoding)?;
        let plain = members == 0 && encoding == Encoding::Plain;
        let (read, written) = copy_text(src, out, plain, progress)?;
        RepairReport {
            changes: Vec::new(),
            json_bytes_read: read,
            json_bytes_written: written,
            events_read: checked.summary.events,
            events_written: checked.summary.events,
        }
    };
    report.changes = changes.into_list();
    Ok(report)
}

/// The changes of writing an array-form source as the object form, as the tolerant pass
/// notes them (untangling writes the object form itself): the `[` at `at`, and the `]`
/// due at `end` when the text left it off.
fn note_array(changes: &mut Tally<ChangeKind>, form: Form, end: u64) {
    let Form::Array { at, closed } = form else {
        return;
    };
    changes.add(ChangeKind::WrappedArray, 1, at, None, || {
        "a JSON array of events".into()
    });
    if !closed {
        changes.add(ChangeKind::ClosedArray, 1, end, None, || {
            "the text ends without the ']' closing the array".into()
        });
    }
}

/// A source repair can read more than once, and a destination that is not it.
fn check_paths(src: &Path, dst: &Path) -> Result<()> {
    let meta =
        fs::metadata(src).map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
    if !meta.is_file() {
        return Err(Error::InvalidArgument(format!(
            "{}: not a regular file (repair reads its source more than once: copy it to a \
             file first)",
            src.display()
        )));
    }
    if let (Ok(a), Ok(b)) = (fs::canonicalize(src), fs::canonicalize(dst)) {
        if a == b {
            return Err(Error::InvalidArgument(format!(
                "{}: the destination is the source; repair never modifies its source",
                dst.display()
            )));
        }
    }
    Ok(())
}

/// A trace that does not load, untangled: the tolerant pass into a temporary file, then
/// the untangling of that into `dst`.
fn tolerant_then_untangle(
    src: &Path,
    dst: &Path,
    encoding: Encoding,
    changes: Tally<ChangeKind>,
    options: RepairOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(RepairReport, Tally<ChangeKind>)> {
    // A temporary of the usual shape, so one a killed repair leaves is removed by the next
    // run in that directory (see `crate::output::temps`).
    let dir = dst.parent().filter(|p| !p.as_os_str().is_empty());
    let name = dst.file_name().unwrap_or(std::ffi::OsStr::new("trace"));
    let (_, path) =
        crate::output::temps::create(dir.unwrap_or(Path::new(".")), name).map_err(|e| {
            Error::io(
                format!("cannot create a temporary file for {}", dst.display()),
                e,
            )
        })?;
    let temp = Intermediate(path);
    let sink = Sink::create(&temp.0, Encoding::Plain)?;
    let (first, mut changes) = tolerant_pass(src, sink, changes, progress)?;
    let out = Sink::create(dst, encoding)?;
    let mut r = untangle(&temp.0, out, &mut changes, options.examples, progress)?;
    r.json_bytes_read = first.json_bytes_read;
    r.events_read = first.events_read;
    Ok((r, changes))
}
