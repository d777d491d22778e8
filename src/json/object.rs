//! The members of a JSON object's text (valid JSON, as the scanner reads it): the one lookup
//! of a member by key, whose rule for a key written twice is the caller's.

use std::borrow::Cow;

use crate::json::scan::Scanner;

/// Which of a key's members a lookup answers when the object has the key more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Duplicates {
    /// The first, without reading the rest of the object (what `check` reports against).
    First,
    /// The last, as JavaScript's `JSON.parse` and Python's `json` keep it (what a viewer
    /// sees; `merge` reads pids and ranks so); the whole object must scan.
    Last,
}

/// The raw text of member `key` of the JSON object `obj`, if the scanner can read the object
/// (as far as needed) and the key is written without escapes.
pub(crate) fn member<'a>(obj: &'a [u8], key: &[u8], duplicates: Duplicates) -> Option<&'a [u8]> {
    let mut s = Scanner::new(obj);
    if s.ws()? != b'{' {
        return None;
    }
    s.pos += 1;
    if s.ws()? == b'}' {
        return None;
    }
    let mut found = None;
    loop {
        let k = s.key()?;
        s.ws()?;
        let start = s.pos;
        s.value(1)?;
        if &obj[k.start..k.end] == key {
            found = Some(&obj[start..s.pos]);
            if duplicates == Duplicates::First {
                return found;
            }
        }
        match s.ws()? {
            b',' => s.pos += 1,
            b'}' => return found,
            _ => return None,
        }
    }
}

/// The value of `"key": value` as written.
pub(crate) fn member_value(raw: &[u8]) -> Option<&[u8]> {
    let mut s = Scanner::new(raw);
    s.key()?;
    s.ws()?;
    Some(&raw[s.pos..])
}

/// The text between the quotes of a JSON string value as written (escapes kept).
pub(crate) fn string_body(value: &[u8]) -> Option<&[u8]> {
    let body = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    Some(body)
}

/// Tells `f` each member of the JSON object `obj` in order: the key's text between its
/// quotes as written, and the value as written. `None` when the scanner cannot read the
/// object (what `f` was told by then stands).
pub(crate) fn for_each_member<'a>(
    obj: &'a [u8],
    mut f: impl FnMut(&'a [u8], &'a [u8]),
) -> Option<()> {
    let mut s = Scanner::new(obj);
    if s.ws()? != b'{' {
        return None;
    }
    members_at(&mut s, 1, &mut f)
}

/// [`for_each_member`], with the members of member `nested`'s value (when an object) told
/// to `inner` on the same pass (`outer` is told `nested` too, its whole value as written):
/// one scan of an event for its members and its `args`.
pub(crate) fn for_each_member_and_nested<'a>(
    obj: &'a [u8],
    nested: &[u8],
    mut outer: impl FnMut(&'a [u8], &'a [u8]),
    mut inner: impl FnMut(&'a [u8], &'a [u8]),
) -> Option<()> {
    let mut s = Scanner::new(obj);
    if s.ws()? != b'{' {
        return None;
    }
    s.pos += 1;
    if s.ws()? == b'}' {
        return Some(());
    }
    loop {
        let k = s.key()?;
        let key = &obj[k.start..k.end];
        s.ws()?;
        let start = s.pos;
        if key == nested && obj[start] == b'{' {
            members_at(&mut s, 2, &mut inner)?;
        } else {
            s.value(1)?;
        }
        outer(key, &obj[start..s.pos]);
        match s.ws()? {
            b',' => s.pos += 1,
            b'}' => return Some(()),
            _ => return None,
        }
    }
}

/// Tells `f` the members of the object at the scanner's position (its `{`, at nesting
/// `depth`), leaving the scanner after its `}`.
fn members_at<'a>(
    s: &mut Scanner<'a>,
    depth: usize,
    f: &mut impl FnMut(&'a [u8], &'a [u8]),
) -> Option<()> {
    let text = s.buf;
    s.pos += 1;
    if s.ws()? == b'}' {
        s.pos += 1;
        return Some(());
    }
    loop {
        let k = s.key()?;
        s.ws()?;
        let start = s.pos;
        s.value(depth)?;
        f(&text[k.start..k.end], &text[start..s.pos]);
        match s.ws()? {
            b',' => s.pos += 1,
            b'}' => {
                s.pos += 1;
                return Some(());
            }
            _ => return None,
        }
    }
}

