//! JSON fragments that the trace splices in verbatim: an activity's `metadata_json()`
//! (a list of object members without braces) and the values of the trace metadata header.
//!
//! Valid input is copied byte for byte, as torch does. Invalid input (which would make
//! torch's whole file unreadable) is repaired deterministically:
//! - inside strings: a backslash that starts no valid escape is itself escaped (`C:\dir`
//!   becomes `C:\\dir`), raw control characters are escaped, bytes that are not UTF-8 and
//!   lone surrogates become `\uXXXX` escapes, and an unterminated string is closed;
//! - outside strings: a bare word that is not a JSON literal or number (`NaN`, `Infinity`,
//!   `-Infinity`, `nan`, `inf`, ...) is written as a string holding that word.
//!
//! When the result is still not valid (broken structure), the whole input is written as
//! one JSON string instead: under the key [`UNPARSED_KEY`] for a member list, as the value
//! itself for a header value. Either way the output is always strict JSON.

use crate::json::render::{
    decode_char, push_ascii_escape, push_codepoint_escape, push_json_string,
};

/// Key under which a member list that cannot be repaired is kept, as a string.
pub(crate) const UNPARSED_KEY: &str = "kinetrace_unparsed_metadata";

/// What a fragment turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Valid: written verbatim.
    Verbatim,
    /// Invalid but repaired token by token.
    Repaired,
    /// Not repairable: written as a JSON string.
    Stringified,
    /// Only whitespace (a member list with no members): nothing written.
    Empty,
}

/// Appends a member list (`"k": v, ...` without braces). Returns what was done; with
/// [`Outcome::Empty`] nothing was appended and the caller must not write a separator.
pub(crate) fn push_members(out: &mut Vec<u8>, frag: &[u8]) -> Outcome {
    match validity(frag, Shape::Members) {
        Validity::Valid => {
            out.extend_from_slice(frag);
            Outcome::Verbatim
        }
        Validity::Empty => Outcome::Empty,
        Validity::Invalid => {
            let mark = out.len();
            repair_tokens(out, frag);
            match validity(&out[mark..], Shape::Members) {
                Validity::Valid => Outcome::Repaired,
                _ => {
                    out.truncate(mark);
                    push_json_string(out, UNPARSED_KEY.as_bytes());
                    out.extend_from_slice(b": ");
                    push_json_string(out, frag);
                    Outcome::Stringified
                }
            }
        }
    }
}

/// Appends one JSON value (a trace metadata header value). Never appends nothing: an empty
/// or broken value becomes a JSON string.
pub(crate) fn push_value(out: &mut Vec<u8>, value: &[u8]) -> Outcome {
    if validity(value, Shape::Value) == Validity::Valid {
        out.extend_from_slice(value);
        return Outcome::Verbatim;
    }
    let mark = out.len();
    repair_tokens(out, value);
    if validity(&out[mark..], Shape::Value) == Validity::Valid {
        Outcome::Repaired
    } else {
        out.truncate(mark);
        push_json_string(out, value);
        Outcome::Stringified
    }
}

/// True when `value` is one strict JSON value (surrounding whitespace allowed).
#[cfg(test)]
pub(crate) fn is_valid_value(value: &[u8]) -> bool {
    validity(value, Shape::Value) == Validity::Valid
}

/// True when `frag` is a non-empty strict member list.
#[cfg(test)]
pub(crate) fn is_valid_members(frag: &[u8]) -> bool {
    validity(frag, Shape::Members) == Validity::Valid
}

/// What a fragment must be: a member list (without braces) or one value.
#[derive(Clone, Copy)]
enum Shape {
    Members,
    Value,
}

/// Whether a fragment is strict JSON of its [`Shape`] (`Empty`: a member list of only
/// whitespace).
#[derive(Debug, PartialEq, Eq)]
enum Validity {
    Valid,
    Empty,
    Invalid,
}

