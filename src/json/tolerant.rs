//! A tolerant JSON reader for `kinetrace repair`: reads one JSON value from text in memory
//! that may be damaged, and writes the nearest strict JSON text, counting each fix.
//!
//! Valid text comes out unchanged. The fixes:
//! - in a string: a raw control character is escaped (`\n`, `\t`, ... or `\u00XX`); a
//!   backslash that starts no valid escape is escaped (`C:\dir` becomes `C:\\dir`); a
//!   byte sequence that is not UTF-8 becomes U+FFFD (one per maximal invalid sequence, as
//!   Python's and Rust's lossy decoders do); a `"` is escaped unless what follows it can
//!   follow the string (see below);
//! - `NaN`, `Infinity`, `-Infinity`, and any other bare word that is not a JSON number or
//!   literal, become a string holding the word (what kinetrace's export does with them,
//!   [`crate::export::fragment`]);
//! - a comma before a closing bracket, or one of two commas in a row, is removed.
//!
//! Where a string ends: at the first `"` that is followed (after whitespace) by what can
//! follow the string where it is: `:` after a key; `}` or `,` and then a key's `"` after a
//! value in an object; `]` or `,` and then the start of a value after one in an array. Any
//! other `"` is taken as part of the string and escaped, unless `:` follows it (that looks
//! like a key after a missing comma) or the string then runs past a raw newline: those are
//! not repaired, nor is a key with a `"` in it. A `\"` followed by what can follow
//! the string is ambiguous (an escaped quote, or a path ending in a backslash before the
//! closing quote): the value is not repaired. Anything else that is not JSON (a missing
//! comma or colon, a key that is not a string, nesting deeper than [`MAX_DEPTH`]) is not
//! repaired either: the caller drops what holds it.
//!
//! Text that ends before the value does is [`Damage::Incomplete`]: the caller reads more, or
//! at the end of the input knows the value was cut.

/// Deepest nesting repaired (the strict reader's limit).
pub(crate) const MAX_DEPTH: usize = 512;

/// A kind of fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Fix {
    /// A `"` inside a string escaped.
    Quote,
    /// A backslash starting no valid escape, escaped.
    Backslash,
    /// A raw control character escaped.
    Control,
    /// An invalid UTF-8 sequence replaced by U+FFFD.
    Utf8,
    /// `NaN`, `Infinity` or `-Infinity` written as a string.
    NonFinite,
    /// Another bare word written as a string.
    BareWord,
    /// A stray comma removed.
    Comma,
}

/// Why a value was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Damage {
    /// The text ends inside the value.
    Incomplete,
    /// Damage this reader does not repair, at this offset of the text: the message.
    Unrepairable(usize, String),
}

/// Where a value is, which decides what may follow a string in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// An object's key.
    Key,
    /// A value in an object (or a member of the top-level object).
    InObject,
    /// An element of an array.
    InArray,
}

type Read<T> = std::result::Result<T, Damage>;

/// One repaired value: its end in the text, the repaired text, the fixes made.
pub(crate) struct Fixer<'a> {
    text: &'a [u8],
    /// Where reading is in `text`.
    pos: usize,
    /// The repaired text so far.
    pub(crate) out: Vec<u8>,
    /// Each fix made, with its offset in the text.
    pub(crate) fixes: Vec<(Fix, usize)>,
}

/// Whether `b` starts a JSON value (or a bare word this reader turns into a string).
fn starts_value(b: u8) -> bool {
    matches!(
        b,
        b'"' | b'{' | b'[' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n' | b'N' | b'I'
    ) || b.is_ascii_alphabetic()
}

/// A byte that may be part of a bare word.
fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-' | b'_')
}

impl<'a> Fixer<'a> {
    pub(crate) fn new(text: &'a [u8]) -> Self {
        Fixer {
            text,
            pos: 0,
            out: Vec::new(),
            fixes: Vec::new(),
        }
    }

    /// Reads the value at the start of the text (no whitespace before it), in `place`:
    /// the length of text it took.
    pub(crate) fn value_at_start(&mut self, place: Place) -> Read<usize> {
        self.pos = 0;
        self.out.clear();
        self.fixes.clear();
        self.value(place, 0)?;
        Ok(self.pos)
    }

    fn unrepairable<T>(&self, msg: impl Into<String>) -> Read<T> {
        Err(Damage::Unrepairable(self.pos, msg.into()))
    }

    fn peek(&self) -> Read<u8> {
        self.text.get(self.pos).copied().ok_or(Damage::Incomplete)
    }

