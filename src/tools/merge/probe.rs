//! Pass 1 of a merge: each source's base (`baseTimeNanoseconds`), from the keys before
//! `traceEvents`, else the keys after the events at the end of the file (read from the end
//! of a plain file, after decompressing the whole of a gzip one), else a full read.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};
use crate::json::decimal::parse_int;
use crate::json::lexer::{Input, Stop, BUF_SIZE};
use crate::json::object::member_value;
use crate::json::scan::Scanner;
use crate::read::events::{read_trace_with, Event, ReadOptions, Visitor};
use crate::read::members::Source;
use crate::tools::parts::MAX_KEPT_TEXT;

use crate::read::sources::{Msg, Sources};

/// Bytes at the end of a file first searched for the keys after `traceEvents`.
const TAIL: usize = 1 << 20;

/// Most bytes at the end of a gzip source kept while looking for its base.
const GZIP_TAIL: usize = 8 << 20;

/// The top-level members after the `]` that closes `traceEvents`, when `tail` (the end of
/// a trace) holds it: the leftmost `]` after an event's `}` (or the `[`) from which the
/// rest reads as `, "key": value ... }` and nothing after. `None` when no such `]` is in
/// `tail`.
fn trailing_members(tail: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut last = 0u8;
    for (i, &b) in tail.iter().enumerate() {
        if b == b']' && matches!(last, b'}' | b'[') {
            if let Some(members) = members_from(&tail[i + 1..]) {
                return Some(members);
            }
        }
        if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            last = b;
        }
    }
    None
}

/// `text` read as `(, "key": value)* }` and whitespace to its end.
fn members_from(text: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut s = Scanner::new(text);
    let mut members = Vec::new();
    loop {
        match s.ws()? {
            b'}' => {
                s.pos += 1;
                return s.ws().is_none().then_some(members);
            }
            b',' => {
                s.pos += 1;
                s.ws()?;
                let start = s.pos;
                let key = s.key()?;
                s.ws()?;
                s.value(1)?;
                if !key.plain {
                    return None;
                }
                members.push((
                    text[key.start..key.end].to_vec(),
                    text[start..s.pos].to_vec(),
                ));
            }
            _ => return None,
        }
    }
}

/// The base of a source: `Some(ns)` from `baseTimeNanoseconds`, `None` when it has none.
pub(super) type Base = Option<i128>;

/// The base in a list of top-level members, as an error when it is not an integer.
pub(super) fn base_in<'a>(
    members: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    path: &Path,
) -> Result<Option<Base>> {
    let mut found = None;
    for (key, raw) in members {
        if key == b"baseTimeNanoseconds" {
            let value = member_value(raw).unwrap_or(b"");
            let base = parse_int(value).ok_or_else(|| {
                Error::not_a_trace(
                    path,
                    format!(
                        "baseTimeNanoseconds is {}, not an integer",
                        String::from_utf8_lossy(value)
                    ),
                )
            })?;
            found = Some(Some(base));
        }
    }
    Ok(found)
}

/// The members before `traceEvents`, read with the lexer; `None` when the file is not
/// read that far cleanly (the full read reports why).
fn head_members<R: std::io::BufRead>(source: Source<R>) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut no_progress = |_| Ok(());
    let mut inp = Input::new(source, &mut no_progress, 512);
    inp.capture_limit = crate::read::events::MAX_VALUE;
    let mut key = Vec::new();
    let mut members = Vec::new();
    let read = (|| -> std::result::Result<bool, Stop> {
        if inp.skip_ws()? != Some(b'{') {
            return Ok(false);
        }
        inp.pos += 1;
        let mut b = inp.ws_expect("a key")?;
        if b == b'}' {
            return Ok(false);
        }
        loop {
            inp.start_capture();
            inp.key(b, &mut key)?;
            if key == b"traceEvents" {
                inp.end_capture()?;
                return Ok(true);
            }
            inp.value(1, None)?;
            let raw = inp.end_capture()?.to_vec();
            members.push((key.clone(), raw));
            if members.len() > 10_000 {
                return Ok(false);
            }
            match inp.next_item(b'}', "a key", "after a top-level value")? {
                Some(next) => b = next,
                None => return Ok(false),
            }
        }
    })();
    matches!(read, Ok(true)).then_some(members)
}

/// Collects the top-level members of a full read.
#[derive(Default)]
struct HeaderOnly {
    members: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: usize,
}

impl Visitor for HeaderOnly {
    fn header(&mut self, key: &[u8], raw: &[u8], _after_events: bool) -> Result<()> {
        self.bytes += raw.len();
        if self.bytes <= MAX_KEPT_TEXT {
            self.members.push((key.to_vec(), raw.to_vec()));
        }
        Ok(())
    }

