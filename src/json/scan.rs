//! The lexer's fast path: strict JSON scanning of text held whole in one slice.
//!
//! [`crate::json::lexer::Input`] reads a stream and may have to stop anywhere for more input, which
//! costs a bounds check, a possible refill and a `Result` at every token. The events of a
//! trace are a few hundred bytes each, so `split` and `filter` first make sure the next
//! [`WINDOW`] bytes are in the lexer's buffer and scan the event here, on a plain slice.
//!
//! A [`Scanner`] accepts only what the lexer accepts, or gives up (`None`): on anything it
//! does not like, and on text it cannot finish inside the slice (an event longer than the
//! window, nesting deeper than [`MAX_DEPTH`]), the caller reads the same bytes again with the
//! lexer, which either accepts them or reports the error with its message and position. So
//! the fast path changes how long reading takes, never what it returns; the tests compare
//! the two on valid, invalid and mutated text.

use crate::json::lexer::{Kind, STRING_STOP};

/// Bytes the caller makes available before scanning an event.
pub(crate) const WINDOW: usize = 64 << 10;

/// Deepest nesting the scanner follows (far below the lexer's limit, so that whatever it
/// accepts the lexer accepts too).
pub(crate) const MAX_DEPTH: usize = 32;

/// A string as scanned: where its text is, and whether it holds an escape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Str {
    /// The text between the quotes, as written.
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// No backslash in it: its decoded text is the text as written.
    pub(crate) plain: bool,
}