    /// Copies whitespace; the next byte.
    fn ws(&mut self) -> Read<u8> {
        loop {
            let b = self.peek()?;
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Ok(b);
            }
            self.out.push(b);
            self.pos += 1;
        }
    }

    /// The first byte at or after `at` that is not whitespace, and where it is.
    fn next_solid(&self, mut at: usize) -> Read<(u8, usize)> {
        loop {
            let b = *self.text.get(at).ok_or(Damage::Incomplete)?;
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Ok((b, at));
            }
            at += 1;
        }
    }

    /// Whether what follows the `"` at `quote` can follow a string in `place`.
    fn ends_string(&self, quote: usize, place: Place) -> Read<bool> {
        let (b, at) = self.next_solid(quote + 1)?;
        Ok(match place {
            Place::Key => b == b':',
            Place::InObject => b == b'}' || (b == b',' && self.next_solid(at + 1)?.0 == b'"'),
            Place::InArray => b == b']' || (b == b',' && starts_value(self.next_solid(at + 1)?.0)),
        })
    }

    fn value(&mut self, place: Place, depth: usize) -> Read<()> {
        match self.peek()? {
            b'"' => self.string(place),
            b'{' => self.container(b'}', depth),
            b'[' => self.container(b']', depth),
            b'-' | b'0'..=b'9' => self.number_or_word(),
            b if b.is_ascii_alphabetic() => self.number_or_word(),
            b => self.unrepairable(format!(
                "expected a value, found {}",
                crate::json::lexer::show(b)
            )),
        }
    }

    /// An object or array, `close` its closer.
    fn container(&mut self, close: u8, depth: usize) -> Read<()> {
        if depth >= MAX_DEPTH {
            return self.unrepairable(format!("nesting deeper than {MAX_DEPTH} levels"));
        }
        let object = close == b'}';
        let place = if object {
            Place::InObject
        } else {
            Place::InArray
        };
        self.out.push(self.text[self.pos]);
        self.pos += 1;
        // Where in `out` the comma after the last item is, while no item followed it.
        let mut comma: Option<usize> = None;
        let mut items = 0usize;
        loop {
            let b = self.ws()?;
            if b == close {
                if let Some(c) = comma.take() {
                    self.out.remove(c);
                    self.fixes.push((Fix::Comma, self.pos));
                }
                self.out.push(b);
                self.pos += 1;
                return Ok(());
            }
            if b == b',' {
                if comma.is_some() || items == 0 {
                    // Two in a row, or one before the first item.
                    self.fixes.push((Fix::Comma, self.pos));
                } else {
                    comma = Some(self.out.len());
                    self.out.push(b',');
                }
                self.pos += 1;
                continue;
            }
            if items > 0 && comma.is_none() {
                return self.unrepairable(format!(
                    "expected ',' or '{}', found {}",
                    close as char,
                    crate::json::lexer::show(b)
                ));
            }
            comma = None;
            if object {
                if b != b'"' {
                    return self.unrepairable(format!(
                        "expected a string key, found {}",
                        crate::json::lexer::show(b)
                    ));
                }
                self.string(Place::Key)?;
                if self.ws()? != b':' {
                    return self.unrepairable("expected ':' after a key");
                }
                self.out.push(b':');
                self.pos += 1;
                self.ws()?;
            }
            self.value(place, depth + 1)?;
            items += 1;
        }
    }

    /// A number as JSON's grammar has it, or else a bare word (written as a string).
    fn number_or_word(&mut self) -> Read<()> {
        let start = self.pos;
        let mut end = start;
        while end < self.text.len() && word_byte(self.text[end]) {
            end += 1;
        }
        if end == self.text.len() {
            // The word may go on past the text.
            return Err(Damage::Incomplete);
        }
        let word = &self.text[start..end];
        self.pos = end;
        if is_json_number(word) || matches!(word, b"true" | b"false" | b"null") {
            self.out.extend_from_slice(word);
            return Ok(());
        }
        let fix = if matches!(word, b"NaN" | b"Infinity" | b"-Infinity") {
            Fix::NonFinite
        } else {
            Fix::BareWord
        };
        self.fixes.push((fix, start));
        self.out.push(b'"');
        self.out.extend_from_slice(word);
        self.out.push(b'"');
        Ok(())
    }

    /// A string (at its opening quote) in `place`.
    fn string(&mut self, place: Place) -> Read<()> {
        self.out.push(b'"');
        self.pos += 1;
        let mut raw_quote = false;
        loop {
            let start = self.pos;
            let rest = &self.text[start..];
            let n = rest
                .iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x80)
                .ok_or(Damage::Incomplete)?;
            self.out.extend_from_slice(&rest[..n]);
            self.pos += n;
            let b = self.text[self.pos];
            match b {
                b'"' => {
                    if self.ends_string(self.pos, place)? {
                        self.out.push(b'"');
                        self.pos += 1;
                        return Ok(());
                    }
                    if place == Place::Key {
                        return self.unrepairable("a key not followed by ':'");
                    }
                    if self.next_solid(self.pos + 1)?.0 == b':' {
                        return self.unrepairable(
                            "a '\"' followed by ':' inside a string (a key after a missing comma?)",
                        );
                    }
                    self.fixes.push((Fix::Quote, self.pos));
                    self.out.extend_from_slice(b"\\\"");
                    self.pos += 1;
                    raw_quote = true;
                }
                b'\n' if raw_quote => {
                    return self.unrepairable(
                        "a string with a raw '\"' in it runs past the end of its line",
                    );
                }
                b'\\' => self.escape(place)?,
                0..=0x1f => {
                    self.fixes.push((Fix::Control, self.pos));
                    crate::json::render::push_ascii_escape(&mut self.out, b);
                    self.pos += 1;
                }
                _ => self.utf8()?,
            }
        }
    }

    /// At a backslash in a string.
    fn escape(&mut self, place: Place) -> Read<()> {
        let at = self.pos;
        let c = *self.text.get(at + 1).ok_or(Damage::Incomplete)?;
        let valid = match c {
            b'"' => {
                if self.ends_string(at + 1, place)? {
                    return self.unrepairable(
                        "ambiguous \\\" (an escaped quote, or a backslash ending the string)",
                    );
                }
                true
            }
            b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => true,
            b'u' => {
                let hex = self.text.get(at + 2..at + 6).ok_or(Damage::Incomplete)?;
                hex.iter().all(u8::is_ascii_hexdigit)
            }
            _ => false,
        };
        if valid {
            let len = if c == b'u' { 6 } else { 2 };
            self.out.extend_from_slice(&self.text[at..at + len]);
            self.pos += len;
        } else {
            self.fixes.push((Fix::Backslash, at));
            self.out.extend_from_slice(b"\\\\");
            self.pos += 1;
        }
        Ok(())
    }

    /// At a non-ASCII byte in a string: the UTF-8 run up to the next ASCII byte, each invalid
    /// sequence replaced.
    fn utf8(&mut self) -> Read<()> {
        let start = self.pos;
        let end = self.text[start..]
            .iter()
            .position(|&b| b < 0x80)
            .map(|n| start + n)
            .ok_or(Damage::Incomplete)?;
        let mut run = &self.text[start..end];
        let mut at = start;
        loop {
            match std::str::from_utf8(run) {
                Ok(s) => {
                    self.out.extend_from_slice(s.as_bytes());
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    self.out.extend_from_slice(&run[..good]);
                    // A sequence cut by the ASCII byte after it is as invalid as any.
                    let bad = e.error_len().unwrap_or(run.len() - good);
                    self.fixes.push((Fix::Utf8, at + good));
                    self.out.extend_from_slice("\u{fffd}".as_bytes());
                    run = &run[good + bad..];
                    at += good + bad;
                }
            }
        }
        self.pos = end;
        Ok(())
    }
}

