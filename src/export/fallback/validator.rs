//! The validator: the strict JSON check of Kineto's text, fed in pieces as the text arrives,
//! that also decides the quote repairs and counts the events on the way. One pass over the
//! text does all three, on the thread that reads it.
//!
//! Strict as [`crate::json::lexer`] is: no NaN / Infinity, no trailing commas, no leading zeros,
//! only the standard escapes, UTF-8 checked (no overlong forms, no encoded surrogates), no
//! raw control characters in strings, a nesting limit, nothing after the top-level value.
//!
//! Quote repair (torch 2.11/2.12 write a `"` inside a name unescaped): inside a string, a
//! quote ends the string only where the text after it can follow a string in Kineto's
//! layout ([`super::text::judge`]); any other quote is inner, and its offset is recorded
//! in [`Validator::repairs`]: the text with a `\` inserted before each of those quotes is
//! what the validator checked and what is written.
//!
//! Pieces may end anywhere: [`Validator::feed`] consumes the complete tokens of what it is
//! given and says how many bytes that was; the caller hands the rest again, with more text
//! after it. The state between pieces is the containers open and what comes next.

use crate::error::Error;
use crate::json::lexer::{show, utf8_lead, UTF8_CONTINUATION};
use crate::json::scan::plain_run_end;

use super::text::{judge, Verdict};

/// Deepest nesting accepted (the check's default limit).
const MAX_DEPTH: usize = 512;

/// The error of an export whose text the validator refused.
pub(crate) fn not_strict(message: String) -> Error {
    Error::State(format!(
        "Kineto's trace is not strict JSON even after kinetrace's repairs ({message}); the file \
         was not written"
    ))
}

/// The fast path ([`Validator::container_fast`]) is tried for containers opened at most
/// this deep (an event is 2 deep: the document, `traceEvents`), and follows at most
/// [`FAST_DEPTH`] levels inside one; both far below [`MAX_DEPTH`].
const FAST_FROM: usize = 8;
const FAST_DEPTH: usize = 32;

/// [`Validator::number`] without its messages: the offset after the number at `at`, or
/// None (invalid, or reaching the end of the piece, where it may go on).
#[inline]
fn fast_number(buf: &[u8], at: usize) -> Option<usize> {
    let digits = |mut k: usize| {
        while k < buf.len() && buf[k].is_ascii_digit() {
            k += 1;
        }
        k
    };
    let mut i = at;
    if buf[i] == b'-' {
        i += 1;
    }
    match *buf.get(i)? {
        b'0' if buf.get(i + 1)?.is_ascii_digit() => return None,
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(i + 1),
        _ => return None,
    }
    if *buf.get(i)? == b'.' {
        if !buf.get(i + 1)?.is_ascii_digit() {
            return None;
        }
        i = digits(i + 2);
    }
    if matches!(*buf.get(i)?, b'e' | b'E') {
        i += 1;
        if matches!(*buf.get(i)?, b'+' | b'-') {
            i += 1;
        }
        if !buf.get(i)?.is_ascii_digit() {
            return None;
        }
        i = digits(i + 1);
    }
    buf.get(i)?;
    Some(i)
}

/// `true`, `false` or `null` at `at`: the offset after it, or None.
#[inline]
fn fast_literal(buf: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    buf[at..].starts_with(word).then_some(at + word.len())
}

/// Skips whitespace from `i`.
#[inline(always)]
fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && is_ws(buf[i]) {
        i += 1;
    }
    i
}

/// JSON's whitespace: a test and a shift, not a table of jumps (Kineto indents every line).
#[inline(always)]
fn is_ws(b: u8) -> bool {
    const WS: u64 = 1 << b' ' | 1 << b'\n' | 1 << b'\r' | 1 << b'\t';
    b <= b' ' && WS >> b & 1 == 1
}

/// What the text may hold next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A value (the document's, or after a `:`).
    Value,
    /// After `[`: a value or `]`.
    ValueOrClose,
    /// After a `,` in an array: a value (`]` would be a trailing comma).
    Item,
    /// After `{`: a key or `}`.
    KeyOrClose,
    /// After a `,` in an object: a key.
    Key,
    /// After a key.
    Colon,
    /// After a value inside a container: `,` or its closer.
    CommaOrClose,
    /// After the top-level value: whitespace only.
    Done,
}

