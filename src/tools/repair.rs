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
//! [`MAX_VALUE`]: a longer event or top-level value is dropped); untangling holds the
//! overlap rule's state ([`crate::tools::overlap`]), about 30 bytes per moved event, and the names
//! of threads.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::json::lexer::{BUF_SIZE, PROGRESS_EVERY};
use crate::json::object::{member, Duplicates::First};
use crate::json::render::quoted;
use crate::json::scan::Scanner;
use crate::json::tolerant::{Damage, Fix, Fixer, Place};
use crate::output::sink::{Encoding, Sink};
use crate::read::events::{read_trace, Event, Form, Visitor};
use crate::read::members::Source;
use crate::tools::check::{self, CheckOptions, FindingKind};
use crate::tools::overlap::{self, Overlaps};
use crate::tools::report::{Counted, ReportKind, Tally};

/// Most bytes of one event or top-level value the tolerant reader holds.
pub(crate) const MAX_VALUE: usize = 64 << 20;

/// Bytes of text first made available for a value.
const FIRST_WINDOW: usize = 1 << 20;

/// Most whitespace kept between two items (more is dropped: it is only whitespace).
const MAX_SEPARATOR: usize = 4096;

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

/// The decompressed text of a file, ending (instead of failing) where gzip data is corrupt
/// or truncated, or is followed by data that is not gzip; I/O errors still fail.
struct Forgiving<R: BufRead> {
    inner: Source<R>,
    read: u64,
    /// Why it ended early.
    stopped: Option<String>,
}

impl<R: BufRead> Read for Forgiving<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stopped.is_some() {
            return Ok(0);
        }
        loop {
            match self.inner.read(buf) {
                Ok(n) => {
                    self.read += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error().is_some() => return Err(e),
                Err(e) => {
                    self.stopped = Some(e.to_string());
                    return Ok(0);
                }
            }
        }
    }
}

/// The text being read, a window of it in memory.
struct Window<R: Read> {
    src: R,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Offset of `buf[0]` in the text.
    base: u64,
    eof: bool,
    next_progress: u64,
}

impl<R: Read> Window<R> {
    fn new(src: R) -> Self {
        Window {
            src,
            buf: vec![0; BUF_SIZE],
            pos: 0,
            len: 0,
            base: 0,
            eof: false,
            next_progress: PROGRESS_EVERY,
        }
    }

    fn avail(&self) -> &[u8] {
        &self.buf[self.pos..self.len]
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Makes at least `want` bytes readable from the position (fewer only at the end).
    fn fill(&mut self, want: usize, progress: &mut dyn FnMut(u64) -> Result<()>) -> Result<()> {
        if self.len - self.pos >= want || self.eof {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.len, 0);
        self.base += self.pos as u64;
        self.len -= self.pos;
        self.pos = 0;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.len < want && !self.eof {
            let n = self
                .src
                .read(&mut self.buf[self.len..])
                .map_err(|e| Error::io("cannot read", e))?;
            if n == 0 {
                self.eof = true;
            }
            self.len += n;
            let done = self.base + self.len as u64;
            if done >= self.next_progress {
                self.next_progress = done + PROGRESS_EVERY;
                progress(done)?;
            }
        }
        Ok(())
    }

    /// The next byte, if any.
    fn peek(&mut self, progress: &mut dyn FnMut(u64) -> Result<()>) -> Result<Option<u8>> {
        if self.pos == self.len {
            self.fill(BUF_SIZE, progress)?;
        }
        Ok(self.avail().first().copied())
    }
}

/// How the reading of a container ended.
#[derive(PartialEq, Eq)]
enum End {
    /// At its closer.
    Closed,
    /// The text ended, or could not be read on: the document is to be closed.
    Cut,
}

/// The tolerant pass: reads the source's text, writes the repaired one.
struct Tolerant<'p, R: Read> {
    w: Window<R>,
    out: Sink,
    progress: &'p mut dyn FnMut(u64) -> Result<()>,
    /// Separator bytes (whitespace, commas) read since the last item written.
    pending: Vec<u8>,
    commas: usize,
    changes: Tally<ChangeKind>,
    events_read: u64,
    events_written: u64,
}

/// A value read with the tolerant reader.
enum Value {
    /// Its repaired text (`None`: the text as it is), and the length of text it took.
    Read(Option<Vec<u8>>, usize),
    /// The text ends inside it.
    Cut,
    /// Not repairable (at this offset: the message).
    Bad(u64, String),
}