fn validity(s: &[u8], shape: Shape) -> Validity {
    // Raw non-ASCII bytes are only allowed as valid UTF-8; checking it up front lets the
    // parser below treat every byte >= 0x80 as ordinary string content.
    if !s.is_ascii() && std::str::from_utf8(s).is_err() {
        return Validity::Invalid;
    }
    let mut p = Parser { s, i: 0 };
    p.skip_ws();
    if p.i == s.len() {
        return match shape {
            Shape::Members => Validity::Empty,
            Shape::Value => Validity::Invalid,
        };
    }
    let ok = match shape {
        Shape::Members => p.members_until_end(),
        Shape::Value => p.value(),
    };
    p.skip_ws();
    if ok && p.i == s.len() {
        Validity::Valid
    } else {
        Validity::Invalid
    }
}

/// A strict RFC 8259 recognizer over bytes; it builds nothing.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    #[inline]
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// `member (, member)*` running to the end of input (whitespace already skipped).
    fn members_until_end(&mut self) -> bool {
        loop {
            if !self.member() {
                return false;
            }
            self.skip_ws();
            if self.i == self.s.len() {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
            self.skip_ws();
        }
    }

    fn member(&mut self) -> bool {
        self.key_and_colon() && self.value()
    }

    /// One value. Iterative, with an explicit stack of open containers, so nesting of any
    /// depth is checked without recursion (and accepted, as Python's parser does).
    fn value(&mut self) -> bool {
        // true = object, false = array; allocates only when a container opens.
        let mut open: Vec<bool> = Vec::new();
        loop {
            match self.peek() {
                Some(b'{') => {
                    self.i += 1;
                    self.skip_ws();
                    if !self.eat(b'}') {
                        open.push(true);
                        if !self.key_and_colon() {
                            return false;
                        }
                        continue;
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    self.skip_ws();
                    if !self.eat(b']') {
                        open.push(false);
                        continue;
                    }
                }
                Some(b'"') => {
                    if !self.string() {
                        return false;
                    }
                }
                Some(b't') if self.literal(b"true") => {}
                Some(b'f') if self.literal(b"false") => {}
                Some(b'n') if self.literal(b"null") => {}
                Some(b'-' | b'0'..=b'9') => {
                    if !self.number() {
                        return false;
                    }
                }
                _ => return false,
            }
            // A value is complete: close containers until one continues with a comma.
            loop {
                let Some(&is_object) = open.last() else {
                    return true;
                };
                self.skip_ws();
                if self.eat(b',') {
                    self.skip_ws();
                    if is_object && !self.key_and_colon() {
                        return false;
                    }
                    break;
                }
                if !self.eat(if is_object { b'}' } else { b']' }) {
                    return false;
                }
                open.pop();
            }
        }
    }

    /// `"key" :` and the whitespace after it.
    fn key_and_colon(&mut self) -> bool {
        if !self.string() {
            return false;
        }
        self.skip_ws();
        if !self.eat(b':') {
            return false;
        }
        self.skip_ws();
        true
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> bool {
        self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return false,
        }
        if self.eat(b'.') && self.digits() == 0 {
            return false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return false;
            }
        }
        true
    }

    fn string(&mut self) -> bool {
        if !self.eat(b'"') {
            return false;
        }
        loop {
            // Fast skip over ordinary content.
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(b'\\') => {
                    if !self.escape() {
                        return false;
                    }
                }
                _ => return false, // control character or end of input
            }
        }
    }

    /// One escape sequence starting at a backslash.
    fn escape(&mut self) -> bool {
        match self.s.get(self.i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.i += 2;
                true
            }
            Some(b'u') if is_hex4(&self.s[self.i + 2..]) => {
                self.i += 6;
                true
            }
            _ => false,
        }
    }
}

fn is_hex4(s: &[u8]) -> bool {
    s.len() >= 4 && s[..4].iter().all(u8::is_ascii_hexdigit)
}

fn is_structural(b: u8) -> bool {
    matches!(
        b,
        b'{' | b'}' | b'[' | b']' | b':' | b',' | b'"' | b' ' | b'\t' | b'\n' | b'\r'
    )
}