/// A token that a piece cut short (the caller hands its bytes again with more after them).
struct Short;

/// Why scanning stopped inside a piece.
enum Stop {
    Short,
    Invalid(String),
}

impl From<Short> for Stop {
    fn from(_: Short) -> Self {
        Stop::Short
    }
}

/// The streaming strict check (see the module docs).
pub(crate) struct Validator {
    /// The closers (`}` or `]`) of the containers open.
    stack: Vec<u8>,
    next: Next,
    /// Offset in the source text of the next byte [`Validator::feed`] is given.
    offset: u64,
    /// Offsets (in the source text, ascending) of the inner quotes to escape.
    repairs: Vec<u64>,
    /// Members checked right after the document's opening `{` (inserted there by the caller).
    head: Vec<u8>,
    /// Source offset just after the document's opening `{`.
    head_at: Option<u64>,
    /// Elements of the top-level `traceEvents` array(s).
    events: u64,
    /// Stack depth of the `traceEvents` array being read (0: none).
    events_depth: usize,
    /// The last top-level key was `traceEvents`.
    events_key: bool,
    /// Quote repair on (off while checking the inserted members, which are ours).
    repair: bool,
}

impl Validator {
    /// A validator for a document whose opening `{` is followed by `head` (members
    /// `"key": value,` the caller inserts there; may be empty).
    pub(crate) fn new(head: Vec<u8>) -> Self {
        Validator {
            stack: Vec::new(),
            next: Next::Value,
            offset: 0,
            repairs: Vec::new(),
            head,
            head_at: None,
            events: 0,
            events_depth: 0,
            events_key: false,
            repair: true,
        }
    }

    /// Checks the complete tokens at the start of `text` (which continues the text fed so
    /// far): the number of bytes consumed; the caller hands the rest again, followed by more.
    /// An error message starts with the offset in the source text.
    pub(crate) fn feed(&mut self, text: &[u8]) -> Result<usize, String> {
        let consumed = self.scan(text, false)?;
        self.offset += consumed as u64;
        Ok(consumed)
    }

    /// Checks `rest`, the end of the text: Ok when all of it was one strict JSON document.
    pub(crate) fn finish(&mut self, rest: &[u8]) -> Result<(), String> {
        let consumed = self.scan(rest, true)?;
        debug_assert_eq!(consumed, rest.len());
        self.offset += consumed as u64;
        match self.next {
            Next::Done => Ok(()),
            Next::Value if self.offset == 0 => Err("offset 0: empty text".into()),
            _ => Err(format!(
                "offset {}: unexpected end of the text, expected {}",
                self.offset,
                self.expected()
            )),
        }
    }

    /// Offset in the source text of the next byte to feed.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// The inner quotes found so far (source offsets, ascending), each to be escaped; the
    /// caller may take them as it writes the text out.
    pub(crate) fn repairs(&mut self) -> &mut Vec<u64> {
        &mut self.repairs
    }

    /// Source offset just after the document's opening `{`, once it was read.
    pub(crate) fn head_at(&self) -> Option<u64> {
        self.head_at
    }