impl<R: Read> Tolerant<'_, R> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes)
    }

    /// Writes a value read (see [`Value::Read`]) and moves past its text.
    fn write_value(&mut self, text: Option<Vec<u8>>, len: usize) -> Result<()> {
        match text {
            Some(t) => self.out.write_all(&t)?,
            None => self
                .out
                .write_all(&self.w.buf[self.w.pos..self.w.pos + len])?,
        }
        self.w.pos += len;
        Ok(())
    }

    /// Reads whitespace and commas into `pending`: the next byte after them, if any.
    fn separator(&mut self) -> Result<Option<u8>> {
        self.pending.clear();
        self.commas = 0;
        loop {
            let Some(b) = self.w.peek(self.progress)? else {
                return Ok(None);
            };
            match b {
                b' ' | b'\n' | b'\r' | b'\t' | b',' => {
                    if b == b',' {
                        self.commas += 1;
                    }
                    if self.pending.len() < MAX_SEPARATOR || b == b',' {
                        self.pending.push(b);
                    }
                    self.w.pos += 1;
                }
                _ => return Ok(Some(b)),
            }
        }
    }

    /// Writes the separator before an item (`first`: the first written in its container;
    /// `after_item`: one was read before it, written or dropped), or before the closer
    /// (`closing`), with exactly the commas it needs. Commas the text should not have had
    /// (or lacked) are counted; those only dropped items made wrong are not.
    fn write_separator(&mut self, first: bool, after_item: bool, closing: bool) -> Result<()> {
        let want = usize::from(!first && !closing);
        let expected = usize::from(after_item && !closing);
        if self.commas != expected {
            let at = self.w.offset();
            let fixed = self.commas.abs_diff(expected) as u64;
            self.changes
                .add(ChangeKind::Fixed(Fix::Comma), fixed, at, None, || {
                    "commas before this item fixed".into()
                });
        }
        let mut sep = std::mem::take(&mut self.pending);
        if self.commas != want {
            sep.retain(|&b| b != b',');
            if want == 1 {
                sep.insert(0, b',');
            }
        }
        self.write(&sep)?;
        self.pending = sep;
        self.pending.clear();
        self.commas = 0;
        Ok(())
    }

    /// Reads the value at the position with the tolerant reader, in `place`.
    fn value(&mut self, place: Place) -> Result<Value> {
        // Most values are short: look at what is there (at least a scanner's window), and
        // read more only for a value that goes on past it.
        let mut want = crate::json::scan::WINDOW;
        loop {
            self.w.fill(want, self.progress)?;
            let avail = self.w.avail();
            // Valid text: the strict scanner's fast path, copied as is.
            if place != Place::Key {
                let mut s = Scanner::new(avail);
                if s.value(0).is_some() {
                    return Ok(Value::Read(None, s.pos));
                }
            }
            let mut fixer = Fixer::new(avail);
            match fixer.value_at_start(place) {
                Ok(len) => {
                    let base = self.w.offset();
                    let index = (place == Place::InArray).then_some(self.events_read);
                    for &(fix, at) in &fixer.fixes {
                        self.changes.add(
                            ChangeKind::Fixed(fix),
                            1,
                            base + at as u64,
                            index,
                            || fix_message(fix),
                        );
                    }
                    let text = (!fixer.fixes.is_empty()).then_some(fixer.out);
                    return Ok(Value::Read(text, len));
                }
                Err(Damage::Incomplete) if self.w.eof => return Ok(Value::Cut),
                Err(Damage::Incomplete) if avail.len() < MAX_VALUE => {
                    want = (avail.len().max(FIRST_WINDOW) * 4).min(MAX_VALUE);
                }
                Err(Damage::Incomplete) => {
                    return Ok(Value::Bad(
                        self.w.offset(),
                        format!("longer than {} MiB", MAX_VALUE >> 20),
                    ))
                }
                Err(Damage::Unrepairable(at, msg)) => {
                    return Ok(Value::Bad(self.w.offset() + at as u64, msg))
                }
            }
        }
    }

    /// Moves past the next event start (see the module docs): false at the end of the text.
    fn resync(&mut self) -> Result<bool> {
        // Past the first byte of what was dropped, then to a `{` after `,` and a newline.
        self.w.pos += 1;
        let mut last = 0u8;
        let mut newline = false;
        loop {
            if self.w.pos == self.w.len {
                self.w.fill(BUF_SIZE, self.progress)?;
                if self.w.pos == self.w.len {
                    return Ok(false);
                }
            }
            let b = self.w.buf[self.w.pos];
            match b {
                b'\n' => newline = true,
                b' ' | b'\t' | b'\r' => {}
                b'{' if newline && last == b',' => return Ok(true),
                _ => {
                    last = b;
                    newline = false;
                }
            }
            self.w.pos += 1;
        }
    }

    /// Reads a document and writes its repair.
    fn document(&mut self) -> Result<()> {
        let first = self.separator()?;
        let mut leading = std::mem::take(&mut self.pending);
        if self.commas > 0 {
            leading.retain(|&b| b != b',');
            let n = self.commas as u64;
            self.changes
                .add(ChangeKind::Fixed(Fix::Comma), n, 0, None, || {
                    "commas before the top-level value".into()
                });
        }
        match first {
            Some(b'{') => {
                self.write(&leading)?;
                self.write(b"{")?;
                self.w.pos += 1;
                self.top_object()?;
            }
            Some(b'[') => {
                let at = self.w.offset();
                self.changes.add(ChangeKind::WrappedArray, 1, at, None, || {
                    "a JSON array of events".into()
                });
                self.write(b"{\"traceEvents\": [")?;
                self.w.pos += 1;
                let end = self.events(true)?;
                self.write(if end == End::Closed { b"]}" } else { b"\n]}" })?;
                if end == End::Cut {
                    self.write(b"\n")?;
                    return Ok(());
                }
            }
            None => {
                return Err(Error::InvalidArgument(
                    "the file holds no JSON text: nothing to repair".into(),
                ))
            }
            Some(b) => {
                return Err(Error::InvalidArgument(format!(
                    "not a trace: the text starts with {}, not a JSON object or array",
                    crate::json::lexer::show(b)
                )))
            }
        }
        // After the top-level value.
        let at = self.w.offset();
        let trailing = self.separator()?;
        let ws = std::mem::take(&mut self.pending);
        if trailing.is_some() || self.commas > 0 {
            self.changes.add(ChangeKind::TrailingData, 1, at, None, || {
                "data after the top-level value".into()
            });
            self.write(b"\n")
        } else {
            self.write(&ws)
        }
    }

    /// A top-level key (its text as written, or as repaired); `None` when the text ends or
    /// cannot be read on there (the change noted).
    fn top_key(&mut self) -> Result<Option<Vec<u8>>> {
        let at = self.w.offset();
        Ok(match self.value(Place::Key)? {
            Value::Read(text, len) => {
                let key = text.unwrap_or_else(|| self.w.avail()[..len].to_vec());
                self.w.pos += len;
                Some(key)
            }
            Value::Cut => {
                self.changes.add(ChangeKind::Truncated, 1, at, None, || {
                    "the text ends inside a top-level key".into()
                });
                None
            }
            Value::Bad(at, msg) => {
                self.changes
                    .add(ChangeKind::UnreadableTail, 1, at, None, || msg);
                None
            }
        })
    }

    /// The `:` after a top-level key with the whitespace around it (as written), and the
    /// first byte of the value; `None` when there is no `:` or no value (the change noted).
    fn top_colon(&mut self) -> Result<Option<(Vec<u8>, u8)>> {
        let mut colon = Vec::new();
        let ok = loop {
            match self.w.peek(self.progress)? {
                Some(b @ (b' ' | b'\n' | b'\r' | b'\t' | b':')) => {
                    colon.push(b);
                    self.w.pos += 1;
                    if b == b':' {
                        break true;
                    }
                }
                _ => break false,
            }
        };
        let value_start = loop {
            match self.w.peek(self.progress)? {
                Some(b @ (b' ' | b'\n' | b'\r' | b'\t')) if ok => {
                    colon.push(b);
                    self.w.pos += 1;
                }
                other => break other,
            }
        };
        match value_start {
            Some(b) if ok => Ok(Some((colon, b))),
            _ => {
                let at = self.w.offset();
                let kind = if value_start.is_none() {
                    ChangeKind::Truncated
                } else {
                    ChangeKind::UnreadableTail
                };
                self.changes
                    .add(kind, 1, at, None, || "no ':' after a top-level key".into());
                Ok(None)
            }
        }
    }

    /// Inside the top-level object, after its `{`.
    fn top_object(&mut self) -> Result<()> {
        let mut items = 0usize;
        let mut read = 0usize;
        let mut have_events = false;
        loop {
            let Some(b) = self.separator()? else {
                let at = self.w.offset();
                self.changes.add(ChangeKind::Truncated, 1, at, None, || {
                    "the text ends inside the top-level object".into()
                });
                break;
            };
            if b == b'}' {
                if !have_events {
                    self.add_events(items == 0)?;
                    items += 1;
                }
                self.write_separator(items == 0, true, true)?;
                self.write(b"}")?;
                self.w.pos += 1;
                return Ok(());
            }
            let at = self.w.offset();
            let Some(key) = self.top_key()? else { break };
            let Some((colon, value_start)) = self.top_colon()? else {
                break;
            };
            let is_events = key == b"\"traceEvents\"";
            let after_item = read > 0;
            read += 1;
            if is_events && !have_events && value_start == b'[' {
                have_events = true;
                self.write_separator(items == 0, after_item, false)?;
                items += 1;
                if self.events_member(&key, &colon)? == End::Cut {
                    break;
                }
                continue;
            }
            match self.value(Place::InObject)? {
                Value::Read(text, len) => {
                    if is_events {
                        self.w.pos += len;
                        self.changes
                            .add(ChangeKind::DroppedMembers, 1, at, None, || {
                                if have_events {
                                    "a second \"traceEvents\"".into()
                                } else {
                                    "\"traceEvents\" is not an array".into()
                                }
                            });
                        continue;
                    }
                    self.write_separator(items == 0, after_item, false)?;
                    items += 1;
                    self.write(&key)?;
                    self.write(&colon)?;
                    self.write_value(text, len)?;
                }
                Value::Cut => {
                    self.changes.add(ChangeKind::Truncated, 1, at, None, || {
                        "the text ends inside a top-level value".into()
                    });
                    break;
                }
                Value::Bad(at, msg) => {
                    self.changes
                        .add(ChangeKind::UnreadableTail, 1, at, None, || msg);
                    break;
                }
            }
        }
        self.end_cut(have_events, items)
    }

    /// The `traceEvents` array, at its `[`: key, colon and the events read, closed (on a new
    /// line when the text was cut inside it).
    fn events_member(&mut self, key: &[u8], colon: &[u8]) -> Result<End> {
        self.write(key)?;
        self.write(colon)?;
        self.write(b"[")?;
        self.w.pos += 1;
        let end = self.events(false)?;
        self.write(if end == End::Cut { b"\n]" } else { b"]" })?;
        Ok(end)
    }

    /// The end of a top-level object the text was cut in (it ended, or cannot be read on):
    /// an empty `traceEvents` when it had none, then `}`.
    fn end_cut(&mut self, have_events: bool, items: usize) -> Result<()> {
        if !have_events {
            self.add_events(items == 0)?;
        }
        self.write(b"\n}\n")?;
        // Nothing after a cut is read (its offset is where reading stopped).
        self.w.pos = self.w.len;
        self.w.eof = true;
        Ok(())
    }

    /// Writes an empty `traceEvents` member (none was read).
    fn add_events(&mut self, first: bool) -> Result<()> {
        let at = self.w.offset();
        self.changes
            .add(ChangeKind::AddedTraceEvents, 1, at, None, || {
                "no \"traceEvents\" array".into()
            });
        self.write(if first {
            b"\n\"traceEvents\": []"
        } else {
            b",\n\"traceEvents\": []"
        })
    }

    /// The elements of `traceEvents` (`top`: of the top-level array), after its `[`: how
    /// the array ended.
    fn events(&mut self, top: bool) -> Result<End> {
        let mut resynced = false;
        loop {
            let next = self.separator()?;
            if std::mem::take(&mut resynced) {
                // The separator before the event resynced to was passed over.
                self.commas = 1;
                self.pending.clear();
                self.pending.extend_from_slice(b",\n");
            }
            let Some(b) = next else {
                let at = self.w.offset();
                let index = self.events_read;
                if top {
                    // Between events: the array form's `]` may be left off.
                    self.changes.add(ChangeKind::ClosedArray, 1, at, None, || {
                        "the text ends without the ']' closing the array".into()
                    });
                    return Ok(End::Cut);
                }
                self.changes
                    .add(ChangeKind::Truncated, 1, at, Some(index), || {
                        "the text ends inside \"traceEvents\"".into()
                    });
                return Ok(End::Cut);
            };
            if b == b']' {
                self.write_separator(self.events_written == 0, true, true)?;
                self.w.pos += 1;
                return Ok(End::Closed);
            }
            let at = self.w.offset();
            let index = self.events_read;
            let after_item = index > 0;
            match self.value(Place::InArray)? {
                Value::Read(text, len) => {
                    self.events_read += 1;
                    if b == b'{' {
                        self.write_separator(self.events_written == 0, after_item, false)?;
                        self.events_written += 1;
                        self.write_value(text, len)?;
                    } else {
                        self.w.pos += len;
                        self.changes
                            .add(ChangeKind::DroppedElements, 1, at, Some(index), || {
                                "not an object".into()
                            });
                    }
                }
                Value::Cut => {
                    self.changes
                        .add(ChangeKind::Truncated, 1, at, Some(index), || {
                            "the text ends inside this event: it is dropped".into()
                        });
                    return Ok(End::Cut);
                }
                Value::Bad(bad_at, msg) => {
                    self.events_read += 1;
                    self.changes
                        .add(ChangeKind::DroppedEvents, 1, at, Some(index), || {
                            format!("{msg} (at offset {bad_at})")
                        });
                    if !self.resync()? {
                        let end = self.w.offset();
                        self.changes
                            .add(ChangeKind::UnreadableTail, 1, at, Some(index), || {
                                format!("no event starts after it: {} bytes dropped", end - at)
                            });
                        return Ok(End::Cut);
                    }
                    resynced = true;
                }
            }
        }
    }
}

