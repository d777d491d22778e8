//! Kineto's text on its way to the output: the changes the fallback makes to what Kineto's
//! own writer (`result.save`) produces.
//!
//! - [`judge`]: Kineto (torch 2.11/2.12) writes a `"` inside a name unescaped
//!   (`"name": "a"b",`). Inside a string, a quote is taken as the string's end only where
//!   the text after it can follow a JSON string in Kineto's layout (`,` then a value or a
//!   key, `:`, `}`, `]`, a line end); any other quote is escaped. The validator
//!   ([`super::validator`]) applies the verdict as it reads the strings.
//! - [`head_members`]: `"key": value,` members inserted right after the document's opening
//!   `{` (metadata kinetrace carries itself, so that the file holds exactly the value given).
//! - [`TraceNameRewrite`]: Kineto's `"traceName": "<the path it was given>"` becomes the
//!   destination's name: the last occurrence of the given bytes in the text's tail.

use crate::export::fragment;
use crate::json::render::push_json_string;

/// What a quote inside a string is, judged by the bytes after it.
pub(crate) enum Verdict {
    End,
    Inner,
    NeedMore,
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `after` follows a quote inside a string; `at_end`: no more bytes will come.
#[inline]
pub(crate) fn judge(after: &[u8], at_end: bool) -> Verdict {
    let mut i = 0;
    while i < after.len() && is_space(after[i]) {
        i += 1;
    }
    let Some(&b) = after.get(i) else {
        return if at_end {
            Verdict::End
        } else {
            Verdict::NeedMore
        };
    };
    match b {
        b':' | b'}' | b']' | b'\n' | b'\r' => Verdict::End,
        b',' => {
            let mut j = i + 1;
            while j < after.len() && is_space(after[j]) {
                j += 1;
            }
            match after.get(j) {
                None if at_end => Verdict::End,
                None => Verdict::NeedMore,
                Some(&c) => match c {
                    b'"'
                    | b'{'
                    | b'['
                    | b'-'
                    | b'0'..=b'9'
                    | b't'
                    | b'f'
                    | b'n'
                    | b'\n'
                    | b'\r' => Verdict::End,
                    _ => Verdict::Inner,
                },
            }
        }
        _ => Verdict::Inner,
    }
}

/// The `"key": value,` members written after the opening `{` for `(key, JSON text)` pairs: a value
/// that is not valid JSON is repaired or written as a string, as the main exporter does.
pub(crate) fn head_members(metadata: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in metadata {
        out.extend_from_slice(b"\n  ");
        push_json_string(&mut out, key.as_bytes());
        out.extend_from_slice(b": ");
        fragment::push_value(&mut out, value.as_bytes());
        out.push(b',');
    }
    out
}

/// Bytes kept back at the end of the stream (beyond the searched bytes themselves) for the
/// trace-name rewrite: Kineto writes the name within the last few hundred bytes.
const TAIL: usize = 4096;

/// Replaces the last occurrence of `needle` near the end of the stream with `replacement`.
pub(crate) struct TraceNameRewrite {
    pub(crate) needle: Vec<u8>,
    pub(crate) replacement: Vec<u8>,
}

impl TraceNameRewrite {
    /// How many bytes at the end of the stream the caller holds back for [`Self::apply`].
    pub(crate) fn keep(&self) -> usize {
        TAIL + self.needle.len()
    }

    /// Where the last occurrence of the needle starts in `tail`, if it is there.
    pub(crate) fn find(&self, tail: &[u8]) -> Option<usize> {
        let n = self.needle.len();
        if n == 0 || tail.len() < n {
            return None;
        }
        tail.windows(n).rposition(|w| w == self.needle.as_slice())
    }

    /// Rewrites the stream's tail (the last [`Self::keep`] bytes or more) in place.
    pub(crate) fn apply(&self, tail: &mut Vec<u8>) {
        if let Some(at) = self.find(tail) {
            tail.splice(at..at + self.needle.len(), self.replacement.iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_members_repairs_or_quotes_values() {
        let members = head_members(&[
            ("run".into(), "{\"a\": 1}".into()),
            ("note".into(), "not json".into()),
        ]);
        let mut out = b"{".to_vec();
        out.extend_from_slice(&members);
        out.extend_from_slice(b"\n  \"x\": 0\n}");
        let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed["run"]["a"], 1);
        assert_eq!(parsed["note"], "not json");
        assert_eq!(parsed["x"], 0);
        assert!(head_members(&[]).is_empty());
    }

    #[test]
    fn rewrite_replaces_the_last_occurrence() {
        let rewrite = TraceNameRewrite {
            needle: b"\"/tmp/x/trace.json\"".to_vec(),
            replacement: b"\"out.json\"".to_vec(),
        };
        let mut tail =
            br#"{"a": "/tmp/x/trace.json"}],"traceName": "/tmp/x/trace.json" }"#.to_vec();
        rewrite.apply(&mut tail);
        assert_eq!(
            tail,
            br#"{"a": "/tmp/x/trace.json"}],"traceName": "out.json" }"#.to_vec()
        );
        let mut short = b"\"/tmp".to_vec();
        rewrite.apply(&mut short);
        assert_eq!(short, b"\"/tmp");
    }
}