    /// Elements of the top-level `traceEvents` array read so far.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    fn expected(&self) -> &'static str {
        match self.next {
            Next::Value | Next::Item => "a value",
            Next::ValueOrClose => "a value or ']'",
            Next::KeyOrClose => "a key or '}'",
            Next::Key => "a key",
            Next::Colon => "':'",
            Next::CommaOrClose if self.stack.last() == Some(&b'}') => "',' or '}'",
            Next::CommaOrClose => "',' or ']'",
            Next::Done => "nothing",
        }
    }

    fn fail(&self, at: usize, msg: impl AsRef<str>) -> String {
        format!("offset {}: {}", self.offset + at as u64, msg.as_ref())
    }

    /// After a complete value.
    fn after_value(&mut self) {
        self.next = if self.stack.is_empty() {
            Next::Done
        } else {
            Next::CommaOrClose
        };
    }

    fn close(&mut self) {
        if self.stack.len() == self.events_depth {
            self.events_depth = 0;
        }
        self.stack.pop();
        self.after_value();
    }

    /// The scan of one piece: bytes consumed (complete tokens), or the first error.
    fn scan(&mut self, buf: &[u8], at_end: bool) -> Result<usize, String> {
        let mut i = 0;
        loop {
            while i < buf.len() && is_ws(buf[i]) {
                i += 1;
            }
            let Some(&b) = buf.get(i) else {
                return Ok(buf.len());
            };
            let step = match self.next {
                Next::CommaOrClose => {
                    let close = *self.stack.last().expect("inside a container");
                    if b == b',' {
                        self.next = if close == b'}' { Next::Key } else { Next::Item };
                        Ok(i + 1)
                    } else if b == close {
                        self.close();
                        Ok(i + 1)
                    } else {
                        Err(Stop::Invalid(self.fail(
                            i,
                            format!("expected ',' or '{}', found {}", close as char, show(b)),
                        )))
                    }
                }
                Next::Colon => {
                    if b == b':' {
                        self.next = Next::Value;
                        Ok(i + 1)
                    } else {
                        Err(Stop::Invalid(self.fail(
                            i,
                            format!("expected ':' after a key, found {}", show(b)),
                        )))
                    }
                }
                Next::KeyOrClose | Next::Key => {
                    if b == b'"' {
                        self.key(buf, i, at_end)
                    } else if b == b'}' && self.next == Next::KeyOrClose {
                        self.close();
                        Ok(i + 1)
                    } else if b == b'}' {
                        Err(Stop::Invalid(self.fail(i, "trailing comma before '}'")))
                    } else {
                        Err(Stop::Invalid(self.fail(
                            i,
                            format!("expected a string key, found {}", show(b)),
                        )))
                    }
                }
                Next::Value | Next::ValueOrClose | Next::Item => {
                    if b == b']' && self.next == Next::ValueOrClose {
                        self.close();
                        Ok(i + 1)
                    } else if b == b']' && self.next == Next::Item {
                        Err(Stop::Invalid(self.fail(i, "trailing comma before ']'")))
                    } else {
                        self.value(buf, i, at_end)
                    }
                }
                Next::Done => Err(Stop::Invalid(self.fail(
                    i,
                    format!("extra data after the top-level value: {}", show(b)),
                ))),
            };
            match step {
                Ok(end) => i = end,
                Err(Stop::Short) if !at_end => return Ok(i),
                Err(Stop::Short) if b == b'"' => {
                    return Err(self.fail(i, "unterminated string (the text ends inside it)"));
                }
                Err(Stop::Short) => return Err(self.fail(i, "the text ends inside a value")),
                Err(Stop::Invalid(msg)) => return Err(msg),
            }
        }
    }

    /// At a key's opening quote: the end of the key.
    fn key(&mut self, buf: &[u8], at: usize, at_end: bool) -> Result<usize, Stop> {
        let end = self.string(buf, at, at_end)?;
        if self.stack.len() == 1 {
            self.events_key = &buf[at + 1..end - 1] == b"traceEvents";
        }
        self.next = Next::Colon;
        Ok(end)
    }

    /// At the first byte of a value: the end of what was consumed (a whole scalar, or the
    /// opening of a container).
    fn value(&mut self, buf: &[u8], at: usize, at_end: bool) -> Result<usize, Stop> {
        let is_event = self.events_depth != 0 && self.stack.len() == self.events_depth;
        let end = match buf[at] {
            b'{' | b'[' if self.stack.len() >= 2 && self.stack.len() <= FAST_FROM => {
                if let Some(end) = self.container_fast(buf, at) {
                    if is_event {
                        self.events += 1;
                    }
                    self.after_value();
                    return Ok(end);
                }
                return self.open(buf, at, is_event);
            }
            b'{' | b'[' => return self.open(buf, at, is_event),
            b'"' => self.string(buf, at, at_end)?,
            b'-' | b'0'..=b'9' => self.number(buf, at, at_end)?,
            b't' => self.literal(buf, at, b"true", at_end)?,
            b'f' => self.literal(buf, at, b"false", at_end)?,
            b'n' => self.literal(buf, at, b"null", at_end)?,
            b'N' => return Err(Stop::Invalid(self.fail(at, "NaN is not valid JSON"))),
            b'I' => return Err(Stop::Invalid(self.fail(at, "Infinity is not valid JSON"))),
            b => {
                return Err(Stop::Invalid(
                    self.fail(at, format!("expected a value, found {}", show(b))),
                ))
            }
        };
        if is_event {
            self.events += 1;
        }
        self.after_value();
        Ok(end)
    }

    /// At a `{` or `[`: opens the container in the state machine.
    fn open(&mut self, buf: &[u8], at: usize, is_event: bool) -> Result<usize, Stop> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(Stop::Invalid(
                self.fail(at, format!("nesting deeper than {MAX_DEPTH} levels")),
            ));
        }
        let object = buf[at] == b'{';
        let events = !object && self.stack.len() == 1 && self.events_key;
        self.stack.push(if object { b'}' } else { b']' });
        if events {
            self.events_depth = self.stack.len();
        }
        if !object {
            self.next = Next::ValueOrClose;
        } else {
            self.next = Next::KeyOrClose;
            if self.stack.len() == 1 {
                self.head_at = Some(self.offset + at as u64 + 1);
                self.check_head().map_err(Stop::Invalid)?;
            }
        }
        if is_event {
            self.events += 1;
        }
        Ok(at + 1)
    }

    /// The fast path for a container at `at` that lies whole in the piece (an event, its
    /// `args`): recursive descent, the position in the code standing for `next`. The offset
    /// after it, or None to leave it to the state machine (cut by the piece's end, invalid,
    /// or nested deeper than [`FAST_DEPTH`]), which then reads it token by token and says
    /// what is wrong. Whatever this accepts, the state machine accepts the same way.
    fn container_fast(&mut self, buf: &[u8], at: usize) -> Option<usize> {
        let repairs = self.repairs.len();
        let end = self.fast_value(buf, at, 0);
        if end.is_none() {
            self.repairs.truncate(repairs);
        }
        end
    }

    fn fast_value(&mut self, buf: &[u8], at: usize, depth: usize) -> Option<usize> {
        match buf[at] {
            b'{' => self.fast_object(buf, at, depth + 1),
            b'[' => self.fast_array(buf, at, depth + 1),
            b'"' => self.fast_string(buf, at),
            b'-' | b'0'..=b'9' => fast_number(buf, at),
            b't' => fast_literal(buf, at, b"true"),
            b'f' => fast_literal(buf, at, b"false"),
            b'n' => fast_literal(buf, at, b"null"),
            _ => None,
        }
    }

    /// [`Validator::string_end`] without its messages (None: let the state machine say).
    #[inline(always)]
    fn fast_string(&mut self, buf: &[u8], at: usize) -> Option<usize> {
        let mut i = at + 1;
        loop {
            i = plain_run_end(buf, i);
            match *buf.get(i)? {
                b'"' => match judge(&buf[i + 1..], false) {
                    Verdict::End => return Some(i + 1),
                    Verdict::Inner => {
                        self.repairs.push(self.offset + i as u64);
                        i += 1;
                    }
                    Verdict::NeedMore => return None,
                },
                b'\\' => match *buf.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' if buf.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => i += 6,
                    _ => return None,
                },
                0..=0x1f => return None,
                _ => i = self.utf8_char(buf, i).ok()?,
            }
        }
    }

    fn fast_object(&mut self, buf: &[u8], at: usize, depth: usize) -> Option<usize> {
        if depth > FAST_DEPTH {
            return None;
        }
        let mut i = skip_ws(buf, at + 1);
        if *buf.get(i)? == b'}' {
            return Some(i + 1);
        }
        loop {
            if *buf.get(i)? != b'"' {
                return None;
            }
            i = skip_ws(buf, self.fast_string(buf, i)?);
            if *buf.get(i)? != b':' {
                return None;
            }
            i = skip_ws(buf, i + 1);
            buf.get(i)?;
            i = skip_ws(buf, self.fast_value(buf, i, depth)?);
            match *buf.get(i)? {
                b',' => i = skip_ws(buf, i + 1),
                b'}' => return Some(i + 1),
                _ => return None,
            }
        }
    }

    fn fast_array(&mut self, buf: &[u8], at: usize, depth: usize) -> Option<usize> {
        if depth > FAST_DEPTH {
            return None;
        }
        let mut i = skip_ws(buf, at + 1);
        if *buf.get(i)? == b']' {
            return Some(i + 1);
        }
        loop {
            buf.get(i)?;
            i = skip_ws(buf, self.fast_value(buf, i, depth)?);
            match *buf.get(i)? {
                b',' => i = skip_ws(buf, i + 1),
                b']' => return Some(i + 1),
                _ => return None,
            }
        }
    }

    /// Checks the inserted members as if they followed the opening `{` (they are written
    /// there), without repairs: they are kinetrace's own JSON.
    fn check_head(&mut self) -> Result<(), String> {
        if self.head.is_empty() {
            return Ok(());
        }
        let head = std::mem::take(&mut self.head);
        let offset = self.offset;
        self.repair = false;
        let scanned = self.scan(&head, true);
        self.repair = true;
        self.offset = offset;
        match scanned {
            Ok(_) if self.next == Next::Key => Ok(()),
            Ok(_) => Err(format!(
                "the metadata inserted after the opening '{{' does not end with a member \
                 and ',': {:?}",
                String::from_utf8_lossy(&head)
            )),
            Err(e) => Err(format!(
                "in the metadata inserted after the opening '{{': {e}"
            )),
        }
    }

    /// At a string's opening quote: the offset after its closing quote.
    fn string(&mut self, buf: &[u8], at: usize, at_end: bool) -> Result<usize, Stop> {
        let repairs = self.repairs.len();
        let scanned = self.string_end(buf, at, at_end);
        if scanned.is_err() {
            // Scanned again (with more text after it) or abandoned: forget its repairs.
            self.repairs.truncate(repairs);
        }
        scanned
    }

    fn string_end(&mut self, buf: &[u8], at: usize, at_end: bool) -> Result<usize, Stop> {
        let mut i = at + 1;
        loop {
            i = plain_run_end(buf, i);
            let Some(&b) = buf.get(i) else {
                return Err(Stop::Short);
            };
            match b {
                b'"' => {
                    if !self.repair {
                        return Ok(i + 1);
                    }
                    match judge(&buf[i + 1..], at_end) {
                        Verdict::End => return Ok(i + 1),
                        Verdict::Inner => {
                            self.repairs.push(self.offset + i as u64);
                            i += 1;
                        }
                        Verdict::NeedMore => return Err(Stop::Short),
                    }
                }
                b'\\' => i = self.escape(buf, i)?,
                0..=0x1f => {
                    return Err(Stop::Invalid(self.fail(
                        i,
                        format!("raw control character U+{b:04X} in a string (must be escaped)"),
                    )));
                }
                _ => i = self.utf8_char(buf, i)?,
            }
        }
    }

    /// At a backslash in a string: the offset after the escape.
    fn escape(&self, buf: &[u8], at: usize) -> Result<usize, Stop> {
        let c = *buf.get(at + 1).ok_or(Short)?;
        match c {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Ok(at + 2),
            b'u' => {
                for k in at + 2..at + 6 {
                    if !buf.get(k).ok_or(Short)?.is_ascii_hexdigit() {
                        return Err(Stop::Invalid(
                            self.fail(at, "invalid \\u escape (needs 4 hex digits)"),
                        ));
                    }
                }
                Ok(at + 6)
            }
            _ => {
                let shown = if c.is_ascii_graphic() {
                    format!("'\\{}'", c as char)
                } else {
                    format!("'\\' followed by {}", show(c))
                };
                Err(Stop::Invalid(self.fail(
                    at,
                    format!(
                        "invalid escape {shown} in a string (a backslash must be written \\\\)"
                    ),
                )))
            }
        }
    }

    /// At a non-ASCII byte in a string: the offset after its UTF-8 character.
    fn utf8_char(&self, buf: &[u8], at: usize) -> Result<usize, Stop> {
        let b0 = buf[at];
        let Some((need, lo, hi)) = utf8_lead(b0) else {
            return Err(Stop::Invalid(
                self.fail(at, format!("invalid UTF-8 ({})", show(b0))),
            ));
        };
        for k in 1..=need {
            let b = *buf.get(at + k).ok_or(Short)?;
            let (l, h) = if k == 1 { (lo, hi) } else { UTF8_CONTINUATION };
            if !(l..=h).contains(&b) {
                return Err(Stop::Invalid(self.fail(
                    at,
                    format!("invalid UTF-8 sequence starting with {}", show(b0)),
                )));
            }
        }
        Ok(at + 1 + need)
    }

    /// At a number's first byte: the offset after it.
    fn number(&self, buf: &[u8], at: usize, at_end: bool) -> Result<usize, Stop> {
        // The byte at `k`; None past the end of the text, and a number that reaches the end
        // of a piece may go on in the next one.
        let byte = |k: usize| -> Result<Option<u8>, Stop> {
            match buf.get(k) {
                Some(&b) => Ok(Some(b)),
                None if at_end => Ok(None),
                None => Err(Stop::Short),
            }
        };
        let digits = |mut k: usize| {
            while k < buf.len() && buf[k].is_ascii_digit() {
                k += 1;
            }
            k
        };
        let need_digit = |k: usize, place: &str| -> Result<usize, Stop> {
            match byte(k)? {
                Some(b'0'..=b'9') => Ok(digits(k + 1)),
                Some(b) => Err(Stop::Invalid(
                    self.fail(k, format!("expected a digit {place}, found {}", show(b))),
                )),
                None => Err(Stop::Invalid(
                    self.fail(k, format!("the text ends where a digit {place} belongs")),
                )),
            }
        };
        let mut i = at;
        if buf[i] == b'-' {
            i += 1;
        }
        match byte(i)? {
            Some(b'0') => {
                i += 1;
                if byte(i)?.is_some_and(|b| b.is_ascii_digit()) {
                    return Err(Stop::Invalid(
                        self.fail(at, "leading zeros are not allowed in numbers"),
                    ));
                }
            }
            Some(b'1'..=b'9') => i = digits(i + 1),
            Some(b'I') => return Err(Stop::Invalid(self.fail(at, "-Infinity is not valid JSON"))),
            Some(b) => {
                return Err(Stop::Invalid(
                    self.fail(i, format!("expected a digit after '-', found {}", show(b))),
                ))
            }
            None => return Err(Stop::Invalid(self.fail(i, "the text ends in a number"))),
        }
        if byte(i)? == Some(b'.') {
            i = need_digit(i + 1, "after the decimal point")?;
        }
        if let Some(b'e' | b'E') = byte(i)? {
            i += 1;
            if let Some(b'+' | b'-') = byte(i)? {
                i += 1;
            }
            i = need_digit(i, "in the exponent")?;
        }
        // Where the digits ran to the end of a piece, the next byte is unknown.
        byte(i)?;
        Ok(i)
    }

    /// At the first byte of `true`, `false` or `null`: the offset after it.
    fn literal(&self, buf: &[u8], at: usize, word: &[u8], at_end: bool) -> Result<usize, Stop> {
        let have = &buf[at..buf.len().min(at + word.len())];
        if have == word {
            return Ok(at + word.len());
        }
        if have.len() < word.len() && word.starts_with(have) && !at_end {
            return Err(Stop::Short);
        }
        let word = std::str::from_utf8(word).expect("ASCII");
        Err(Stop::Invalid(
            self.fail(at, format!("invalid literal (expected {word})")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::lexer::strict_json_error;
    use crate::testing::{Damage, JSON_SPECIALS};

    /// `text` fed in pieces cut at `cuts` (the unconsumed rest handed again, as callers
    /// do): the repaired text and the event count, or the error.
    fn run(text: &[u8], cuts: &[usize], head: &[u8]) -> Result<(Vec<u8>, u64), String> {
        let mut v = Validator::new(head.to_vec());
        let mut pending: Vec<u8> = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
            let cut = cut.clamp(at, text.len());
            pending.extend_from_slice(&text[at..cut]);
            at = cut;
            if at == text.len() {
                break;
            }
            let n = v.feed(&pending)?;
            pending.drain(..n);
        }
        v.finish(&pending)?;
        assert_eq!(v.offset(), text.len() as u64);
        let mut out = Vec::new();
        let mut from = 0;
        let mut edits: Vec<(u64, &[u8])> = v.repairs.iter().map(|&r| (r, &b"\\"[..])).collect();
        if let Some(h) = v.head_at() {
            edits.push((h, head));
            edits.sort_by_key(|e| e.0);
        }
        for (pos, insert) in edits {
            out.extend_from_slice(&text[from..pos as usize]);
            out.extend_from_slice(insert);
            from = pos as usize;
        }
        out.extend_from_slice(&text[from..]);
        Ok((out, v.events()))
    }

    fn whole(text: &[u8]) -> Result<(Vec<u8>, u64), String> {
        run(text, &[], b"")
    }

    /// What the lexer's strict check (`kinetrace check`'s) says of `text`.
    fn check_says_valid(text: &[u8]) -> bool {
        strict_json_error(std::io::Cursor::new(text))
            .unwrap()
            .is_none()
    }

    fn every_split(text: &[u8], want: &[u8]) {
        assert_eq!(whole(text).unwrap().0, want, "whole");
        for cut in 0..=text.len() {
            assert_eq!(run(text, &[cut], b"").unwrap().0, want, "cut at {cut}");
        }
        let bytes: Vec<usize> = (1..text.len()).collect();
        assert_eq!(run(text, &bytes, b"").unwrap().0, want, "byte by byte");
    }

    #[test]
    fn valid_json_passes_unchanged() {
        let text = br#"{ "a": "x\"y\\", "b": ["p", "q"], "c": {"d": "e"},
    "f": "g", "n": [-0.5e+3, 0, 12, true, false, null, "\u00e9 caf\u00e9"]
}"#;
        every_split(text, text);
    }

    #[test]
    fn inner_quotes_are_escaped() {
        let text = b"{\n  \"name\": \"q\"uo/te\",\n  \"n2\": \"a\", b\",\n  \"n3\": \"\"x\"\"\n}";
        let want =
            b"{\n  \"name\": \"q\\\"uo/te\",\n  \"n2\": \"a\\\", b\",\n  \"n3\": \"\\\"x\\\"\"\n}";
        every_split(text, want);
        let parsed: serde_json::Value = serde_json::from_slice(want).unwrap();
        assert_eq!(parsed["name"], "q\"uo/te");
        assert_eq!(parsed["n2"], "a\", b");
        assert_eq!(parsed["n3"], "\"x\"");
    }

    #[test]
    fn events_are_the_elements_of_trace_events() {
        let text = br#"{"x": [{"ph": 1}], "traceEvents": [{"ph": "X", "args": {"traceEvents": [1, 2]}}, {"ph": "M"}, 3, [4]], "y": {"traceEvents": [5]}}"#;
        for cut in 0..=text.len() {
            assert_eq!(run(text, &[cut], b"").unwrap().1, 4, "cut at {cut}");
        }
        assert_eq!(whole(br#"{"traceEvents": []}"#).unwrap().1, 0);
        assert_eq!(whole(br#"[{"traceEvents": [1]}]"#).unwrap().1, 0);
    }

    #[test]
    fn the_head_goes_after_the_opening_brace_and_is_checked() {
        let head = b"\n  \"k\": {\"a\": [1, \"b\"]},";
        let text = b"  {\n  \"x\": 0\n}\n";
        for cut in 0..=text.len() {
            let (out, _) = run(text, &[cut], head).unwrap();
            assert_eq!(out, b"  {\n  \"k\": {\"a\": [1, \"b\"]},\n  \"x\": 0\n}\n");
        }
        // An empty object after the members would end in a trailing comma.
        assert!(run(b"{}", &[], head)
            .unwrap_err()
            .contains("trailing comma"));
        let err = run(b"{\"x\": 0}", &[], b"\"k\": nope,").unwrap_err();
        assert!(err.contains("metadata"), "{err}");
        let err = run(b"{\"x\": 0}", &[], b"\"k\": 1").unwrap_err();
        assert!(err.contains("metadata"), "{err}");
    }

    #[test]
    fn errors_name_the_offset() {
        for (text, offset, what) in [
            (&b"{\"a\": 1,}"[..], 8, "trailing comma"),
            (b"{\"a\": [1,]}", 9, "trailing comma"),
            (b"{\"a\": 01}", 6, "leading zeros"),
            (b"{\"a\": NaN}", 6, "NaN"),
            (b"{\"a\": -Infinity}", 6, "-Infinity"),
            (b"{\"a\": \"x\ty\"}", 8, "control character"),
            (b"{\"a\": \"\\x\"}", 7, "invalid escape"),
            (b"{\"a\": \"\\u12g4\"}", 7, "\\u escape"),
            (b"{\"a\": \"\xc3\x28\"}", 7, "UTF-8"),
            (b"{\"a\": \"\xed\xa0\x80\"}", 7, "UTF-8"),
            (b"{\"a\": 1} x", 9, "extra data"),
            (b"{\"a\", 1}", 4, "expected ':'"),
            (b"{\"a\" 1}", 1, "unterminated string"),
            (b"{\"a\": 1", 7, "unexpected end"),
            (b"{\"a\": tru}", 6, "invalid literal"),
            (b"{\"a\": 1.}", 8, "decimal point"),
            (b"   ", 3, "unexpected end"),
        ] {
            let err = whole(text).unwrap_err();
            assert!(
                err.starts_with(&format!("offset {offset}: ")) && err.contains(what),
                "{:?}: {err}",
                String::from_utf8_lossy(text)
            );
            assert!(!check_says_valid(text));
        }
        assert_eq!(whole(b"").unwrap_err(), "offset 0: empty text");
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(whole(deep.as_bytes()).unwrap_err().contains("nesting"));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        whole(ok.as_bytes()).unwrap();
    }

    const VALID: &[&str] = &[
        r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "void k<(int)1>", "pid": 0, "tid": 7, "ts": 5171285502386.186, "dur": 47.275, "args": {"grid": [1, 2, 3], "x": null, "y": true, "z": false, "e": -1.5e+10}}], "traceName": "/tmp/x.json"}"#,
        r#"{"name": "caf\u00e9 \"q\" \\ \/ \b\f\n\r\t", "s": "\ud83d\ude00 \udc00 \ud800x", "u": "ünï ☃ 😀"}"#,
        r#"[]"#,
        r#"{}"#,
        r#"[[[[]]], {"a": [{}]}]"#,
        r#"0"#,
        r#"-0.0e0"#,
        r#""""#,
        "{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [\n  {\n    \"ph\": \"X\", \"name\": \"a\"b\"\n  }\n  ]\n}\n",
    ];

    /// Damaged text: the validator accepts exactly what the check accepts after the repairs,
    /// however the text is cut into pieces.
    #[test]
    fn it_agrees_with_the_check_on_damaged_text() {
        let mut damage = Damage::new(0x5851_f42d_4c95_7f2d);
        let mut accepted = 0;
        for round in 0..20_000 {
            let base = VALID[(damage.next() % VALID.len() as u64) as usize].as_bytes();
            let mut text = base.to_vec();
            for _ in 0..damage.next() % 3 {
                if text.is_empty() {
                    break;
                }
                damage.edit(&mut text, JSON_SPECIALS);
            }
            let cut = (damage.next() % (text.len() as u64 + 1)) as usize;
            let outcome = run(&text, &[cut, cut + 3], b"");
            assert_eq!(
                outcome.as_ref().map(|(t, _)| t),
                whole(&text).as_ref().map(|(t, _)| t),
                "round {round}: cut at {cut}"
            );
            match outcome {
                Ok((repaired, _)) => {
                    if check_says_valid(&text) {
                        assert_eq!(repaired, text, "valid text was repaired");
                    }
                    assert!(
                        check_says_valid(&repaired),
                        "accepted {:?}",
                        String::from_utf8_lossy(&repaired)
                    );
                    accepted += 1;
                }
                // Text the check accepts needs no repair and is never refused.
                Err(e) => assert!(
                    !check_says_valid(&text),
                    "refused ({e}) {:?}",
                    String::from_utf8_lossy(&text)
                ),
            }
        }
        assert!(accepted > 1000, "{accepted}");
    }
}
