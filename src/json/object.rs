//! The members of a JSON object's text (valid JSON, as the scanner reads it): the one lookup
//! of a member by key, whose rule for a key written twice is the caller's.

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
}
