//! Kineto's text, chunk by chunk, on its way to the output: the transforms the fallback
//! applies to what Kineto's own writer (`result.save`) produces. Each keeps the few bytes it
//! needs across chunk boundaries, so a chunk may end anywhere.
//!
//! - [`QuoteRepair`]: Kineto (torch 2.11/2.12) writes a `"` inside a name unescaped
//!   (`"name": "a"b",`). Inside a string, a quote is taken as the string's end only where
//!   the text after it can follow a JSON string in Kineto's layout (`,` then a value or a
//!   key, `:`, `}`, `]`, a line end); any other quote is escaped.
//! - [`HeadInsert`]: `"key": value,` members ([`head_members`]) inserted right after the
//!   document's opening `{` (metadata kinetrace carries itself, so that the file holds
//!   exactly the value given).
//! - [`TraceNameRewrite`]: Kineto's `"traceName": "<the FIFO's path>"` becomes the
//!   destination's name: the last occurrence of the given bytes in the stream's tail.
//! - [`EventCounter`]: counts the events (`"ph"` keys) that pass.

use crate::fragment;
use crate::render::push_json_string;

/// Escapes the quotes inside strings that Kineto left unescaped (see the module docs).
#[derive(Default)]
pub struct QuoteRepair {
    in_string: bool,
    /// The previous byte (inside a string) was a backslash.
    escaped: bool,
    /// Undecided bytes from the last chunk: a quote inside a string and what followed it.
    pending: Vec<u8>,
}

/// What a quote inside a string is, judged by the bytes after it.
enum Verdict {
    End,
    Inner,
    NeedMore,
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `after` follows a quote inside a string; `at_end`: no more bytes will come.
fn judge(after: &[u8], at_end: bool) -> Verdict {
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

impl QuoteRepair {
    /// Appends the repaired form of `data` to `out`; a few bytes may be held back until the
    /// next call (or [`QuoteRepair::finish`]).
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            self.run(data, false, out);
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(data);
            self.run(&joined, false, out);
        }
    }

    /// The held-back bytes, at the end of the stream.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let rest = std::mem::take(&mut self.pending);
        self.run(&rest, true, out);
    }

    fn run(&mut self, data: &[u8], at_end: bool, out: &mut Vec<u8>) {
        let mut i = 0;
        while i < data.len() {
            if !self.in_string {
                match data[i..].iter().position(|&b| b == b'"') {
                    Some(off) => {
                        out.extend_from_slice(&data[i..=i + off]);
                        i += off + 1;
                        self.in_string = true;
                        self.escaped = false;
                    }
                    None => {
                        out.extend_from_slice(&data[i..]);
                        return;
                    }
                }
                continue;
            }
            if self.escaped {
                out.push(data[i]);
                self.escaped = false;
                i += 1;
                continue;
            }
            match data[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                None => {
                    out.extend_from_slice(&data[i..]);
                    return;
                }
                Some(off) => {
                    out.extend_from_slice(&data[i..i + off]);
                    i += off;
                    if data[i] == b'\\' {
                        out.push(b'\\');
                        self.escaped = true;
                        i += 1;
                        continue;
                    }
                    match judge(&data[i + 1..], at_end) {
                        Verdict::End => {
                            out.push(b'"');
                            self.in_string = false;
                        }
                        Verdict::Inner => out.extend_from_slice(b"\\\""),
                        Verdict::NeedMore => {
                            self.pending.extend_from_slice(&data[i..]);
                            return;
                        }
                    }
                    i += 1;
                }
            }
        }
    }
}

/// Inserts `members` (each `"key": value,` with its line break) right after the first `{`.
pub struct HeadInsert {
    members: Option<Vec<u8>>,
}

impl HeadInsert {
    pub fn new(members: Vec<u8>) -> Self {
        HeadInsert {
            members: (!members.is_empty()).then_some(members),
        }
    }

    /// `data` with the members inserted if its first `{` is the document's (appended to `out`).
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let Some(members) = &self.members else {
            out.extend_from_slice(data);
            return;
        };
        match data.iter().position(|&b| b == b'{') {
            Some(at) => {
                out.extend_from_slice(&data[..=at]);
                out.extend_from_slice(members);
                out.extend_from_slice(&data[at + 1..]);
                self.members = None;
            }
            None => out.extend_from_slice(data),
        }
    }
}