    fn event(&mut self, _ev: &Event<'_>) -> Result<()> {
        Ok(())
    }
}

/// Finds the base of the source at `path` (pass 1; see the module docs).
fn probe_base(path: &Path, progress: &mut dyn FnMut(u64) -> Result<()>) -> Result<Base> {
    let cannot_read = |e| Error::io(format!("cannot read {}", path.display()), e);
    let open =
        || File::open(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), e));
    let source =
        Source::detect(BufReader::with_capacity(BUF_SIZE, open()?)).map_err(cannot_read)?;
    let gzip = source.is_gzip();
    if let Some(head) = head_members(source) {
        if let Some(base) = base_in(head.iter().map(|(k, r)| (&k[..], &r[..])), path)? {
            return Ok(base);
        }
        let tail = if gzip {
            gzip_tail(open()?, path, progress)?
        } else {
            plain_tail(open()?, path)?
        };
        if let Some(members) = tail.as_deref().and_then(trailing_members) {
            return Ok(base_in(members.iter().map(|(k, r)| (&k[..], &r[..])), path)?.flatten());
        }
    }
    // The slow way, which also says what is wrong with a file that is not a trace.
    let mut header = HeaderOnly::default();
    read_trace_with(path, &mut header, progress, ReadOptions::default())?;
    Ok(base_in(header.members.iter().map(|(k, r)| (&k[..], &r[..])), path)?.flatten())
}

/// The last [`TAIL`] bytes of a plain file (all of a smaller one).
fn plain_tail(mut file: File, path: &Path) -> Result<Option<Vec<u8>>> {
    let cannot_read = |e| Error::io(format!("cannot read {}", path.display()), e);
    let len = file.metadata().map_err(cannot_read)?.len();
    let take = len.min(TAIL as u64);
    file.seek(SeekFrom::Start(len - take))
        .map_err(cannot_read)?;
    let mut tail = Vec::with_capacity(take as usize);
    file.take(take)
        .read_to_end(&mut tail)
        .map_err(cannot_read)?;
    Ok(Some(tail))
}

/// The last [`GZIP_TAIL`] bytes of a gzip file's decompressed text (decompressing it all;
/// `None` when it cannot be, and the full read reports why).
fn gzip_tail(
    file: File,
    path: &Path,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Option<Vec<u8>>> {
    let cannot_read = |e| Error::io(format!("cannot read {}", path.display()), e);
    let mut source =
        Source::detect(BufReader::with_capacity(BUF_SIZE, file)).map_err(cannot_read)?;
    let mut ring: VecDeque<u8> = VecDeque::with_capacity(GZIP_TAIL);
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error().is_some() => return Err(cannot_read(e)),
            Err(_) => return Ok(None),
        };
        done += n as u64;
        let drop = (ring.len() + n).saturating_sub(GZIP_TAIL);
        ring.drain(..drop.min(ring.len()));
        ring.extend(&buf[n.saturating_sub(GZIP_TAIL)..n]);
        progress(done)?;
    }
    Ok(Some(ring.into()))
}

/// Pass 1: each source's base, and the merged base (the earliest, when all have one).
pub(super) fn pass_bases(
    pool: &Sources<'_>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(Vec<Base>, Base)> {
    let mut bases: Vec<Base> = vec![None; pool.paths.len()];
    pool.run::<(), Base>(
        &|i, ctl| {
            let mut reading = ctl.reading();
            probe_base(&pool.paths[i], &mut reading)
        },
        &mut |msg| {
            if let Msg::Done(i, base) = msg {
                bases[i] = base;
            }
            Ok(())
        },
        progress,
    )?;
    let merged = if bases.iter().all(Option::is_some) {
        bases.iter().flatten().min().copied()
    } else {
        None
    };
    Ok((bases, merged))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_members_are_found_at_the_end() {
        let tail = b"  \"args\": {\"dims\": [{\"a\": 1}]}\n  }\n  ],\n  \"traceName\": \"x]\",\n  \"INFO\": [{\"b\": 2}],\n  \"baseTimeNanoseconds\": 17\n}\n";
        let members = trailing_members(tail).unwrap();
        let keys: Vec<&[u8]> = members.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(
            keys,
            vec![&b"traceName"[..], b"INFO", b"baseTimeNanoseconds"]
        );
        assert_eq!(members[2].1, b"\"baseTimeNanoseconds\": 17");
        assert!(trailing_members(b"{\"ph\":\"X\"}\n], \"a\": 1}\nx").is_none());
        assert!(trailing_members(b"no bracket here").is_none());
    }
}
