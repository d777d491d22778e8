//! Rendering of numbers and strings exactly as torch's Python exporter writes them.
//!
//! - Microseconds: `{ns // 1000}.{ns % 1000:03}` from integer nanoseconds, never a float.
//! - Strings: what `json.dumps(s)` (ASCII output) writes, including `\uXXXX` escapes in
//!   lowercase hex and surrogate pairs for characters outside the BMP.
//!
//! Input strings are bytes in *generalized* UTF-8: valid UTF-8, except that a Python string
//! holding lone surrogates arrives encoded with `surrogatepass` (three bytes `ED A0..BF xx`).
//! `json.dumps` writes such a surrogate as `\udXXX`, and so do we.

/// Appends a signed integer in decimal.
#[inline]
pub(crate) fn push_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(value).as_bytes());
}

/// Appends `ns` nanoseconds as microseconds, `{ns // 1000}.{ns % 1000:03}` with floor
/// division as Python does it, so negative values render the way Python would.
#[inline]
pub(crate) fn push_micros(out: &mut Vec<u8>, ns: i128) {
    let whole = ns.div_euclid(1000);
    let frac = ns.rem_euclid(1000) as u32;
    if let Ok(small) = i64::try_from(whole) {
        push_int(out, small);
    } else {
        push_int(out, whole);
    }
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// `json.dumps(s)` for a string: quoted, escaped, ASCII only.
pub(crate) fn push_json_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    push_json_string_body(out, s);
    out.push(b'"');
}

/// The body of `json.dumps(s)` without the surrounding quotes.
pub(crate) fn push_json_string_body(out: &mut Vec<u8>, s: &[u8]) {
    let mut start = 0;
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            i += 1;
            continue;
        }
        out.extend_from_slice(&s[start..i]);
        if b < 0x80 {
            push_ascii_escape(out, b);
            i += 1;
        } else {
            let (cp, len) = decode_char(&s[i..]);
            push_codepoint_escape(out, cp);
            i += len;
        }
        start = i;
    }
    out.extend_from_slice(&s[start..]);
}

/// The escape `json.dumps` uses for an ASCII byte that needs one.
#[inline]
pub(crate) fn push_ascii_escape(out: &mut Vec<u8>, b: u8) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => push_u_escape(out, u32::from(b)),
    }
}

/// `\uXXXX` for a BMP code point (or a lone surrogate), a surrogate pair above it.
#[inline]
pub(crate) fn push_codepoint_escape(out: &mut Vec<u8>, cp: u32) {
    if cp >= 0x1_0000 {
        let v = cp - 0x1_0000;
        push_u_escape(out, 0xD800 | (v >> 10));
        push_u_escape(out, 0xDC00 | (v & 0x3FF));
    } else {
        push_u_escape(out, cp);
    }
}

#[inline]
fn push_u_escape(out: &mut Vec<u8>, unit: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[(unit >> 12 & 0xF) as usize],
        HEX[(unit >> 8 & 0xF) as usize],
        HEX[(unit >> 4 & 0xF) as usize],
        HEX[(unit & 0xF) as usize],
    ]);
}

/// Decodes one generalized-UTF-8 character at the start of `s` (non-empty, first byte at
/// least 0x80). Returns the code point and its length. Surrogates encoded in three bytes are
/// accepted (that is how lone surrogates reach us). A byte that starts no valid sequence
/// decodes as U+FFFD, one byte long, so bad input still gives valid output.
#[inline]
pub(crate) fn decode_char(s: &[u8]) -> (u32, usize) {
    let b0 = u32::from(s[0]);
    let cont = |i: usize| -> Option<u32> {
        s.get(i)
            .filter(|&&b| b & 0xC0 == 0x80)
            .map(|&b| u32::from(b & 0x3F))
    };
    let decoded = match b0 {
        0xC2..=0xDF => cont(1).map(|c1| (((b0 & 0x1F) << 6) | c1, 2)),
        0xE0..=0xEF => match (cont(1), cont(2)) {
            (Some(c1), Some(c2)) => {
                let cp = ((b0 & 0x0F) << 12) | (c1 << 6) | c2;
                (cp >= 0x800).then_some((cp, 3))
            }
            _ => None,
        },
        0xF0..=0xF4 => match (cont(1), cont(2), cont(3)) {
            (Some(c1), Some(c2), Some(c3)) => {
                let cp = ((b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3;
                (0x1_0000..=0x10_FFFF).contains(&cp).then_some((cp, 4))
            }
            _ => None,
        },
        _ => None,
    };
    decoded.unwrap_or((0xFFFD, 1))
}

/// `text` as a JSON string (quoted and escaped as in the trace), for messages.
pub(crate) fn quoted(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    push_json_string(&mut out, text.as_bytes());
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(ns: i128) -> String {
        let mut v = Vec::new();
        push_micros(&mut v, ns);
        String::from_utf8(v).unwrap()
    }

    fn dumps(s: &str) -> String {
        let mut v = Vec::new();
        push_json_string(&mut v, s.as_bytes());
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn micros_at_boundaries() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1), "0.001");
        assert_eq!(micros(999), "0.999");
        assert_eq!(micros(1000), "1.000");
        assert_eq!(micros(1001), "1.001");
        assert_eq!(micros(123_456_789), "123456.789");
        assert_eq!(micros(i64::MAX as i128), "9223372036854775.807");
        assert_eq!(micros(i64::MAX as i128 + 1000), "9223372036854776.807");
        // Python: -1 // 1000 == -1 and -1 % 1000 == 999.
        assert_eq!(micros(-1), "-1.999");
        assert_eq!(micros(-1000), "-1.000");
    }

    #[test]
    fn ints() {
        let mut v = Vec::new();
        push_int(&mut v, i64::MIN);
        v.push(b' ');
        push_int(&mut v, 0i64);
        assert_eq!(v, b"-9223372036854775808 0");
    }

    #[test]
    fn escaping_matches_json_dumps() {
        // Expected strings are what Python's json.dumps gives for the same input.
        assert_eq!(dumps("aten::add"), r#""aten::add""#);
        assert_eq!(dumps(""), r#""""#);
        assert_eq!(dumps("q\"uote"), r#""q\"uote""#);
        assert_eq!(dumps(r"C:\dir"), r#""C:\\dir""#);
        assert_eq!(dumps("a\nb\tc\r\u{8}\u{c}"), r#""a\nb\tc\r\b\f""#);
        // DEL is escaped too: json.dumps only leaves " " to "~" alone.
        assert_eq!(dumps("\u{0}\u{1f}\u{7f}"), r#""\u0000\u001f\u007f""#);
        assert_eq!(dumps("é"), r#""\u00e9""#);
        assert_eq!(dumps("€"), r#""\u20ac""#);
        assert_eq!(dumps("😀"), r#""\ud83d\ude00""#);
        assert_eq!(dumps("\u{ffff}"), r#""\uffff""#);
    }

    #[test]
    fn lone_surrogates_escape_like_python() {
        // '\ud800' encoded with surrogatepass.
        let mut v = Vec::new();
        push_json_string(&mut v, b"a\xed\xa0\x80b");
        assert_eq!(v, br#""a\ud800b""#);
        // A surrogate pair given as two lone surrogates reads like the real character.
        v.clear();
        push_json_string(&mut v, b"\xed\xa0\xbd\xed\xb8\x80");
        assert_eq!(v, br#""\ud83d\ude00""#);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut v = Vec::new();
        push_json_string(&mut v, b"a\xffb\xc3");
        assert_eq!(v, br#""a\ufffdb\ufffd""#);
    }
}