fn fix_message(fix: Fix) -> String {
    match fix {
        Fix::Quote => "a raw '\"' in a string",
        Fix::Backslash => "a backslash starting no valid escape",
        Fix::Control => "a raw control character in a string",
        Fix::Utf8 => "an invalid UTF-8 sequence",
        Fix::NonFinite => "NaN or Infinity",
        Fix::BareWord => "a bare word",
        Fix::Comma => "a stray comma",
    }
    .into()
}

/// Opens `path` as its decompressed text, ending where gzip data is damaged.
fn open_forgiving(path: &Path) -> Result<Forgiving<BufReader<File>>> {
    let file =
        File::open(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    let source = Source::detect(BufReader::with_capacity(BUF_SIZE, file))
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    Ok(Forgiving {
        inner: source,
        read: 0,
        stopped: None,
    })
}

/// The tolerant pass from `src` into `out`.
fn tolerant_pass(
    src: &Path,
    out: Sink,
    changes: Tally<ChangeKind>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(RepairReport, Tally<ChangeKind>)> {
    let mut t = Tolerant {
        w: Window::new(open_forgiving(src)?),
        out,
        progress,
        pending: Vec::new(),
        commas: 0,
        changes,
        events_read: 0,
        events_written: 0,
    };
    let named = |e: Error| match e {
        Error::Io { context, source } if context == "cannot read" => {
            Error::io(format!("cannot read {}", src.display()), source)
        }
        Error::InvalidArgument(msg) => Error::not_a_trace(src, msg),
        other => other,
    };
    t.document().map_err(named)?;
    let forgiving = &t.w.src;
    if let Some(why) = &forgiving.stopped {
        let at = forgiving.read;
        let why = why.clone();
        t.changes.add(ChangeKind::GzipDamage, 1, at, None, || why);
    }
    let members = forgiving.inner.members();
    if members > 1 {
        t.changes.count(ChangeKind::GzipMembers, u64::from(members));
    }
    let read = t.w.offset();
    let stats = t.out.finish()?;
    Ok((
        RepairReport {
            changes: Vec::new(),
            json_bytes_read: read,
            json_bytes_written: stats.uncompressed_bytes,
            events_read: t.events_read,
            events_written: t.events_written,
        },
        t.changes,
    ))
}

/// Copies the decompressed text of `src` into `out` unchanged (plain text into plain output
/// file to file, in the kernel where it can).
fn copy_text(
    src: &Path,
    mut out: Sink,
    plain: bool,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(u64, u64)> {
    if plain {
        let file =
            File::open(src).map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot read {}", src.display()), e))?
            .len();
        progress(0)?;
        out.append_slice(file, len, None)?;
        let stats = out.finish()?;
        return Ok((len, stats.uncompressed_bytes));
    }
    let mut input = open_forgiving(src)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut next = PROGRESS_EVERY;
    loop {
        let n = input
            .read(&mut buf)
            .map_err(|e| Error::io(format!("cannot read {}", src.display()), e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        done += n as u64;
        if done >= next {
            next = done + PROGRESS_EVERY;
            progress(done)?;
        }
    }
    if let Some(why) = input.stopped {
        // The check found the file loads, so this cannot happen unless it changed since.
        return Err(Error::InvalidArgument(format!(
            "{}: changed while being repaired ({why})",
            src.display()
        )));
    }
    let stats = out.finish()?;
    Ok((done, stats.uncompressed_bytes))
}

// ---------------------------------------------------------------------------------------
// Untangling
// ---------------------------------------------------------------------------------------

/// The first pass of untangling: the overlap rule with lanes, and what lanes are named by.
struct Survey {
    overlaps: Overlaps,
    /// Largest numeric `tid` (or `pid`) per `pid` (type-tagged).
    max_tid: HashMap<Box<[u8]>, u64>,
    /// `thread_name` (raw JSON string) and `thread_sort_index` (raw value) per thread key.
    names: HashMap<Box<[u8]>, Box<[u8]>>,
    sort_indices: HashMap<Box<[u8]>, Box<[u8]>>,
}

/// A type-tagged number as an integer, when it is one.
fn tagged_int(tagged: &[u8]) -> Option<u64> {
    let (b'n', text) = tagged.split_first()? else {
        return None;
    };
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl Visitor for Survey {
    fn header(&mut self, _key: &[u8], _raw: &[u8], _after_events: bool) -> Result<()> {
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        let tid = &ev.thread_key[ev.pid_key.len().min(ev.thread_key.len())..];
        let tid = tid.get(1..).unwrap_or(b"");
        let numbers = [tagged_int(tid), tagged_int(ev.pid_key)];
        if let Some(n) = numbers.into_iter().flatten().max() {
            let full = self.max_tid.len() >= check::MAX_DISTINCT;
            match self.max_tid.get_mut(ev.pid_key) {
                Some(m) => *m = (*m).max(n),
                None if !full => {
                    self.max_tid.insert(ev.pid_key.into(), n);
                }
                None => {}
            }
        }
        self.overlaps.feed(ev);
        if !ev.is_metadata() {
            return Ok(());
        }
        let (map, field) = match ev.name {
            b"thread_name" => (&mut self.names, &b"name"[..]),
            b"thread_sort_index" => (&mut self.sort_indices, &b"sort_index"[..]),
            _ => return Ok(()),
        };
        let value = member(ev.raw, b"args", First).and_then(|a| member(a, field, First));
        if let Some(v) = value {
            if !map.contains_key(ev.thread_key) && map.len() < check::MAX_DISTINCT {
                map.insert(ev.thread_key.into(), v.into());
            }
        }
        Ok(())
    }
}

/// A lane: the thread it relieves, its number, and its `tid`.
struct Lane {
    pid_key: Box<[u8]>,
    tid: u64,
    name: String,
    sort_index: Option<Box<[u8]>>,
}

/// `raw` (an event object, valid JSON) with its `tid` set to `tid`.
fn with_tid(raw: &[u8], tid: u64) -> Vec<u8> {
    let mut digits = Vec::new();
    crate::json::render::push_int(&mut digits, tid);
    let mut s = Scanner::new(raw);
    let span = (|| {
        s.ws()?;
        s.pos += 1;
        if s.ws()? == b'}' {
            return None;
        }
        loop {
            let k = s.key()?;
            s.ws()?;
            let start = s.pos;
            s.value(0)?;
            if &raw[k.start..k.end] == b"tid" {
                return Some((start, s.pos));
            }
            match s.ws()? {
                b',' => s.pos += 1,
                _ => return None,
            }
        }
    })();
    let mut out = Vec::with_capacity(raw.len() + 16);
    match span {
        Some((start, end)) => {
            out.extend_from_slice(&raw[..start]);
            out.extend_from_slice(&digits);
            out.extend_from_slice(&raw[end..]);
        }
        None => {
            let open = raw.iter().position(|&b| b == b'{').unwrap_or(0);
            out.extend_from_slice(&raw[..=open]);
            out.extend_from_slice(b"\"tid\":");
            out.extend_from_slice(&digits);
            let rest = &raw[open + 1..];
            if rest.iter().any(|b| !b.is_ascii_whitespace() && *b != b'}') {
                out.push(b',');
            }
            out.extend_from_slice(rest);
        }
    }
    out
}

/// The second pass of untangling: writes every event, moved ones on their lanes.
struct Untangling<'a> {
    out: Sink,
    moves: &'a HashMap<u64, (u32, u32)>,
    lane_tids: &'a HashMap<(u32, u32), u64>,
    /// The last non-flow event: its thread, span and lane `tid` if moved.
    last: Option<(Vec<u8>, f64, f64, Option<u64>)>,
    members: u64,
    events: u64,
    after: Vec<Box<[u8]>>,
    in_events: bool,
    moved_flows: u64,
    read: u64,
}

impl Untangling<'_> {
    fn member(&mut self, raw: &[u8]) -> Result<()> {
        self.out
            .write_all(if self.members == 0 { b"{\n" } else { b",\n" })?;
        self.members += 1;
        self.out.write_all(raw)
    }

    fn open_events(&mut self) -> Result<()> {
        if !self.in_events {
            self.member(b"\"traceEvents\": [")?;
            self.in_events = true;
        }
        Ok(())
    }

    fn event_text(&mut self, raw: &[u8]) -> Result<()> {
        self.out
            .write_all(if self.events == 0 { b"\n" } else { b",\n" })?;
        self.events += 1;
        self.out.write_all(raw)
    }
}

impl Visitor for Untangling<'_> {
    fn header(&mut self, _key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        if after_events {
            self.after.push(raw.into());
            Ok(())
        } else {
            self.member(raw)
        }
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.open_events()?;
        self.read += 1;
        let mut lane = None;
        if ev.is_flow() {
            if let (Some((thread, ts, end, moved)), Some(t)) = (&self.last, ev.ts) {
                if *thread == ev.thread_key && *ts <= t && t <= *end {
                    lane = *moved;
                    self.moved_flows += u64::from(moved.is_some());
                }
            }
        } else {
            lane = self
                .moves
                .get(&ev.index)
                .and_then(|key| self.lane_tids.get(key))
                .copied();
            self.last = ev.ts.map(|ts| {
                let end = ts + ev.dur.unwrap_or(0.0).max(0.0);
                (ev.thread_key.to_vec(), ts, end, lane)
            });
        }
        match lane {
            Some(tid) => {
                let text = with_tid(ev.raw, tid);
                self.event_text(&text)
            }
            None => self.event_text(ev.raw),
        }
    }
}

/// The lanes of the tracks with dropped slices, in the order of tracks, numbered above each
/// process's largest tid; the tid of each (track, lane).
fn plan_lanes(survey: &Survey) -> (Vec<Lane>, HashMap<(u32, u32), u64>) {
    let mut next_tid: HashMap<Box<[u8]>, u64> = HashMap::new();
    let mut lanes = Vec::new();
    let mut lane_tids = HashMap::new();
    for (t, track) in survey.overlaps.tracks.iter().enumerate() {
        if track.lanes == 0 {
            continue;
        }
        let mut thread_key = track.pid_key.to_vec();
        thread_key.push(0);
        thread_key.extend_from_slice(&track.tid_key);
        let base_name = match survey.names.get(thread_key.as_slice()) {
            Some(raw) => json_string_text(raw),
            None => format!("thread {}", display_tagged(&track.tid_key)),
        };
        let next = next_tid.entry(track.pid_key.clone()).or_insert_with(|| {
            survey
                .max_tid
                .get(&track.pid_key)
                .map_or(1, |m| m.saturating_add(1))
        });
        for k in 1..=track.lanes {
            let tid = *next;
            *next += 1;
            lane_tids.insert((t as u32, k as u32), tid);
            lanes.push(Lane {
                pid_key: track.pid_key.clone(),
                tid,
                name: format!("{} (overlap {k})", base_name.trim_end()),
                sort_index: survey.sort_indices.get(thread_key.as_slice()).cloned(),
            });
        }
    }
    (lanes, lane_tids)
}

/// The changes of an untangling: the examples of moved slices (where each went), and the
/// counts of slices moved and lanes added.
fn note_moves(
    changes: &mut Tally<ChangeKind>,
    examples: &[overlap::Dropped],
    moves: &HashMap<u64, (u32, u32)>,
    lane_tids: &HashMap<(u32, u32), u64>,
    lanes: &[Lane],
) {
    let mut examples_moved: Vec<&overlap::Dropped> = examples.iter().collect();
    examples_moved.sort_by_key(|d| d.offset);
    for d in examples_moved {
        let tid = moves
            .get(&d.index)
            .and_then(|key| lane_tids.get(key))
            .copied()
            .unwrap_or(0);
        changes.place(
            ChangeKind::MovedSlices,
            Some(d.offset),
            Some(d.index),
            || {
                format!(
                    "moved to tid {tid}: it starts inside traceEvents[{}]",
                    d.other_index
                )
            },
        );
    }
    if !moves.is_empty() {
        changes.count(ChangeKind::MovedSlices, moves.len() as u64);
        changes.count(ChangeKind::AddedLanes, lanes.len() as u64);
        for lane in lanes {
            changes.place(ChangeKind::AddedLanes, None, None, || {
                format!(
                    "pid {} tid {}: {}",
                    display_tagged(&lane.pid_key),
                    lane.tid,
                    quoted(&lane.name)
                )
            });
        }
    }
}

/// A lane's `thread_name` event, and its `thread_sort_index` event when its thread has one.
fn lane_events(lane: &Lane) -> Vec<Vec<u8>> {
    let mut events = Vec::new();
    let mut m = Vec::new();
    let pid = display_tagged(&lane.pid_key);
    m.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":");
    m.extend_from_slice(pid.as_bytes());
    m.extend_from_slice(b",\"tid\":");
    crate::json::render::push_int(&mut m, lane.tid);
    m.extend_from_slice(b",\"args\":{\"name\":");
    crate::json::render::push_json_string(&mut m, lane.name.as_bytes());
    m.extend_from_slice(b"}}");
    events.push(m);
    if let Some(index) = &lane.sort_index {
        let mut m = Vec::new();
        m.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":");
        m.extend_from_slice(pid.as_bytes());
        m.extend_from_slice(b",\"tid\":");
        crate::json::render::push_int(&mut m, lane.tid);
        m.extend_from_slice(b",\"args\":{\"sort_index\":");
        m.extend_from_slice(index);
        m.extend_from_slice(b"}}");
        events.push(m);
    }
    events
}

/// Rewrites the loadable trace `src` into `out` with the events Perfetto drops for
/// overlapping moved to lanes (see the module docs).
fn untangle(
    src: &Path,
    out: Sink,
    changes: &mut Tally<ChangeKind>,
    examples: usize,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<RepairReport> {
    let mut survey = Survey {
        overlaps: Overlaps::new(examples, true),
        max_tid: HashMap::new(),
        names: HashMap::new(),
        sort_indices: HashMap::new(),
    };
    read_trace(src, &mut survey, progress)?;
    survey.overlaps.finish();
    let (lanes, lane_tids) = plan_lanes(&survey);
    let moves = std::mem::take(&mut survey.overlaps.moves);
    note_moves(
        changes,
        &survey.overlaps.examples,
        &moves,
        &lane_tids,
        &lanes,
    );
    let mut w = Untangling {
        out,
        moves: &moves,
        lane_tids: &lane_tids,
        last: None,
        members: 0,
        events: 0,
        after: Vec::new(),
        in_events: false,
        moved_flows: 0,
        read: 0,
    };
    let read = read_trace(src, &mut w, progress)?;
    w.open_events()?;
    for lane in &lanes {
        for event in lane_events(lane) {
            w.event_text(&event)?;
        }
    }
    w.out.write_all(b"\n]")?;
    for raw in std::mem::take(&mut w.after) {
        w.member(&raw)?;
    }
    w.out.write_all(b"\n}\n")?;
    let events_written = w.events;
    let w_read = w.read;
    let stats = w.out.finish()?;
    Ok(RepairReport {
        changes: Vec::new(),
        json_bytes_read: read,
        json_bytes_written: stats.uncompressed_bytes,
        events_read: w_read,
        events_written,
    })
}

/// A type-tagged `pid`/`tid` as JSON text.
fn display_tagged(tagged: &[u8]) -> String {
    match tagged.split_first() {
        Some((b's', text)) => {
            let mut out = Vec::new();
            crate::json::render::push_json_string(&mut out, text);
            String::from_utf8_lossy(&out).into_owned()
        }
        Some((_, text)) => String::from_utf8_lossy(text).into_owned(),
        None => "null".into(),
    }
}

/// The text of a JSON string (its raw text, quotes included), decoded.
fn json_string_text(raw: &[u8]) -> String {
    let mut no_progress = |_| Ok(());
    let decoded = (|| {
        let source = Source::detect(raw).ok()?;
        let mut inp = crate::json::lexer::Input::new(source, &mut no_progress, 8);
        let mut out = Vec::new();
        (inp.value(0, Some(&mut out)).ok()? == crate::json::lexer::Kind::Str).then_some(out)
    })();
    match decoded {
        Some(text) => String::from_utf8_lossy(&text).into_owned(),
        None => String::from_utf8_lossy(raw).into_owned(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FormatKind;
    use crate::testing::{scratch, Damage};
    use std::fmt::Write as _;

    fn gz(data: &[u8]) -> Vec<u8> {
        crate::testing::gzip_member(data, 6)
    }

    fn plain() -> RepairOptions {
        RepairOptions {
            untangle: false,
            examples: 5,
            encoding: Encoding::Plain,
        }
    }

    /// Repairs `data` (written to a file) into a plain file: the report and the output, or
    /// the error's message.
    fn run(
        data: &[u8],
        options: RepairOptions,
    ) -> std::result::Result<(RepairReport, Vec<u8>), Error> {
        let dir = scratch("repair");
        let src = dir.join("src.json");
        let dst = dir.join("dst.json");
        std::fs::write(&src, data).unwrap();
        let r = repair(&src, &dst, options, &mut |_| Ok(()));
        assert_eq!(std::fs::read(&src).unwrap(), data, "the source changed");
        match r {
            Ok(report) => {
                let out = std::fs::read(&dst).unwrap();
                let names: Vec<String> = std::fs::read_dir(&*dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                assert_eq!(names.len(), 2, "{names:?}");
                Ok((report, out))
            }
            Err(e) => {
                assert!(!dst.exists());
                assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), 1);
                Err(e)
            }
        }
    }

    /// The kind of a trace-format error (what code and tests match, never the message).
    fn fault_kind(e: &Error) -> Option<FormatKind> {
        match e {
            Error::TraceFormat(t) => Some(t.kind),
            _ => None,
        }
    }

    /// The check of `text`: no error.
    fn assert_loads(text: &[u8]) -> check::CheckReport {
        let dir = scratch("loads");
        let path = dir.join("t.json");
        std::fs::write(&path, text).unwrap();
        let r = check::check_path(&path, CheckOptions::default(), &mut |_| Ok(())).unwrap();
        assert!(
            r.valid(),
            "{:?}\n{}",
            r.errors,
            String::from_utf8_lossy(text)
        );
        r
    }

    fn kinds(r: &RepairReport) -> Vec<(&'static str, u64)> {
        r.changes.iter().map(|c| (c.kind.name(), c.count)).collect()
    }

    /// A trace in torch's layout (one event per line) with `n` events: the text and the
    /// event lines.
    fn torch_like(n: usize) -> (String, Vec<String>) {
        let mut lines = Vec::new();
        for i in 0..n {
            let ts = 1000 + i * 7;
            lines.push(match i % 4 {
                0 => format!(r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm é","pid":1,"tid":1,"ts":{ts}.5,"dur":3,"args":{{"External id": {i}, "dims": [[1, 2], []]}}}}"#),
                1 => format!(r#"{{"ph":"s","id":{i},"pid":1,"tid":1,"ts":{ts}.6,"cat":"ac2g","name":"ac2g"}}"#),
                2 => format!(r#"{{"ph":"X","cat":"kernel","name":"k\"{i}","pid":0,"tid":7,"ts":{ts},"dur":2.5}}"#),
                _ => format!(r#"{{"ph":"f","id":{},"pid":0,"tid":7,"ts":{},"cat":"ac2g","name":"ac2g","bp":"e"}}"#, i - 2, ts - 7),
            });
        }
        let mut t = String::from("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0}],\n  \"traceEvents\": [\n");
        t.push_str(&lines.join(",\n"));
        t.push_str("\n],\n  \"traceName\": \"t.json\"\n}\n");
        (t, lines)
    }

    #[test]
    fn nothing_to_repair_is_an_identical_copy() {
        let (text, _) = torch_like(40);
        let (r, out) = run(text.as_bytes(), plain()).unwrap();
        assert!(r.changes.is_empty(), "{:?}", r.changes);
        assert_eq!(out, text.as_bytes());
        assert_eq!(r.events_written, 40);
    }

    #[test]
    fn gzip_members_are_joined_and_damage_is_cut() {
        let (text, lines) = torch_like(60);
        let half = text.len() / 2;
        let mut two = gz(&text.as_bytes()[..half]);
        two.extend_from_slice(&gz(&text.as_bytes()[half..]));
        let (r, out) = run(&two, plain()).unwrap();
        assert_eq!(kinds(&r), [("gzip_members", 2)]);
        assert_eq!(out, text.as_bytes());
        // A gzip stream cut in the middle: what decompressed is kept, and closed.
        let blob = gz(text.as_bytes());
        let (r, out) = run(&blob[..blob.len() * 2 / 3], plain()).unwrap();
        let names: Vec<_> = kinds(&r).into_iter().map(|k| k.0).collect();
        assert_eq!(names, ["gzip_damage", "truncated"]);
        let report = assert_loads(&out);
        let kept = report.summary.events as usize;
        assert!(kept > 0 && kept < 60);
        let out = String::from_utf8(out).unwrap();
        for line in &lines[..kept] {
            assert!(out.contains(line.as_str()));
        }
        // Data after the last member.
        let mut trailing = gz(text.as_bytes());
        trailing.extend_from_slice(b"\0\0\0garbage");
        let (r, out) = run(&trailing, plain()).unwrap();
        assert_eq!(kinds(&r), [("gzip_damage", 1)]);
        assert_eq!(out, text.as_bytes());
    }

    /// Cutting a trace anywhere keeps exactly the events that end before the cut, each
    /// byte for byte, in a trace that loads.
    #[test]
    fn truncation_anywhere_keeps_every_complete_event() {
        let (text, lines) = torch_like(12);
        let bytes = text.as_bytes();
        let first = text.find("\"traceEvents\"").unwrap();
        for cut in first..bytes.len() {
            let (r, out) = run(&bytes[..cut], plain()).unwrap();
            let report = assert_loads(&out);
            let complete = lines
                .iter()
                .filter(|l| text.find(l.as_str()).unwrap() + l.len() <= cut)
                .count();
            let out_text = String::from_utf8(out.clone()).unwrap();
            assert_eq!(
                report.summary.events as usize, complete,
                "cut {cut}: {out_text}"
            );
            for line in &lines[..complete] {
                assert!(out_text.contains(line.as_str()), "cut {cut}");
            }
            if cut < text.rfind('}').unwrap() {
                assert!(
                    r.changes.iter().any(|c| c.kind == ChangeKind::Truncated),
                    "cut {cut}: {:?}",
                    r.changes
                );
            }
        }
        // Before traceEvents: an empty one is added.
        let (r, out) = run(&bytes[..first - 3], plain()).unwrap();
        assert_loads(&out);
        assert!(kinds(&r).contains(&("added_trace_events", 1)));
    }

    #[test]
    fn strings_and_numbers_are_repaired_in_place() {
        let (text, lines) = torch_like(8);
        let bad = text
            .replacen("aten::mm é", "C:\\dir \"q\" \t \u{1}", 1)
            .replacen("\"dur\":3,", "\"dur\":NaN,", 1)
            .replacen("[[1, 2], []]", "[[1, 2,], Infinity]", 1);
        let mut bad = bad.into_bytes();
        let at = bad.windows(4).position(|w| w == b"k\\\"2").unwrap();
        bad.splice(at..at + 1, [0xff, 0xfe]);
        let (r, out) = run(&bad, plain()).unwrap();
        assert_loads(&out);
        let got: Vec<_> = kinds(&r);
        assert_eq!(
            got,
            [
                ("escaped_quotes", 2),
                ("escaped_backslashes", 1),
                ("escaped_control_characters", 2),
                ("replaced_invalid_utf8", 2),
                ("non_finite_numbers", 2),
                ("commas", 1),
            ]
        );
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(r#""name":"C:\\dir \"q\" \t \u0001""#), "{out}");
        assert!(out.contains(r#""dur":"NaN""#));
        assert!(out.contains(r#"[[1, 2], "Infinity"]"#));
        assert!(out.contains("\"name\":\"\u{fffd}\u{fffd}\\\"2\""), "{out}");
        for line in &lines[3..] {
            assert!(out.contains(line.as_str()));
        }
        let quote = &r.changes[0].examples[0];
        assert_eq!(quote.index, Some(0));
        assert_eq!(
            &bad[quote.offset.unwrap() as usize..quote.offset.unwrap() as usize + 3],
            b"\"q\""
        );
    }

    #[test]
    fn unrepairable_events_are_dropped_and_reading_goes_on() {
        let (text, lines) = torch_like(10);
        let bad = text.replacen(&lines[4], r#"{"ph":"X" "name":"broken"}"#, 1);
        let (r, out) = run(bad.as_bytes(), plain()).unwrap();
        let report = assert_loads(&out);
        assert_eq!(kinds(&r), [("dropped_events", 1)]);
        assert_eq!(r.changes[0].examples[0].index, Some(4));
        assert_eq!(report.summary.events, 9);
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(&lines[5]) && out.contains(&lines[3]));
        // Elements that are not objects are dropped.
        let bad = text
            .replacen(&lines[2], "[1, 2]", 1)
            .replacen(&lines[3], "7", 1);
        let (r, out) = run(bad.as_bytes(), plain()).unwrap();
        assert_loads(&out);
        assert_eq!(kinds(&r), [("dropped_elements", 2)]);
        // No event starts after the damage: the rest is dropped.
        let one_line = text.replace(",\n", ",");
        let bad = one_line.replacen("\"ph\":\"s\"", "\"ph\" \"s\"", 1);
        let (r, out) = run(bad.as_bytes(), plain()).unwrap();
        assert_loads(&out);
        let names: Vec<_> = kinds(&r).into_iter().map(|k| k.0).collect();
        assert_eq!(names, ["unreadable_tail", "dropped_events"]);
    }

    #[test]
    fn document_shapes() {
        let (r, out) = run(
            br#"[{"ph":"X","ts":1,"dur":1,"name":"a","cat":"c"}]"#,
            plain(),
        )
        .unwrap();
        assert_eq!(kinds(&r), [("wrapped_array", 1)]);
        assert_eq!(
            out,
            br#"{"traceEvents": [{"ph":"X","ts":1,"dur":1,"name":"a","cat":"c"}]}"#
        );
        let (r, out) = run(b"{\"traceEvents\": []}\n{\"traceEvents\": []}\n", plain()).unwrap();
        assert_eq!(kinds(&r), [("trailing_data", 1)]);
        assert_eq!(out, b"{\"traceEvents\": []}\n");
        let (r, out) = run(br#"{"a": 1, "traceEvents": {}}"#, plain()).unwrap();
        assert_eq!(
            kinds(&r),
            [("added_trace_events", 1), ("dropped_members", 1)]
        );
        assert_loads(&out);
        let (r, out) = run(br#"{"a": 1,, "traceEvents": [],}"#, plain()).unwrap();
        assert_eq!(kinds(&r), [("commas", 2)]);
        assert_eq!(out, br#"{"a": 1, "traceEvents": []}"#);
        let (r, out) = run(b", {\"traceEvents\": []}", plain()).unwrap();
        assert_eq!(kinds(&r), [("commas", 1)]);
        assert_eq!(out, b" {\"traceEvents\": []}");
        // Nothing loadable: no JSON text, or text that cannot start a trace.
        for nothing in [&b""[..], b"  7"] {
            let e = run(nothing, plain()).unwrap_err();
            assert_eq!(fault_kind(&e), Some(FormatKind::NotATrace), "{e}");
        }
    }

    /// The JSON Array Format loads, but repair writes the object form: its events byte for
    /// byte, closed when the `]` was left off (untangled or not).
    #[test]
    fn the_array_form_becomes_the_object_form() {
        let (object, lines) = torch_like(30);
        let events = lines.join(",\n");
        let want = format!("{{\"traceEvents\": [{events}\n]}}\n");
        for (text, kinds_want) in [
            (format!("[{events}\n]\n"), &[("wrapped_array", 1)][..]),
            (
                format!("[{events}"),
                &[("wrapped_array", 1), ("closed_array", 1)],
            ),
            (
                format!("[{events},\n"),
                &[("wrapped_array", 1), ("closed_array", 1)],
            ),
        ] {
            let (r, out) = run(text.as_bytes(), plain()).unwrap();
            assert_eq!(kinds(&r), kinds_want, "{text:?}");
            assert_eq!((r.events_read, r.events_written), (30, 30));
            let loads = assert_loads(&out);
            assert_eq!(loads.form, crate::read::events::Form::Object);
            assert_eq!(loads.summary.events, 30);
            // The object form of the events as written.
            assert_eq!(String::from_utf8(out).unwrap(), want, "{text:?}");
            assert!(object.contains(&events));
            let untangled = RepairOptions {
                untangle: true,
                ..plain()
            };
            let (r, out) = run(text.as_bytes(), untangled).unwrap();
            assert_eq!(kinds(&r), kinds_want, "untangled {text:?}");
            assert_eq!(assert_loads(&out).summary.events, 30);
            assert!(out.starts_with(b"{\n\"traceEvents\": ["));
        }
        for text in ["[]", "[", " [\n"] {
            let (_, out) = run(text.as_bytes(), plain()).unwrap();
            let loads = assert_loads(&out);
            assert_eq!(loads.summary.events, 0, "{text:?}");
            assert!(loads.warnings.is_empty(), "{text:?}: {:?}", loads.warnings);
        }
    }

    /// Stopped at any of its progress calls (Ctrl-C), a repair leaves nothing behind.
    #[test]
    fn an_interrupted_repair_leaves_nothing() {
        let dir = scratch("interrupt");
        let src = dir.join("src.json");
        let mut text = String::from("{\"traceEvents\": [\n");
        let line = "{\"ph\":\"X\",\"name\":\"a\tb\",\"pid\":0,\"tid\":7,\"ts\":1,\"dur\":5},\n";
        while text.len() < 3 * PROGRESS_EVERY as usize {
            text.push_str(line);
        }
        text.push_str("{\"ph\":\"X\",\"name\":\"b\",\"pid\":0,\"tid\":7,\"ts\":2,\"dur\":5}]}");
        std::fs::write(&src, &text).unwrap();
        for untangle in [false, true] {
            let options = RepairOptions {
                untangle,
                ..plain()
            };
            let mut stopped_at = 0;
            loop {
                let mut calls = 0;
                let r = repair(&src, &dir.join("dst.json"), options, &mut |_| {
                    calls += 1;
                    if calls > stopped_at {
                        Err(Error::Interrupted)
                    } else {
                        Ok(())
                    }
                });
                match r {
                    Err(Error::Interrupted) => {
                        assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), 1);
                        stopped_at += 1;
                    }
                    Ok(_) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(stopped_at >= 3, "{stopped_at}");
            std::fs::remove_file(dir.join("dst.json")).unwrap();
        }
    }

    #[test]
    fn the_source_is_never_the_destination() {
        let dir = scratch("same");
        let src = dir.join("t.json");
        std::fs::write(&src, b"{\"traceEvents\": []}").unwrap();
        let e = repair(&src, &src, plain(), &mut |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("the destination is the source"));
        let e = repair(&src, &dir.join("out.json"), plain(), &mut |_| {
            Err(Error::Interrupted)
        });
        assert!(matches!(e, Err(Error::Interrupted)) || e.is_ok());
    }

    #[test]
    fn untangling_moves_overlapping_kernels_to_lanes() {
        let text = r#"{"traceEvents": [
{"ph":"M","name":"thread_name","pid":0,"tid":7,"args":{"name":"stream 7 "}},
{"ph":"M","name":"thread_sort_index","pid":0,"tid":7,"args":{"sort_index":7}},
{"ph":"X","cat":"cuda_runtime","name":"launch","pid":1,"tid":1,"ts":1,"dur":1},
{"ph":"s","id":1,"pid":1,"tid":1,"ts":1.5,"cat":"ac2g","name":"ac2g"},
{"ph":"X","cat":"cuda_runtime","name":"launch","pid":1,"tid":1,"ts":3,"dur":1},
{"ph":"s","id":2,"pid":1,"tid":1,"ts":3.5,"cat":"ac2g","name":"ac2g"},
{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":10,"dur":5},
{"ph":"f","id":1,"pid":0,"tid":7,"ts":10,"cat":"ac2g","name":"ac2g","bp":"e"},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":14,"dur":5},
{"ph":"f","id":2,"pid":0,"tid":7,"ts":14,"cat":"ac2g","name":"ac2g","bp":"e"},
{"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":7,"ts":14.5,"dur":5},
{"ph":"X","cat":"kernel","name":"k4","pid":0,"tid":9,"ts":1,"dur":5}
],
"traceName": "x"}"#;
        let before = assert_loads(text.as_bytes());
        assert_eq!(
            before
                .warnings
                .iter()
                .find(|w| w.kind == FindingKind::OverlappingSlices)
                .unwrap()
                .count,
            2
        );
        let options = RepairOptions {
            untangle: true,
            ..plain()
        };
        let (r, out) = run(text.as_bytes(), options).unwrap();
        assert_eq!(kinds(&r), [("moved_slices", 2), ("added_lanes", 2)]);
        let after = assert_loads(&out);
        assert!(
            after
                .warnings
                .iter()
                .all(|w| w.kind != FindingKind::OverlappingSlices),
            "{:?}",
            after.warnings
        );
        let out = String::from_utf8(out).unwrap();
        // Lanes above the process's largest tid (9), named after the thread.
        assert!(
            out.contains(
                r#"{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":10,"ts":14,"dur":5}"#
            ),
            "{out}"
        );
        assert!(out.contains(
            r#"{"ph":"f","id":2,"pid":0,"tid":10,"ts":14,"cat":"ac2g","name":"ac2g","bp":"e"}"#
        ));
        assert!(out.contains(
            r#"{"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":11,"ts":14.5,"dur":5}"#
        ));
        assert!(out.contains(r#"{"ph":"M","name":"thread_name","pid":0,"tid":10,"args":{"name":"stream 7 (overlap 1)"}}"#));
        assert!(out.contains(
            r#"{"ph":"M","name":"thread_sort_index","pid":0,"tid":11,"args":{"sort_index":7}}"#
        ));
        assert!(out.contains(r#""traceName": "x""#));
        assert_eq!(after.summary.flows_paired, 2);
        assert_eq!(after.summary.events, before.summary.events + 4);
        // Nothing to untangle: a copy.
        let (r, out) = run(out.as_bytes(), options).unwrap();
        assert!(r.changes.is_empty());
        assert_loads(&out);
    }

    #[test]
    fn damaged_then_untangled() {
        let text = "{\"traceEvents\": [\n{\"ph\":\"X\",\"name\":\"a\tb\",\"pid\":0,\"tid\":7,\"ts\":1,\"dur\":5},\n{\"ph\":\"X\",\"name\":\"c\",\"pid\":0,\"tid\":7,\"ts\":2,\"dur\":5},\n{\"ph\":\"X\",\"name\":\"d";
        let options = RepairOptions {
            untangle: true,
            ..plain()
        };
        let (r, out) = run(text.as_bytes(), options).unwrap();
        let names: Vec<_> = kinds(&r).into_iter().map(|k| k.0).collect();
        assert_eq!(
            names,
            [
                "truncated",
                "escaped_control_characters",
                "moved_slices",
                "added_lanes"
            ]
        );
        let after = assert_loads(&out);
        assert!(after
            .warnings
            .iter()
            .all(|w| w.kind != FindingKind::OverlappingSlices));
        assert_eq!(r.events_read, 2);
    }

    /// Random damage anywhere: repair never fails but for a clear reason, and what it
    /// writes always loads.
    #[test]
    fn random_damage_always_gives_a_trace_that_loads() {
        let (text, _) = torch_like(30);
        let specials: &[u8] = b"{}[]\",:\\ \n0123456789.-eENIaf\x00\x01\x80\xc3\xff";
        let mut damage = Damage::new(0x2545_f491_4f6c_dd1d);
        let mut log = String::new();
        let mut repaired = 0;
        for round in 0..400 {
            let mut bytes = text.clone().into_bytes();
            for _ in 0..1 + damage.next() % 4 {
                damage.edit(&mut bytes, specials);
            }
            if damage.next().is_multiple_of(4) {
                let cut = (damage.next() % bytes.len() as u64) as usize;
                bytes.truncate(cut);
            }
            match run(&bytes, plain()) {
                Ok((_, out)) => {
                    assert_loads(&out);
                    repaired += 1;
                }
                Err(e) => {
                    writeln!(log, "{round}: {e}").unwrap();
                    assert_eq!(fault_kind(&e), Some(FormatKind::NotATrace), "{e}");
                }
            }
        }
        // Refusing every round would pass the loop above: repair must save most damaged
        // traces. The damage is seeded, so the count only moves with the code: 399 of 400
        // repaired (2026-12; the one refused starts with `"`: not a trace); the floor leaves
        // room for ~10% more refusals before it calls that a regression.
        assert!(
            repaired >= 360,
            "only {repaired} of 400 repaired; refused:\n{log}"
        );
    }
}