/// The `"key": value,` members [`HeadInsert`] writes for `(key, JSON text)` pairs: a value
/// that is not valid JSON is repaired or written as a string, as the main exporter does.
pub fn head_members(metadata: &[(String, String)]) -> Vec<u8> {
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
pub struct TraceNameRewrite {
    pub needle: Vec<u8>,
    pub replacement: Vec<u8>,
}

impl TraceNameRewrite {
    /// How many bytes at the end of the stream the caller holds back for [`Self::apply`].
    pub fn keep(&self) -> usize {
        TAIL + self.needle.len()
    }

    /// Rewrites the stream's tail (the last [`Self::keep`] bytes or more) in place.
    pub fn apply(&self, tail: &mut Vec<u8>) {
        let n = self.needle.len();
        if n == 0 || tail.len() < n {
            return;
        }
        if let Some(at) = tail.windows(n).rposition(|w| w == self.needle.as_slice()) {
            tail.splice(at..at + n, self.replacement.iter().copied());
        }
    }
}

/// Every trace event has exactly one `"ph"` key.
const PH: &[u8] = b"\"ph\"";

/// Counts `"ph"` keys across chunk boundaries.
#[derive(Default)]
pub struct EventCounter {
    count: u64,
    /// The last (up to) 3 bytes seen.
    tail: [u8; 3],
    tail_len: usize,
}

impl EventCounter {
    pub fn feed(&mut self, data: &[u8]) {
        // Matches spanning the boundary: every 4-byte window of (tail + first 3 bytes)
        // spans it, since neither part alone holds 4 bytes.
        let head = data.len().min(3);
        let mut joined = [0u8; 6];
        joined[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        joined[self.tail_len..self.tail_len + head].copy_from_slice(&data[..head]);
        self.count += count_ph(&joined[..self.tail_len + head]);
        self.count += count_ph(data);
        // New tail: the last 3 bytes of (old tail + data); short data is all in `joined`.
        if data.len() >= 3 {
            self.tail.copy_from_slice(&data[data.len() - 3..]);
            self.tail_len = 3;
        } else {
            let n = self.tail_len + head;
            let keep = n.min(3);
            self.tail[..keep].copy_from_slice(&joined[n - keep..n]);
            self.tail_len = keep;
        }
    }

    /// The events counted so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

fn count_ph(hay: &[u8]) -> u64 {
    let mut count = 0;
    let mut i = 0;
    while i + PH.len() <= hay.len() {
        match hay[i..].iter().position(|&b| b == b'"') {
            Some(off) => {
                i += off;
                if hay[i..].starts_with(PH) {
                    count += 1;
                    i += PH.len();
                } else {
                    i += 1;
                }
            }
            None => break,
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repaired(chunks: &[&[u8]]) -> Vec<u8> {
        let mut r = QuoteRepair::default();
        let mut out = Vec::new();
        for chunk in chunks {
            r.feed(chunk, &mut out);
        }
        r.finish(&mut out);
        out
    }

    fn every_split(text: &[u8], want: &[u8]) {
        assert_eq!(repaired(&[text]), want, "whole");
        for cut in 0..=text.len() {
            assert_eq!(
                repaired(&[&text[..cut], &text[cut..]]),
                want,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(repaired(&bytes), want, "byte by byte");
    }

    #[test]
    fn valid_json_passes_unchanged() {
        let text = br#"{ "a": "x\"y\\", "b": ["p", "q"], "c": {"d": "e"},
    "f": "g"
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
    fn head_insert_goes_after_the_first_brace() {
        let mut h = HeadInsert::new(b"\n\"k\": 1,".to_vec());
        let mut out = Vec::new();
        h.feed(b"  ", &mut out);
        h.feed(b" {\n\"a\": {}}", &mut out);
        assert_eq!(out, b"   {\n\"k\": 1,\n\"a\": {}}");
    }

    #[test]
    fn head_members_repairs_or_quotes_values() {
        let members = head_members(&[
            ("run".into(), "{\"a\": 1}".into()),
            ("note".into(), "not json".into()),
        ]);
        let mut h = HeadInsert::new(members);
        let mut out = Vec::new();
        h.feed(b"{\n  \"x\": 0\n}", &mut out);
        let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed["run"]["a"], 1);
        assert_eq!(parsed["note"], "not json");
        assert_eq!(parsed["x"], 0);
        assert!(head_members(&[]).is_empty());
    }

    fn counted(chunks: &[&[u8]]) -> u64 {
        let mut c = EventCounter::default();
        for chunk in chunks {
            c.feed(chunk);
        }
        c.count()
    }

    #[test]
    fn counts_ph_keys_across_boundaries() {
        let text: &[u8] = br#"[{"ph": "X"}, {"ph":"M"}, "phx", "p", {"ph" : 1}]"#;
        assert_eq!(counted(&[text]), 3);
        for cut in 0..=text.len() {
            assert_eq!(counted(&[&text[..cut], &text[cut..]]), 3, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(counted(&bytes), 3);
        let pairs: Vec<&[u8]> = text.chunks(2).collect();
        assert_eq!(counted(&pairs), 3);
        assert_eq!(counted(&[b"\"p", b"h", b"\"", b"\"ph\""]), 2);
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