/// A strict JSON scanner over one slice.
pub(crate) struct Scanner<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Scanner { buf, pos: 0 }
    }

    /// Skips whitespace; the next byte, if the slice has one.
    #[inline]
    pub(crate) fn ws(&mut self) -> Option<u8> {
        loop {
            let b = *self.buf.get(self.pos)?;
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(b);
            }
            self.pos += 1;
        }
    }

    /// Skips whitespace and one expected byte.
    #[inline]
    pub(crate) fn expect(&mut self, want: u8) -> Option<()> {
        if self.ws()? != want {
            return None;
        }
        self.pos += 1;
        Some(())
    }

    /// The string at the position (its opening quote).
    #[inline]
    pub(crate) fn string(&mut self) -> Option<Str> {
        let buf = self.buf;
        let start = self.pos + 1;
        let mut i = start;
        let mut plain = true;
        let mut ascii = true;
        loop {
            i = plain_run_end(buf, i);
            match *buf.get(i)? {
                b'"' => break,
                b'\\' => {
                    plain = false;
                    match *buf.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let hex = buf.get(i + 2..i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            i += 6;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => {
                    ascii = false;
                    i += 1;
                }
            }
        }
        // Escapes are ASCII, so checking the text as written checks every character.
        if !ascii && std::str::from_utf8(&buf[start..i]).is_err() {
            return None;
        }
        self.pos = i + 1;
        Some(Str {
            start,
            end: i,
            plain,
        })
    }

    /// The number at the position (RFC 8259's grammar, nothing more).
    #[inline]
    pub(crate) fn number(&mut self) -> Option<()> {
        let buf = self.buf;
        let mut i = self.pos;
        if buf.get(i) == Some(&b'-') {
            i += 1;
        }
        match *buf.get(i)? {
            b'0' => {
                i += 1;
                if buf.get(i).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => i = digits(buf, i),
            _ => return None,
        }
        if buf.get(i) == Some(&b'.') {
            if !buf.get(i + 1)?.is_ascii_digit() {
                return None;
            }
            i = digits(buf, i + 1);
        }
        if matches!(buf.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(buf.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !buf.get(i)?.is_ascii_digit() {
                return None;
            }
            i = digits(buf, i);
        }
        // A number ending the slice may go on past it.
        if i == buf.len() {
            return None;
        }
        self.pos = i;
        Some(())
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if !self.buf[self.pos..].starts_with(word) {
            return None;
        }
        self.pos += word.len();
        Some(())
    }

    /// The value at the position (whitespace skipped), `depth` containers deep.
    pub(crate) fn value(&mut self, depth: usize) -> Option<Kind> {
        match *self.buf.get(self.pos)? {
            b'"' => self.string().map(|_| Kind::Str),
            b'-' | b'0'..=b'9' => self.number().map(|_| Kind::Num),
            b'{' => self.object(depth + 1).map(|_| Kind::Object),
            b'[' => self.array(depth + 1).map(|_| Kind::Array),
            b't' => self.literal(b"true").map(|_| Kind::Bool),
            b'f' => self.literal(b"false").map(|_| Kind::Bool),
            b'n' => self.literal(b"null").map(|_| Kind::Null),
            _ => None,
        }
    }

    /// At `{`: the object, `depth` containers deep counting itself.
    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        if self.ws()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.key()?;
            self.ws()?;
            self.value(depth)?;
            match self.ws()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// At `[`: the array, `depth` containers deep counting itself.
    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        if self.ws()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.ws()?;
            self.value(depth)?;
            match self.ws()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A key and its colon (whitespace first skipped); the position is left before the value.
    #[inline]
    pub(crate) fn key(&mut self) -> Option<Str> {
        if self.ws()? != b'"' {
            return None;
        }
        let key = self.string()?;
        self.expect(b':')?;
        Some(key)
    }
}

/// Where the run of plain string bytes (see [`STRING_STOP`]) from `i` ends: eight bytes at
/// a time while they last (most strings of a trace are short keys and names).
#[inline]
pub(crate) fn plain_run_end(buf: &[u8], mut i: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    /// The high bit of each byte of `x` that is zero, and maybe of some bytes after one.
    #[inline]
    fn zero_bytes(x: u64) -> u64 {
        x.wrapping_sub(ONES) & !x & HIGH
    }
    while let Some(word) = buf.get(i..i + 8) {
        let x = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        // Bytes below 0x20 (x - 0x20 borrows), '"', '\\', and bytes with the high bit set.
        let stop = (x.wrapping_sub(ONES * 0x20) & !x & HIGH)
            | zero_bytes(x ^ (ONES * u64::from(b'"')))
            | zero_bytes(x ^ (ONES * u64::from(b'\\')))
            | (x & HIGH);
        if stop != 0 {
            // The lowest flagged byte is always a true stop (a false flag needs a borrow
            // from a lower byte that is one).
            return i + (stop.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < buf.len() && !STRING_STOP[buf[i] as usize] {
        i += 1;
    }
    i
}

#[inline]
fn digits(buf: &[u8], mut i: usize) -> usize {
    while buf.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::lexer::{Input, Stop};
    use crate::testing::{Damage, JSON_SPECIALS};
    use std::io::Cursor;

    /// What the lexer makes of `text` as one value: its kind and length, or None if it
    /// refuses it.
    fn lexer_value(text: &[u8]) -> Option<(Kind, usize)> {
        let mut progress = |_| Ok(());
        let mut inp = Input::new(Cursor::new(text.to_vec()), &mut progress, 512);
        inp.skip_ws().ok()??;
        match inp.value(0, None) {
            Ok(kind) => Some((kind, inp.offset() as usize)),
            Err(Stop::Invalid(_)) => None,
            Err(Stop::Fatal(e)) => panic!("{e}"),
            Err(Stop::Read(e)) => panic!("{e}"),
        }
    }

    fn scanner_value(text: &[u8]) -> Option<(Kind, usize)> {
        let mut s = Scanner::new(text);
        s.ws()?;
        let kind = s.value(0)?;
        Some((kind, s.pos))
    }

    /// The scanner agrees with the lexer, or gives up; whether it accepted `text`.
    fn agrees(text: &[u8]) -> bool {
        // A value ending the slice is not known to be complete: compare with something after.
        let mut padded = text.to_vec();
        padded.push(b' ');
        let Some(fast) = scanner_value(&padded) else {
            return false;
        };
        assert_eq!(
            lexer_value(&padded),
            Some(fast),
            "scanner accepted {:?}",
            String::from_utf8_lossy(text)
        );
        true
    }

    const VALID: &[&str] = &[
        r#"{"ph": "X", "cat": "kernel", "name": "void k<(int)1>", "pid": 0, "tid": 7, "ts": 5171285502386.186, "dur": 47.275, "args": {"grid": [1, 2, 3], "x": null, "y": true, "z": false, "e": -1.5e+10}}"#,
        r#"{"name": "caf\u00e9 \"q\" \\ \/ \b\f\n\r\t", "s": "\ud83d\ude00 \udc00 \ud800x", "u": "ünï ☃ 😀"}"#,
        r#"[]"#,
        r#"{}"#,
        r#"[[[[]]], {"a": [{}]}]"#,
        r#"0"#,
        r#"-0.0e0"#,
        r#"123456789012345678901234567890"#,
        r#""""#,
    ];

    const INVALID: &[&str] = &[
        r#"{"a": 01}"#,
        r#"{"a": 1.}"#,
        r#"{"a": .5}"#,
        r#"{"a": 1e}"#,
        r#"{"a": -}"#,
        r#"{"a": NaN}"#,
        r#"{"a": Infinity}"#,
        r#"{"a": 1,}"#,
        r#"[1,]"#,
        r#"{"a" 1}"#,
        r#"{a: 1}"#,
        r#"{"a": "\x"}"#,
        r#"{"a": "\u12G4"}"#,
        r#"{"a": tru}"#,
        r#"{"a": nul}"#,
        "{\"a\": \"tab\there\"}",
        "{\"a\": \"\u{1}\"}",
        r#"{"a": [1 2]}"#,
        r#"{"a": {"b": 1}"#,
        r#"{"a": 'x'}"#,
    ];

    #[test]
    fn valid_values_are_scanned_as_the_lexer_reads_them() {
        for text in VALID {
            let mut padded = text.as_bytes().to_vec();
            padded.push(b' ');
            let fast = scanner_value(&padded);
            assert!(fast.is_some(), "scanner gave up on {text}");
            assert_eq!(fast, lexer_value(&padded), "{text}");
        }
    }

    #[test]
    fn invalid_values_are_refused() {
        for text in INVALID {
            let mut padded = text.as_bytes().to_vec();
            padded.push(b' ');
            assert_eq!(scanner_value(&padded), None, "{text}");
            agrees(text.as_bytes());
        }
        // Bad UTF-8: overlong, an encoded surrogate, a stray continuation byte, truncated.
        for bad in [
            &b"\"\xc0\xaf\""[..],
            b"\"\xed\xa0\x80\"",
            b"\"\x80\"",
            b"\"\xe2\x98\"",
        ] {
            assert_eq!(scanner_value(bad), None);
            agrees(bad);
        }
    }

    #[test]
    fn text_cut_short_is_left_to_the_lexer() {
        let text = VALID[0].as_bytes();
        for cut in 0..text.len() {
            let mut s = Scanner::new(&text[..cut]);
            assert_eq!(s.value(0), None, "accepted a value cut at {cut}");
        }
        // A number at the very end of the slice may continue past it.
        assert_eq!(Scanner::new(b"12").value(0), None);
    }

    #[test]
    fn nesting_deeper_than_the_scanner_follows_is_left_to_the_lexer() {
        let deep = format!(
            "{}{} ",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(scanner_value(deep.as_bytes()), None);
        let ok = format!("{}{} ", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(
            scanner_value(ok.as_bytes()).map(|(k, _)| k),
            Some(Kind::Array)
        );
    }

    #[test]
    fn plain_runs_end_at_the_first_stop_byte_wherever_it_is() {
        for stop in [b'"', b'\\', 0x00, 0x1f, 0x80, 0xff] {
            for at in 0..20 {
                let mut text = vec![b'a'; 24];
                text[at] = stop;
                if at + 1 < text.len() {
                    // A byte after the stop that could set a false flag.
                    text[at + 1] = 0x21;
                }
                assert_eq!(plain_run_end(&text, 0), at, "stop {stop:#x} at {at}");
                assert_eq!(plain_run_end(&text, at.min(3)), at);
            }
        }
        assert_eq!(plain_run_end(b"abcdefghijklmnopq", 0), 17);
        assert_eq!(plain_run_end(b"\x7f !#~", 0), 5);
    }

    #[test]
    fn strings_report_where_their_text_is_and_whether_it_is_escaped() {
        let mut s = Scanner::new(br#""abc" "a\nb" "#);
        assert_eq!(
            s.string(),
            Some(Str {
                start: 1,
                end: 4,
                plain: true
            })
        );
        s.ws();
        let escaped = s.string().unwrap();
        assert!(!escaped.plain);
        assert_eq!(&s.buf[escaped.start..escaped.end], br"a\nb");
    }

    /// Mutations of valid text (a byte replaced, dropped or repeated, bytes from a set of
    /// JSON's special ones): whenever the scanner accepts, the lexer reads the same.
    #[test]
    fn the_scanner_never_accepts_what_the_lexer_refuses() {
        let mut damage = Damage::new(0x2545_f491_4f6c_dd1d);
        let mut accepted = 0;
        for _ in 0..20_000 {
            let base = VALID[(damage.next() % VALID.len() as u64) as usize].as_bytes();
            let mut text = base.to_vec();
            for _ in 0..1 + damage.next() % 3 {
                if text.is_empty() {
                    break;
                }
                damage.edit(&mut text, JSON_SPECIALS);
            }
            accepted += usize::from(agrees(&text));
        }
        // Only accepted texts are compared: a scanner that accepted nothing would pass.
        eprintln!("scanner accepted {accepted} of 20000 damaged texts");
        assert!(
            accepted > 2_000,
            "the scanner accepted only {accepted} texts"
        );
    }
}
