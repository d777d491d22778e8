//! A Kineto trace as a stream to be made strict JSON: the transforms the torch < 2.13
//! fallback applies to what Kineto's own writer (`result.save`) produces, chunk by chunk.
//!
//! - [`QuoteRepair`]: Kineto (torch 2.11/2.12) writes a `"` inside a name unescaped
//!   (`"name": "a"b",`). Inside a string, a quote is taken as the string's end only where
//!   the text after it can follow a JSON string in Kineto's layout (`,` then a value or a
//!   key, `:`, `}`, `]`, a line end); any other quote is escaped.
//! - [`HeadInsert`]: `"key": value,` members inserted right after the document's opening
//!   `{` (metadata kinetrace carries itself, so that the file holds exactly the value given).
//! - [`Validator`]: the strict checker of [`crate::check`] on a thread of its own, fed a copy
//!   of every output chunk; an export whose text is not strict JSON after the repairs is
//!   discarded instead of written.

use std::io::{self, BufReader, Read};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::{self, JoinHandle};

use crate::check::{check_reader, CheckOptions};
use crate::error::{Error, Result};

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

/// Chunks from a channel, as a reader (end of file once every sender is gone).
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The strict checker, run on its own thread over copies of the output.
pub struct Validator {
    tx: Option<SyncSender<Vec<u8>>>,
    handle: Option<JoinHandle<Result<Option<String>>>>,
}

impl Validator {
    pub fn start() -> Result<Validator> {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(8);
        let handle = thread::Builder::new()
            .name("kinetrace-kineto-check".into())
            .spawn(move || {
                let reader = BufReader::with_capacity(
                    1 << 16,
                    ChannelReader {
                        rx,
                        chunk: Vec::new(),
                        pos: 0,
                    },
                );
                let options = CheckOptions {
                    max_errors: 1,
                    ..CheckOptions::default()
                };
                let report = check_reader(reader, options, &mut |_| Ok(()))?;
                Ok((!report.json_valid).then(|| {
                    report
                        .errors
                        .into_iter()
                        .next()
                        .unwrap_or_else(|| "not strict JSON".into())
                }))
            })
            .map_err(|e| Error::io("cannot start the validating thread", e))?;
        Ok(Validator {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Hands a copy of `data` to the checker (which may have stopped at an error already).
    pub fn feed(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            if tx.send(data.to_vec()).is_err() {
                self.tx = None; // the checker is done (it found an error): stop copying
            }
        }
    }

    /// Ok when everything fed was one strict JSON document.
    pub fn finish(mut self) -> Result<()> {
        self.tx = None;
        let outcome = match self.handle.take().map(JoinHandle::join) {
            Some(Ok(outcome)) => outcome?,
            Some(Err(_)) => return Err(Error::Panic("the validating thread panicked".into())),
            None => None,
        };
        match outcome {
            None => Ok(()),
            Some(message) => Err(Error::State(format!(
                "Kineto's trace is not strict JSON even after kinetrace's repairs ({message}); \
                 the file was not written"
            ))),
        }
    }
}

impl Drop for Validator {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
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
    fn validator_accepts_json_and_rejects_the_rest() {
        let mut v = Validator::start().unwrap();
        v.feed(b"{\"a\": [1, ");
        v.feed(b"2]}");
        v.finish().unwrap();
        let mut v = Validator::start().unwrap();
        v.feed(b"{\"a\": \"x\"y\"}");
        let err = v.finish().unwrap_err().to_string();
        assert!(err.contains("not strict JSON"), "{err}");
    }
}