/// The text a JSON string's body (between its quotes, as written) stands for, escapes
/// decoded; a lone surrogate escape (`\ud800`, which no UTF-8 text can hold) becomes U+FFFD.
/// `None` for a malformed escape.
pub(crate) fn unescaped(body: &[u8]) -> Option<Cow<'_, [u8]>> {
    if !body.contains(&b'\\') {
        return Some(Cow::Borrowed(body));
    }
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let e = *body.get(i)?;
        i += 1;
        let decoded = match e {
            b'"' | b'\\' | b'/' => e,
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (cp, used) = code_point(&body[i..])?;
                i += used;
                let c = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            _ => return None,
        };
        out.push(decoded);
    }
    Some(Cow::Owned(out))
}

/// The code point of `\uXXXX` (after the `\u`), a surrogate pair joined: (code point, bytes
/// used); a lone surrogate is U+FFFD.
fn code_point(text: &[u8]) -> Option<(u32, usize)> {
    let hex4 = |t: &[u8]| -> Option<u32> {
        let digits = std::str::from_utf8(t.get(..4)?).ok()?;
        u32::from_str_radix(digits, 16).ok()
    };
    let high = hex4(text)?;
    if !(0xD800..0xDC00).contains(&high) {
        let lone_low = (0xDC00..0xE000).contains(&high);
        return Some((if lone_low { 0xFFFD } else { high }, 4));
    }
    match text.get(4..6) {
        Some(b"\\u") => match hex4(&text[6..])? {
            low @ 0xDC00..0xE000 => Some((0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00), 10)),
            _ => Some((0xFFFD, 4)),
        },
        _ => Some((0xFFFD, 4)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_written_twice_answers_by_the_rule() {
        let obj = br#"{"a": 1, "b": {"c": [2]}, "a": "x"}"#;
        assert_eq!(member(obj, b"a", Duplicates::First), Some(&b"1"[..]));
        assert_eq!(member(obj, b"a", Duplicates::Last), Some(&br#""x""#[..]));
        assert_eq!(
            member(obj, b"b", Duplicates::Last),
            Some(&br#"{"c": [2]}"#[..])
        );
        assert_eq!(member(obj, b"z", Duplicates::First), None);
        assert_eq!(member(b"{}", b"a", Duplicates::Last), None);
        assert_eq!(member(b"[1]", b"a", Duplicates::First), None);
    }

    #[test]
    fn the_last_needs_the_whole_object_the_first_does_not() {
        let cut = br#"{"a": 1, "b": "#;
        assert_eq!(member(cut, b"a", Duplicates::First), Some(&b"1"[..]));
        assert_eq!(member(cut, b"a", Duplicates::Last), None);
    }

    #[test]
    fn members_are_told_in_order_as_written() {
        let mut seen = Vec::new();
        let obj = br#"{"a": 1, "b\"c": {"d": [2]}, "a": "x"}"#;
        assert_eq!(for_each_member(obj, |k, v| seen.push((k, v))), Some(()));
        assert_eq!(
            seen,
            vec![
                (&b"a"[..], &b"1"[..]),
                (&br#"b\"c"#[..], &br#"{"d": [2]}"#[..]),
                (&b"a"[..], &br#""x""#[..])
            ]
        );
        assert_eq!(for_each_member(b"{}", |_, _| panic!("no member")), Some(()));
        assert_eq!(for_each_member(b"[1]", |_, _| ()), None);
        let (mut outer, mut inner) = (Vec::new(), Vec::new());
        let obj = br#"{"a": {"x": [1], "y": {}}, "b": 2, "a": 3}"#;
        let told = for_each_member_and_nested(
            obj,
            b"a",
            |k, v| outer.push((k, v)),
            |k, v| inner.push((k, v)),
        );
        assert_eq!(told, Some(()));
        assert_eq!(
            outer,
            [
                (&b"a"[..], &br#"{"x": [1], "y": {}}"#[..]),
                (b"b", b"2"),
                (b"a", b"3")
            ]
        );
        assert_eq!(inner, [(&b"x"[..], &b"[1]"[..]), (b"y", b"{}")]);
    }

    #[test]
    fn escapes_decode_to_the_text_they_stand_for() {
        let text = |body: &[u8]| String::from_utf8(unescaped(body).unwrap().into_owned()).unwrap();
        assert_eq!(text(b"plain"), "plain");
        assert_eq!(text(br#"a\"b\\c\/d\n\t"#), "a\"b\\c/d\n\t");
        assert_eq!(text(br"\u00e9\ud83d\ude00"), "\u{e9}\u{1F600}");
        assert_eq!(text(br"\ud800x"), "\u{FFFD}x");
        assert_eq!(text(br"\udc00"), "\u{FFFD}");
        assert_eq!(unescaped(br"\q"), None);
        assert_eq!(unescaped(br"\u12"), None);
    }
}