fn is_json_literal_or_number(tok: &[u8]) -> bool {
    if matches!(tok, b"true" | b"false" | b"null") {
        return true;
    }
    let mut p = Parser { s: tok, i: 0 };
    p.number() && p.i == tok.len()
}

/// Re-emits `s` token by token with the repairs described in the module docs. The
/// structure (brackets, colons, commas) is kept as it is; the caller re-checks it.
fn repair_tokens(out: &mut Vec<u8>, s: &[u8]) {
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == b'"' {
            i = repair_string(out, s, i);
        } else if is_structural(b) {
            out.push(b);
            i += 1;
        } else {
            let end = s[i..]
                .iter()
                .position(|&c| is_structural(c))
                .map_or(s.len(), |n| i + n);
            let tok = &s[i..end];
            if is_json_literal_or_number(tok) {
                out.extend_from_slice(tok);
            } else {
                push_json_string(out, tok);
            }
            i = end;
        }
    }
}

/// Repairs one string starting at the quote at `start`; returns the index after it.
fn repair_string(out: &mut Vec<u8>, s: &[u8], start: usize) -> usize {
    out.push(b'"');
    let mut i = start + 1;
    while i < s.len() {
        let b = s[i];
        match b {
            b'"' => {
                out.push(b'"');
                return i + 1;
            }
            b'\\' => match s.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                    out.extend_from_slice(&s[i..i + 2]);
                    i += 2;
                }
                Some(b'u') if is_hex4(&s[i + 2..]) => {
                    out.extend_from_slice(&s[i..i + 6]);
                    i += 6;
                }
                _ => {
                    out.extend_from_slice(b"\\\\");
                    i += 1;
                }
            },
            0x00..=0x1f => {
                push_ascii_escape(out, b);
                i += 1;
            }
            0x80..=0xff => {
                let (cp, len) = decode_char(&s[i..]);
                let is_surrogate = (0xD800..=0xDFFF).contains(&cp);
                let is_replacement = cp == 0xFFFD && !s[i..].starts_with("\u{fffd}".as_bytes());
                if is_surrogate || is_replacement {
                    push_codepoint_escape(out, cp);
                } else {
                    out.extend_from_slice(&s[i..i + len]);
                }
                i += len;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out.push(b'"'); // unterminated: close it
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(s: &str) -> (String, Outcome) {
        members_bytes(s.as_bytes())
    }

    fn members_bytes(s: &[u8]) -> (String, Outcome) {
        let mut out = Vec::new();
        let outcome = push_members(&mut out, s);
        (String::from_utf8(out).unwrap(), outcome)
    }

    fn value(s: &str) -> (String, Outcome) {
        let mut out = Vec::new();
        let outcome = push_value(&mut out, s.as_bytes());
        (String::from_utf8(out).unwrap(), outcome)
    }

    fn assert_strict_object(members: &str) {
        let wrapped = format!("{{{members}}}");
        serde_json::from_str::<serde_json::Value>(&wrapped)
            .unwrap_or_else(|e| panic!("not strict JSON: {wrapped:?}: {e}"));
    }

    #[test]
    fn valid_fragments_are_verbatim() {
        let md = r#""Record function id": 0, "Input Dims": [[8, 8], [8, 8], []], "Input type": ["float", "float", "Scalar"], "Ev Idx": 5"#;
        assert_eq!(members(md), (md.to_string(), Outcome::Verbatim));
        let odd = "\"a\":{\"b\":[1,-2.5e+3,true,false,null,\"\\u00e9\\n\"]},\n \"é\": \"ok\"";
        assert_eq!(members(odd), (odd.to_string(), Outcome::Verbatim));
        assert_eq!(value("1").0, "1");
        assert_eq!(value(r#"{"rank": 0}"#).0, r#"{"rank": 0}"#);
        assert_eq!(value(r#" "x" "#).0, r#" "x" "#);
    }

    #[test]
    fn empty_member_list_writes_nothing() {
        assert_eq!(members(""), (String::new(), Outcome::Empty));
        assert_eq!(members("  \n"), (String::new(), Outcome::Empty));
    }

    #[test]
    fn bad_escapes_are_escaped() {
        let (out, how) = members(r#""path": "C:\dir\x""#);
        assert_eq!(how, Outcome::Repaired);
        assert_eq!(out, r#""path": "C:\\dir\\x""#);
        assert_strict_object(&out);
        let (out, _) = members(r#""u": "\u12""#);
        assert_eq!(out, r#""u": "\\u12""#);
    }

    #[test]
    fn control_characters_are_escaped() {
        let (out, how) = members("\"name\": \"a\nb\tc\u{1}\"");
        assert_eq!(how, Outcome::Repaired);
        assert_eq!(out, r#""name": "a\nb\tc\u0001""#);
    }

    #[test]
    fn non_finite_numbers_become_strings() {
        let (out, how) = members(r#""a": NaN, "b": [Infinity, -Infinity], "c": nan, "d": -inf"#);
        assert_eq!(how, Outcome::Repaired);
        assert_eq!(
            out,
            r#""a": "NaN", "b": ["Infinity", "-Infinity"], "c": "nan", "d": "-inf""#
        );
        assert_eq!(value("NaN").0, r#""NaN""#);
        assert_eq!(value("01").0, r#""01""#);
    }

    #[test]
    fn invalid_utf8_and_lone_surrogates_are_escaped() {
        let (out, how) = members_bytes(b"\"k\": \"a\xffb\xed\xa0\x80\"");
        assert_eq!(how, Outcome::Repaired);
        assert_eq!(out, r#""k": "a\ufffdb\ud800""#);
    }

    #[test]
    fn unterminated_string_is_closed() {
        let (out, how) = members(r#""k": "abc"#);
        assert_eq!(how, Outcome::Repaired);
        assert_eq!(out, r#""k": "abc""#);
    }

    #[test]
    fn broken_structure_is_kept_as_a_string() {
        for bad in [
            r#""a": 1,"#,
            r#""a" 1"#,
            "{",
            r#""a": [1, 2"#,
            "garbage",
            r#""a": 1}"#,
        ] {
            let (out, how) = members(bad);
            assert_eq!(how, Outcome::Stringified, "{bad}");
            assert_strict_object(&out);
            let parsed: serde_json::Value = serde_json::from_str(&format!("{{{out}}}")).unwrap();
            assert_eq!(parsed[UNPARSED_KEY], bad);
        }
        assert_eq!(value("").0, r#""""#);
        assert_eq!(value("[1,").0, r#""[1,""#);
    }

    #[test]
    fn any_nesting_depth_is_checked_without_recursion() {
        let deep = format!(
            "\"a\": {}0{}",
            "[{\"k\":".repeat(100_000),
            "}]".repeat(100_000)
        );
        assert_eq!(members(&deep).1, Outcome::Verbatim);
        let unbalanced = format!("\"a\": {}{}", "[".repeat(100_000), "]".repeat(99_999));
        let (out, how) = members(&unbalanced);
        assert_eq!(how, Outcome::Stringified);
        assert!(out.starts_with(&format!("\"{UNPARSED_KEY}\"")));
    }

    #[test]
    fn numbers_follow_the_grammar() {
        for good in [
            "0",
            "-0",
            "1.5",
            "1e5",
            "1E+5",
            "-1.25e-3",
            "123456789012345678901234567890",
        ] {
            assert!(is_valid_value(good.as_bytes()), "{good}");
        }
        for bad in ["01", "1.", ".5", "+1", "1e", "--1", "0x10", "1.e3"] {
            assert!(!is_valid_value(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn validity_agrees_with_serde_json_on_samples() {
        let samples = [
            r#""a": 1"#,
            r#""a": 1, "b": "x\"y""#,
            r#""a": [1, {"b": null}]"#,
            r#""a": 1 "b": 2"#,
            r#""a": tru"#,
            r#""a": "x"y""#,
            "\"a\": \"\u{7f}\"",
        ];
        for s in samples {
            let serde_ok = serde_json::from_str::<serde_json::Value>(&format!("{{{s}}}")).is_ok();
            assert_eq!(is_valid_members(s.as_bytes()), serde_ok, "{s}");
        }
    }
}