/// Whether `word` is a number as JSON's grammar has it.
fn is_json_number(word: &[u8]) -> bool {
    let mut i = 0;
    if word.first() == Some(&b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < word.len() && word[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    match word.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if word.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(word.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(word.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == word.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Repairs the value at the start of `text` in `place`: the repaired text and the fixes'
    /// kinds, or the damage.
    fn fix(text: &str, place: Place) -> Result<(String, Vec<Fix>), Damage> {
        let mut f = Fixer::new(text.as_bytes());
        let len = f.value_at_start(place)?;
        let _ = len;
        Ok((
            String::from_utf8(f.out.clone()).unwrap(),
            f.fixes.iter().map(|x| x.0).collect(),
        ))
    }

    fn event(text: &str) -> Result<(String, Vec<Fix>), Damage> {
        let doc = format!("{text}\n]");
        fix(&doc, Place::InArray)
    }

    #[test]
    fn valid_json_comes_out_unchanged() {
        for v in [
            r#"{"a": [1, -2.5e+3, "x\"y\\z\u00e9\/", true, false, null, {}], "b": {"c": []}}"#,
            r#"{"name":"é ✓ 😀","s":"\ud800"}"#,
            "{ }",
        ] {
            let (out, fixes) = event(v).unwrap();
            assert_eq!(out, v);
            assert!(fixes.is_empty());
        }
    }

    #[test]
    fn raw_quotes_are_escaped_where_the_string_end_is_clear() {
        let (out, fixes) = event(r#"{"name":"foo("bar")","ph":"X"}"#).unwrap();
        assert_eq!(out, r#"{"name":"foo(\"bar\")","ph":"X"}"#);
        assert_eq!(fixes, [Fix::Quote, Fix::Quote]);
        let (out, _) = event(r#"{"name":"say "hi"","ph":"X"}"#).unwrap();
        assert_eq!(out, r#"{"name":"say \"hi\"","ph":"X"}"#);
        let (out, _) = event(r#"{"args":{"v":["a"b", "c"]}}"#).unwrap();
        assert_eq!(out, r#"{"args":{"v":["a\"b", "c"]}}"#);
        // A quote followed by what follows a value: the string ends there, and the rest
        // must then read.
        assert!(matches!(
            event(r#"{"name":"a", "b","ph":"X"}"#),
            Err(Damage::Unrepairable(..))
        ));
    }

    #[test]
    fn backslashes_controls_and_utf8() {
        let (out, fixes) = event(r#"{"p":"C:\dir\x","q":"\u12G4"}"#).unwrap();
        assert_eq!(out, r#"{"p":"C:\\dir\\x","q":"\\u12G4"}"#);
        assert_eq!(fixes, [Fix::Backslash, Fix::Backslash, Fix::Backslash]);
        let (out, fixes) = event("{\"n\":\"a\tb\nc\u{1}\"}").unwrap();
        assert_eq!(out, r#"{"n":"a\tb\nc\u0001"}"#);
        assert_eq!(fixes, [Fix::Control; 3]);
        let mut raw = b"{\"n\":\"a\xffb\xc3\xa9\xe2\x9c\"}\n]".to_vec();
        let mut f = Fixer::new(&raw);
        f.value_at_start(Place::InArray).unwrap();
        assert_eq!(
            String::from_utf8(f.out.clone()).unwrap(),
            "{\"n\":\"a\u{fffd}bé\u{fffd}\"}"
        );
        assert_eq!(f.fixes, [(Fix::Utf8, 7), (Fix::Utf8, 11)]);
        raw.clear();
        // A backslash ending a path before the closing quote cannot be told from \".
        assert!(matches!(
            event(r#"{"p":"C:\dir\","ph":"X"}"#),
            Err(Damage::Unrepairable(..))
        ));
    }

    #[test]
    fn bare_words_and_commas() {
        let (out, fixes) = event(r#"{"a":NaN,"b":[Infinity,-Infinity,nan,01,],}"#).unwrap();
        assert_eq!(
            out,
            r#"{"a":"NaN","b":["Infinity","-Infinity","nan","01"]}"#
        );
        assert_eq!(
            fixes,
            [
                Fix::NonFinite,
                Fix::NonFinite,
                Fix::NonFinite,
                Fix::BareWord,
                Fix::BareWord,
                Fix::Comma,
                Fix::Comma
            ]
        );
        let (out, _) = event("[1,,2]").unwrap();
        assert_eq!(out, "[1,2]");
    }

    #[test]
    fn what_is_not_repaired() {
        for v in [
            r#"{"a":1 "b":2}"#,
            r#"{a:1}"#,
            r#"{"a" 1}"#,
            r#"{"a":}"#,
            &format!("{}{}", "[".repeat(600), "]".repeat(600)),
        ] {
            assert!(matches!(event(v), Err(Damage::Unrepairable(..))), "{v}");
        }
    }

    #[test]
    fn cut_text_is_incomplete() {
        let full = r#"{"name":"a\"b","x":[1.5,true,"\u00e9"],"y":{"z":null}}"#;
        for cut in 0..full.len() {
            let r = fix(&full[..cut], Place::InArray);
            assert_eq!(r.err(), Some(Damage::Incomplete), "{cut}");
        }
    }

    #[test]
    fn numbers() {
        for ok in ["0", "-0", "1.5", "1e5", "1E-2", "-0.0e+0", "123"] {
            assert!(is_json_number(ok.as_bytes()), "{ok}");
        }
        for bad in ["01", "1.", ".5", "1e", "+1", "-", "1.5.2", "0x10"] {
            assert!(!is_json_number(bad.as_bytes()), "{bad}");
        }
    }
}
