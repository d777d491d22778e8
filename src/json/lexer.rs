//! The strict JSON lexer shared by the tools over trace files (`check`, `split`, `filter`):
//! a streaming RFC 8259 reader over a byte buffer, with the position as an absolute offset
//! in the decompressed stream.
//!
//! Strict means: no NaN / Infinity, no trailing commas, no leading zeros, only the standard
//! escapes, UTF-8 checked (no overlong forms, no encoded surrogates), no raw control
//! characters in strings, and a nesting limit. Strings and numbers can be captured (decoded,
//! capped at [`STRING_CAP`] bytes) or skipped; containers are skipped without recursion. The
//! reader can also record the raw bytes of a stretch of input (see [`Input::start_capture`]),
//! which is how `split` and `filter` copy events verbatim.
//!
//! Errors are [`Stop::Invalid`] (the input is not a valid trace: where, and why; with the
//! index in `traceEvents` when [`Input::event`] is set), [`Stop::Read`] for a failed read, or
//! [`Stop::Fatal`] for a stop asked by the progress callback.

use std::io::{self, Read, Seek, SeekFrom};

use crate::error::{Error, FormatKind, Invalid, Result};

/// Bytes read from the (decompressed) input at a time.
pub(crate) const BUF_SIZE: usize = 256 * 1024;

/// Bytes read between two calls of the progress callback (the place to check for Ctrl-C).
pub(crate) const PROGRESS_EVERY: u64 = 4 << 20;

/// Longest prefix of a string value kept when a field's text is needed (`ph`, `cat`, `name`,
/// a string `pid`...). Longer values are checked in full but compared by this prefix.
pub(crate) const STRING_CAP: usize = 64 * 1024;

/// Where the walk stopped early.
pub(crate) enum Stop {
    /// The input is not valid (syntax, UTF-8, a corrupt or truncated gzip stream).
    Invalid(Invalid),
    /// Reading the file failed for a reason that is not its content.
    Read(io::Error),
    /// The callback said stop (Ctrl-C), or the visitor failed.
    Fatal(Error),
}

pub(crate) type PResult<T> = std::result::Result<T, Stop>;

/// The JSON type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Missing,
    Str,
    Num,
    Object,
    Array,
    Bool,
    Null,
}

impl Kind {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Kind::Missing => "missing",
            Kind::Str => "a string",
            Kind::Num => "a number",
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::Bool => "a boolean",
            Kind::Null => "null",
        }
    }
}

/// Bytes that end the fast scan of a string: `"`, `\`, control characters, non-ASCII
/// (also the scanner's, [`crate::json::scan`]).
pub(crate) static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i == b'"' as usize || i == b'\\' as usize || i >= 0x80;
        i += 1;
    }
    t
};

/// `STRING_STOP` without the non-ASCII bytes: where a run of UTF-8 text ends.
static STRING_SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i == b'"' as usize || i == b'\\' as usize;
        i += 1;
    }
    t
};

/// A byte for an error message.
pub(crate) fn show(b: u8) -> String {
    match b {
        0x21..=0x7e => format!("'{}'", b as char),
        b' ' => "' '".into(),
        _ => format!("byte 0x{b:02x}"),
    }
}

