//! The tolerant pass: the source's text read once by the tolerant reader
//! ([`crate::json::tolerant`]), what is valid copied verbatim (whitespace included), the
//! repairs written and counted (see the module docs of [`super`]).

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::json::lexer::{BUF_SIZE, PROGRESS_EVERY};
use crate::json::scan::Scanner;
use crate::json::tolerant::{Damage, Fix, Fixer, Place};
use crate::output::sink::Sink;
use crate::tools::report::Tally;

use super::copy::open_forgiving;
use super::{ChangeKind, RepairReport};

/// Most bytes of one event or top-level value the tolerant reader holds.
pub(super) const MAX_VALUE: usize = 64 << 20;

/// Bytes of text first made available for a value.
const FIRST_WINDOW: usize = 1 << 20;

/// Most whitespace kept between two items (more is dropped: it is only whitespace).
const MAX_SEPARATOR: usize = 4096;

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

/// The tolerant pass from `src` into `out`.
pub(super) fn tolerant_pass(
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