/// The character a one-letter escape stands for.
fn simple_escape(c: u8) -> Option<u8> {
    Some(match c {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}

#[inline]
fn push_capped(out: &mut Option<&mut Vec<u8>>, bytes: &[u8]) {
    if let Some(o) = out {
        let room = STRING_CAP.saturating_sub(o.len());
        o.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

fn push_char(out: &mut Option<&mut Vec<u8>>, cp: u32) {
    if out.is_some() {
        let c = char::from_u32(cp).unwrap_or('\u{fffd}');
        let mut tmp = [0u8; 4];
        push_capped(out, c.encode_utf8(&mut tmp).as_bytes());
    }
}

/// The UTF-8 sequence the byte `b0` leads: how many continuation bytes follow it, and the
/// range the first of them must be in (the others: [`UTF8_CONTINUATION`]); `None` when no
/// character starts with `b0`. The ranges refuse overlong forms and encoded surrogates. The
/// one table of the crate: the lexer and the fallback's validator both check by it.
pub(crate) fn utf8_lead(b0: u8) -> Option<(usize, u8, u8)> {
    Some(match b0 {
        0xC2..=0xDF => (1, 0x80, 0xBF),
        0xE0 => (2, 0xA0, 0xBF),
        0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
        0xED => (2, 0x80, 0x9F),
        0xF0 => (3, 0x90, 0xBF),
        0xF1..=0xF3 => (3, 0x80, 0xBF),
        0xF4 => (3, 0x80, 0x8F),
        _ => return None,
    })
}

/// The range of a UTF-8 continuation byte after the first.
pub(crate) const UTF8_CONTINUATION: (u8, u8) = (0x80, 0xBF);

/// What [`Input::tap`] calls with the bytes read.
pub(crate) type Tap<'a> = dyn FnMut(&[u8]) -> Result<()> + 'a;

/// What the lexer reads: the decompressed bytes of a trace file (`read::members::Source`),
/// which can be read from the middle only when they are the file's own (plain input).
pub(crate) trait Decoded: Read {
    /// The reader of the file itself.
    type Plain;
    /// The file's own reader, when the bytes are not decompressed.
    fn plain(&mut self) -> Option<&mut Self::Plain>;
}

/// Text in memory, as plain input (the lexer's tests).
#[cfg(test)]
impl<T: AsRef<[u8]>> Decoded for io::Cursor<T> {
    type Plain = Self;

    fn plain(&mut self) -> Option<&mut Self> {
        Some(self)
    }
}

/// The decompressed input, buffered, with the position as an absolute offset.
pub(crate) struct Input<'a, S: Decoded> {
    pub(crate) inner: S,
    pub(crate) buf: Box<[u8]>,
    pub(crate) pos: usize,
    pub(crate) len: usize,
    /// Offset of `buf[0]` in the decompressed stream.
    pub(crate) base: u64,
    pub(crate) eof: bool,
    pub(crate) next_progress: u64,
    pub(crate) progress: &'a mut dyn FnMut(u64) -> Result<()>,
    /// Index of the event being read, for messages.
    pub(crate) event: Option<u64>,
    pub(crate) max_depth: usize,
    /// Closing brackets of the containers being skipped (reused).
    pub(crate) stack: Vec<u8>,
    /// Where in `buf` the raw stretch being recorded starts, while recording.
    capture: Option<usize>,
    /// The recorded bytes from earlier buffers.
    captured: Vec<u8>,
    /// Offset of the stretch being recorded, and the most bytes it may have (memory stays
    /// bounded whatever the input: a longer stretch is an error naming its offset).
    capture_offset: u64,
    pub(crate) capture_limit: usize,
    /// Told every byte read, in order, before it is looked at (`compress` writes the bytes
    /// it checks): not with a parallel read, which reads the file itself.
    pub(crate) tap: Option<&'a mut Tap<'a>>,
}

impl<'a, S: Decoded> Input<'a, S> {
    /// A reader of `inner` calling `progress` every [`PROGRESS_EVERY`] bytes.
    pub(crate) fn new(
        inner: S,
        progress: &'a mut dyn FnMut(u64) -> Result<()>,
        max_depth: usize,
    ) -> Self {
        Input {
            inner,
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            pos: 0,
            len: 0,
            base: 0,
            eof: false,
            next_progress: PROGRESS_EVERY,
            progress,
            event: None,
            max_depth: max_depth.max(1),
            stack: Vec::new(),
            capture: None,
            captured: Vec::new(),
            capture_offset: 0,
            capture_limit: usize::MAX,
            tap: None,
        }
    }

    /// Starts recording the raw input from the position on.
    #[inline]
    pub(crate) fn start_capture(&mut self) {
        self.captured.clear();
        self.capture = Some(self.pos);
        self.capture_offset = self.offset();
    }

    /// Stops recording: the raw bytes from [`Input::start_capture`] up to the position; an
    /// error if they are more than [`Input::capture_limit`].
    #[inline]
    pub(crate) fn end_capture(&mut self) -> PResult<&[u8]> {
        if let Some(start) = self.capture.take() {
            self.captured.extend_from_slice(&self.buf[start..self.pos]);
            self.check_capture()?;
        }
        Ok(&self.captured)
    }

    fn check_capture(&self) -> PResult<()> {
        if self.captured.len() <= self.capture_limit {
            return Ok(());
        }
        Err(self.fault_at(
            self.capture_offset,
            FormatKind::TooLarge,
            format!(
                "too large: more than {} MiB in one top-level member or event (the most \
                 held in memory at once)",
                self.capture_limit >> 20
            ),
        ))
    }

    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The fault `msg` at `offset`, in the event being read if any.
    pub(crate) fn locate(&self, offset: u64, kind: FormatKind, msg: &str) -> Invalid {
        Invalid {
            kind,
            offset,
            event: self.event,
            message: msg.to_string(),
        }
    }

    /// Not strict JSON here: `msg` says why.
    pub(crate) fn fail(&self, msg: impl AsRef<str>) -> Stop {
        self.fail_at(self.offset(), msg)
    }

    /// Not strict JSON at `offset`.
    pub(crate) fn fail_at(&self, offset: u64, msg: impl AsRef<str>) -> Stop {
        self.fault_at(offset, FormatKind::Syntax, msg)
    }

    /// A fault of `kind` here.
    pub(crate) fn fault(&self, kind: FormatKind, msg: impl AsRef<str>) -> Stop {
        self.fault_at(self.offset(), kind, msg)
    }

    /// A fault of `kind` at `offset`.
    pub(crate) fn fault_at(&self, offset: u64, kind: FormatKind, msg: impl AsRef<str>) -> Stop {
        Stop::Invalid(self.locate(offset, kind, msg.as_ref()))
    }

    /// Reads the next chunk once the buffer is used up; false at the end of the input.
    #[cold]
    #[inline(never)]
    fn fill(&mut self) -> PResult<bool> {
        debug_assert_eq!(self.pos, self.len);
        if self.eof {
            return Ok(false);
        }
        if let Some(start) = self.capture {
            self.captured.extend_from_slice(&self.buf[start..self.len]);
            self.capture = Some(0);
            self.check_capture()?;
        }
        self.base += self.len as u64;
        self.pos = 0;
        self.len = 0;
        self.read_more()?;
        Ok(self.len > 0)
    }

    /// Makes at least `want` bytes (at most the buffer's size) readable from the position
    /// without a refill, fewer only at the end of the input: moves the unread bytes to the
    /// front of the buffer and reads more after them. Not while recording.
    #[inline]
    pub(crate) fn ensure(&mut self, want: usize) -> PResult<()> {
        if self.len - self.pos >= want || self.eof {
            return Ok(());
        }
        self.refill_to(want)
    }

    #[cold]
    #[inline(never)]
    fn refill_to(&mut self, want: usize) -> PResult<()> {
        debug_assert!(self.capture.is_none());
        self.buf.copy_within(self.pos..self.len, 0);
        self.base += self.pos as u64;
        self.len -= self.pos;
        self.pos = 0;
        let want = want.min(self.buf.len());
        while self.len < want && !self.eof {
            self.read_more()?;
        }
        Ok(())
    }

    /// Reads once into the free end of the buffer (setting `eof` at the end of the input),
    /// and calls the progress callback when it is due.
    fn read_more(&mut self) -> PResult<()> {
        loop {
            match self.inner.read(&mut self.buf[self.len..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    if let Some(tap) = &mut self.tap {
                        tap(&self.buf[self.len..self.len + n]).map_err(Stop::Fatal)?;
                    }
                    self.len += n;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error().is_some() => {
                    return Err(Stop::Read(e));
                }
                Err(e) => {
                    let at = self.base + self.len as u64;
                    return Err(self.fault_at(
                        at,
                        FormatKind::Gzip,
                        format!("corrupt gzip data: {e}"),
                    ));
                }
            }
        }
        let done = self.base + self.len as u64;
        if done >= self.next_progress {
            self.next_progress = done + PROGRESS_EVERY;
            (self.progress)(done).map_err(Stop::Fatal)?;
        }
        Ok(())
    }

    /// Moves to `offset` of a plain (not gzip) input, dropping what is buffered; false for
    /// gzip input, which cannot be read from the middle. Not while recording.
    pub(crate) fn seek_plain(&mut self, offset: u64) -> PResult<bool>
    where
        S::Plain: Seek,
    {
        debug_assert!(self.capture.is_none());
        let Some(reader) = self.inner.plain() else {
            return Ok(false);
        };
        reader.seek(SeekFrom::Start(offset)).map_err(Stop::Read)?;
        self.base = offset;
        self.pos = 0;
        self.len = 0;
        self.eof = false;
        Ok(true)
    }

    #[inline]
    pub(crate) fn peek(&mut self) -> PResult<Option<u8>> {
        if self.pos < self.len {
            return Ok(Some(self.buf[self.pos]));
        }
        if self.fill()? {
            Ok(Some(self.buf[self.pos]))
        } else {
            Ok(None)
        }
    }

    /// Skips whitespace; the next byte, or None at the end.
    #[inline]
    pub(crate) fn skip_ws(&mut self) -> PResult<Option<u8>> {
        loop {
            while self.pos < self.len {
                let b = self.buf[self.pos];
                if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Skips whitespace; the next byte, or an error naming what was expected at the end.
    #[inline]
    pub(crate) fn ws_expect(&mut self, what: &str) -> PResult<u8> {
        match self.skip_ws()? {
            Some(b) => Ok(b),
            None => Err(self.fault(
                FormatKind::Truncated,
                format!("unexpected end of file, expected {what}"),
            )),
        }
    }

    /// After a comma in a container: the next byte, refusing the container's closer.
    pub(crate) fn after_comma(&mut self, close: u8, what: &str) -> PResult<u8> {
        let b = self.ws_expect(what)?;
        if b == close {
            return Err(self.fail(format!("trailing comma before '{}'", close as char)));
        }
        Ok(b)
    }

    /// After an item of the container that `close` ends: past the `,` to the first byte of
    /// the next item (`Some`; `item` names it for errors), or at `close` (`None`; not
    /// consumed). `place` says where, for errors ("after an event", "in an event").
    #[inline]
    pub(crate) fn next_item(&mut self, close: u8, item: &str, place: &str) -> PResult<Option<u8>> {
        let expected = if close == b'}' {
            "',' or '}'"
        } else {
            "',' or ']'"
        };
        let b = self.ws_expect(expected)?;
        if b == b',' {
            self.pos += 1;
            return self.after_comma(close, item).map(Some);
        }
        if b == close {
            return Ok(None);
        }
        Err(self.fail(format!("expected {expected} {place}, found {}", show(b))))
    }

    /// At a string (`b` is its first byte): reads an object key into `key`, then the colon;
    /// leaves the position at the value.
    pub(crate) fn key(&mut self, b: u8, key: &mut Vec<u8>) -> PResult<()> {
        if b != b'"' {
            return Err(self.fail(format!("expected a string key, found {}", show(b))));
        }
        key.clear();
        self.string(Some(key))?;
        let b = self.ws_expect("':'")?;
        if b != b':' {
            return Err(self.fail(format!("expected ':' after a key, found {}", show(b))));
        }
        self.pos += 1;
        self.ws_expect("a value")?;
        Ok(())
    }

    /// Reads the value at the position (whitespace skipped) inside `depth` containers,
    /// capturing a string's decoded text or a number's text in `out`.
    pub(crate) fn value(&mut self, depth: usize, mut out: Option<&mut Vec<u8>>) -> PResult<Kind> {
        let Some(b) = self.peek()? else {
            return Err(self.fault(
                FormatKind::Truncated,
                "unexpected end of file, expected a value",
            ));
        };
        if let Some(o) = out.as_deref_mut() {
            o.clear();
        }
        match b {
            b'"' => {
                self.string(out)?;
                Ok(Kind::Str)
            }
            b'-' | b'0'..=b'9' => {
                self.number(&mut out)?;
                Ok(Kind::Num)
            }
            b'{' => {
                self.container(depth)?;
                Ok(Kind::Object)
            }
            b'[' => {
                self.container(depth)?;
                Ok(Kind::Array)
            }
            b't' => {
                self.literal(b"true")?;
                push_capped(&mut out, b"true");
                Ok(Kind::Bool)
            }
            b'f' => {
                self.literal(b"false")?;
                push_capped(&mut out, b"false");
                Ok(Kind::Bool)
            }
            b'n' => {
                self.literal(b"null")?;
                Ok(Kind::Null)
            }
            b'N' => Err(self.fail("NaN is not valid JSON")),
            b'I' => Err(self.fail("Infinity is not valid JSON")),
            _ => Err(self.fail(format!("expected a value, found {}", show(b)))),
        }
    }

    pub(crate) fn literal(&mut self, word: &'static [u8]) -> PResult<()> {
        let at = self.offset();
        for &w in word {
            match self.peek()? {
                Some(b) if b == w => self.pos += 1,
                None => {
                    return Err(
                        self.fault(FormatKind::Truncated, "unexpected end of file in a literal")
                    )
                }
                _ => {
                    let word = std::str::from_utf8(word).expect("ASCII");
                    return Err(self.fail_at(at, format!("invalid literal (expected {word})")));
                }
            }
        }
        Ok(())
    }

    /// Skips the array or object at the position (without recursion), inside `depth`
    /// containers.
    pub(crate) fn container(&mut self, depth: usize) -> PResult<()> {
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        let result = self.container_in(depth, &mut stack);
        self.stack = stack;
        result
    }

    fn container_in(&mut self, depth: usize, stack: &mut Vec<u8>) -> PResult<()> {
        // true: at a value (whitespace skipped); false: after one.
        let mut at_value = true;
        loop {
            if at_value {
                let b = self.buf[self.pos];
                if b == b'{' || b == b'[' {
                    self.pos += 1;
                    if depth + stack.len() >= self.max_depth {
                        return Err(self.fault(
                            FormatKind::TooLarge,
                            format!("nesting deeper than {} levels", self.max_depth),
                        ));
                    }
                    let close = if b == b'{' { b'}' } else { b']' };
                    stack.push(close);
                    let what = if close == b'}' {
                        "a key or '}'"
                    } else {
                        "a value or ']'"
                    };
                    let b = self.ws_expect(what)?;
                    if b == close {
                        self.pos += 1;
                        stack.pop();
                        at_value = false;
                    } else if close == b'}' {
                        self.skip_key(b)?;
                    }
                } else {
                    self.value(0, None)?;
                    at_value = false;
                }
            } else {
                let Some(&close) = stack.last() else {
                    return Ok(());
                };
                let b = self.ws_expect(if close == b'}' {
                    "',' or '}'"
                } else {
                    "',' or ']'"
                })?;
                self.pos += 1;
                if b == b',' {
                    if close == b'}' {
                        let b = self.after_comma(close, "a key")?;
                        self.skip_key(b)?;
                    } else {
                        self.after_comma(close, "a value")?;
                    }
                    at_value = true;
                } else if b == close {
                    stack.pop();
                } else {
                    self.pos -= 1;
                    return Err(self.fail(format!(
                        "expected ',' or '{}', found {}",
                        close as char,
                        show(b)
                    )));
                }
            }
        }
    }

    pub(crate) fn skip_key(&mut self, b: u8) -> PResult<()> {
        if b != b'"' {
            return Err(self.fail(format!("expected a string key, found {}", show(b))));
        }
        self.string(None)?;
        let b = self.ws_expect("':'")?;
        if b != b':' {
            return Err(self.fail(format!("expected ':' after a key, found {}", show(b))));
        }
        self.pos += 1;
        self.ws_expect("a value")?;
        Ok(())
    }

    /// Reads the string at the position, decoding it into `out` when given.
    pub(crate) fn string(&mut self, mut out: Option<&mut Vec<u8>>) -> PResult<()> {
        let start = self.offset();
        self.pos += 1; // the opening quote
        loop {
            if self.pos == self.len && !self.fill()? {
                return Err(self.fault_at(
                    start,
                    FormatKind::Truncated,
                    "unterminated string (end of file)",
                ));
            }
            let chunk = &self.buf[self.pos..self.len];
            let n = chunk
                .iter()
                .position(|&b| STRING_STOP[b as usize])
                .unwrap_or(chunk.len());
            push_capped(&mut out, &chunk[..n]);
            self.pos += n;
            if self.pos == self.len {
                continue;
            }
            let b = self.buf[self.pos];
            match b {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.pos += 1;
                    self.escape(&mut out, start)?;
                }
                0..=0x1f => {
                    return Err(self.fail(format!(
                        "raw control character U+{b:04X} in a string (must be escaped)"
                    )));
                }
                _ => self.utf8_run(&mut out)?,
            }
        }
    }

    /// The next byte inside a string.
    fn string_byte(&mut self, start: u64) -> PResult<u8> {
        match self.peek()? {
            Some(b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.fault_at(
                start,
                FormatKind::Truncated,
                "unterminated string (end of file)",
            )),
        }
    }

    /// After a backslash.
    fn escape(&mut self, out: &mut Option<&mut Vec<u8>>, start: u64) -> PResult<()> {
        let at = self.offset() - 1;
        let c = self.string_byte(start)?;
        if let Some(d) = simple_escape(c) {
            push_capped(out, &[d]);
            return Ok(());
        }
        if c != b'u' {
            return Err(self.invalid_escape(at, c));
        }
        let mut unit = self.hex4(start, at)?;
        loop {
            if !(0xD800..0xDC00).contains(&unit) {
                // A lone low surrogate is valid JSON text (json.dumps writes them); decoded
                // as U+FFFD.
                let cp = if (0xDC00..0xE000).contains(&unit) {
                    0xFFFD
                } else {
                    unit
                };
                push_char(out, cp);
                return Ok(());
            }
            // A high surrogate: a low one may follow as another \u escape.
            if self.peek()? != Some(b'\\') {
                push_char(out, 0xFFFD);
                return Ok(());
            }
            let at2 = self.offset();
            self.pos += 1;
            let c = self.string_byte(start)?;
            if c != b'u' {
                push_char(out, 0xFFFD);
                return match simple_escape(c) {
                    Some(d) => {
                        push_capped(out, &[d]);
                        Ok(())
                    }
                    None => Err(self.invalid_escape(at2, c)),
                };
            }
            let low = self.hex4(start, at2)?;
            if (0xDC00..0xE000).contains(&low) {
                push_char(out, 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
                return Ok(());
            }
            push_char(out, 0xFFFD);
            unit = low;
        }
    }

    fn invalid_escape(&self, at: u64, c: u8) -> Stop {
        let shown = if c.is_ascii_graphic() {
            format!("'\\{}'", c as char)
        } else {
            format!("'\\' followed by {}", show(c))
        };
        self.fail_at(
            at,
            format!("invalid escape {shown} in a string (a backslash must be written \\\\)"),
        )
    }

    fn hex4(&mut self, start: u64, at: u64) -> PResult<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            let b = self.string_byte(start)?;
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => {
                    return Err(self.fail_at(at, "invalid \\u escape (needs 4 hex digits)"));
                }
            };
            v = v << 4 | u32::from(d);
        }
        Ok(v)
    }

    /// At a non-ASCII byte in a string: checks the UTF-8 up to the next quote, backslash or
    /// control character (or the end of the buffer).
    fn utf8_run(&mut self, out: &mut Option<&mut Vec<u8>>) -> PResult<()> {
        let chunk = &self.buf[self.pos..self.len];
        let n = chunk
            .iter()
            .position(|&b| STRING_SPECIAL[b as usize])
            .unwrap_or(chunk.len());
        let good = match std::str::from_utf8(&chunk[..n]) {
            Ok(_) => n,
            Err(e) => e.valid_up_to(),
        };
        push_capped(out, &chunk[..good]);
        self.pos += good;
        if good < n || n == chunk.len() {
            // An invalid sequence, or one that may continue in the next buffer.
            if self.pos < self.len && self.buf[self.pos] >= 0x80 {
                self.utf8_char(out)?;
            }
        }
        Ok(())
    }

    /// One UTF-8 character, byte by byte (across buffer ends).
    fn utf8_char(&mut self, out: &mut Option<&mut Vec<u8>>) -> PResult<()> {
        let at = self.offset();
        let b0 = self.buf[self.pos];
        let Some((need, lo, hi)) = utf8_lead(b0) else {
            return Err(self.fail_at(at, format!("invalid UTF-8 ({})", show(b0))));
        };
        self.pos += 1;
        let mut bytes = [b0, 0, 0, 0];
        for (i, slot) in bytes.iter_mut().enumerate().skip(1).take(need) {
            let (l, h) = if i == 1 { (lo, hi) } else { UTF8_CONTINUATION };
            match self.peek()? {
                Some(b) if (l..=h).contains(&b) => {
                    *slot = b;
                    self.pos += 1;
                }
                Some(_) => {
                    return Err(self.fail_at(
                        at,
                        format!("invalid UTF-8 sequence starting with {}", show(b0)),
                    ));
                }
                None => {
                    return Err(self.fault_at(
                        at,
                        FormatKind::Truncated,
                        "truncated UTF-8 sequence at end of file",
                    ))
                }
            }
        }
        push_capped(out, &bytes[..=need]);
        Ok(())
    }

    /// Reads the number at the position, its text into `out` when given.
    fn number(&mut self, out: &mut Option<&mut Vec<u8>>) -> PResult<()> {
        let at = self.offset();
        if self.peek()? == Some(b'-') {
            self.pos += 1;
            push_capped(out, b"-");
        }
        match self.peek()? {
            Some(b'0') => {
                self.pos += 1;
                push_capped(out, b"0");
                if matches!(self.peek()?, Some(b'0'..=b'9')) {
                    return Err(self.fail_at(at, "leading zeros are not allowed in numbers"));
                }
            }
            Some(b'1'..=b'9') => self.digits(out)?,
            Some(b'I') => return Err(self.fail_at(at, "-Infinity is not valid JSON")),
            Some(b) => {
                return Err(self.fail(format!("expected a digit after '-', found {}", show(b))))
            }
            None => {
                return Err(self.fault(FormatKind::Truncated, "unexpected end of file in a number"))
            }
        }
        if self.peek()? == Some(b'.') {
            self.pos += 1;
            push_capped(out, b".");
            self.need_digit("after the decimal point")?;
            self.digits(out)?;
        }
        if let Some(e @ (b'e' | b'E')) = self.peek()? {
            self.pos += 1;
            push_capped(out, &[e]);
            if let Some(sign @ (b'+' | b'-')) = self.peek()? {
                self.pos += 1;
                push_capped(out, &[sign]);
            }
            self.need_digit("in the exponent")?;
            self.digits(out)?;
        }
        Ok(())
    }

    fn need_digit(&mut self, place: &str) -> PResult<()> {
        match self.peek()? {
            Some(b'0'..=b'9') => Ok(()),
            Some(b) => Err(self.fail(format!("expected a digit {place}, found {}", show(b)))),
            None => Err(self.fault(
                FormatKind::Truncated,
                format!("unexpected end of file, expected a digit {place}"),
            )),
        }
    }

    fn digits(&mut self, out: &mut Option<&mut Vec<u8>>) -> PResult<()> {
        loop {
            let chunk = &self.buf[self.pos..self.len];
            let n = chunk
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(chunk.len());
            push_capped(out, &chunk[..n]);
            self.pos += n;
            if self.pos < self.len || !self.fill()? {
                return Ok(());
            }
        }
    }
}

/// Whether `inner` holds exactly one strict JSON value (the lexer's rules, nesting at most 512
/// deep): `None`, or the first error (offset and message). The reference `check` and the
/// fallback's one-pass validator are tested against.
#[cfg(test)]
pub(crate) fn strict_json_error<S: Decoded>(inner: S) -> Result<Option<String>> {
    let mut no_progress = |_| Ok(());
    let mut inp = Input::new(inner, &mut no_progress, 512);
    let walked = (|| {
        if inp.skip_ws()?.is_none() {
            return Err(inp.fail("empty (expected a JSON value)"));
        }
        inp.value(0, None)?;
        match inp.skip_ws()? {
            None => Ok(()),
            Some(b) => Err(inp.fail(format!("extra data after the top-level value: {}", show(b)))),
        }
    })();
    match walked {
        Ok(()) => Ok(None),
        Err(Stop::Invalid(invalid)) => Ok(Some(invalid.to_string())),
        Err(Stop::Read(e)) => Err(Error::io("cannot read", e)),
        Err(Stop::Fatal(e)) => Err(e),
    }
}
