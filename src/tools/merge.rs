//! Many traces on one timeline: `kinetrace merge`. Each *source* is one trace file (one
//! rank of a distributed job, usually); the merged trace holds the events of every source,
//! each with the source's text except where the merge must change it:
//!
//! - **pid**: every (source, pid) becomes its own process, `source × PID_STRIDE + n` (the
//!   source's 1-based position in the order given, `n` the process's order of first
//!   appearance in it), so GPU pids 0-7 and host pids of different nodes never collide.
//!   `tid`s are left as written: a thread belongs to its process.
//! - **flow and async ids** (`id` of `s`/`t`/`f`/`b`/`e`/`n`/`S`/`T`/`p`/`F` events): an
//!   integer becomes `id × sources + k` (`k` the 0-based position), anything else the string
//!   `"k:<id as written>"`, so no arrow joins two sources.
//! - **ts**: each source's `ts` are relative to its own `baseTimeNanoseconds` (or absolute
//!   when it has none); the merged trace uses the earliest base, and each `ts` is shifted by
//!   the difference (plus, with `--align step`, the source's alignment offset) exactly: the
//!   decimal text is added to as an integer of its own precision (at least ns), never through
//!   a float, and written with at least three decimals. A shift of zero leaves it as written.
//! - **process names**: the sources' `process_name` and `process_sort_index` metadata events
//!   are replaced by the merge's own, one pair per merged process, written after the other
//!   events: the name says which rank and which host process or device it was
//!   (`rank 3 · GPU 1`, `rank 3 · host-a pid 4242`, `rank 3 · Spans`), and the sort index
//!   orders the processes rank by rank, CPU processes first, then devices, then the rest.
//!
//! The top-level keys of every source are kept, unchanged, in the `kinetrace_merge` key
//! (one record per rank: the source and its position, its rank, base, offsets and pid map);
//! the merged trace has `schemaVersion`, `traceEvents`, `baseTimeNanoseconds` (when every
//! source has one; else `ts` are absolute), `displayTimeUnit` (when all sources that have
//! one agree) and `kinetrace_merge`.
//!
//! *Rank*: a source's `distributedInfo.rank`, else a number in its file name (`rank-3`,
//! `rank_3`, `rank3`), else its 0-based position; a label given by the caller replaces it.
//! Two sources with one rank are an error naming both.
//!
//! The filter criteria of [`FilterSpec`] (`read::filter`) and parts of at most a size (as
//! `kinetrace split` cuts them, over the merged timeline) apply during the merge with the
//! rules of [`crate::tools::split`] (a flow only when all its ends are kept, metadata only for the
//! processes and threads that remain), each source's flows judged on their own.
//!
//! ## Passes and order
//! 1. A probe of each source for its base: the top-level keys before `traceEvents`; when
//!    the base is not among them (Kineto writes it after the events), the keys after the
//!    events, found at the end of the file (read from the end for a plain file, after
//!    decompressing the whole for gzip), else by reading the whole trace. The write pass
//!    checks that what it reads agrees.
//! 2. With alignment, a pass over every source for the start of each `ProfilerStep#N`.
//! 3. With parts, a survey of event bytes over the merged timeline (the histogram of
//!    [`crate::tools::split`]).
//! 4. The write pass.
//!
//! Each pass reads the sources on reader threads, several sources at once (a plain `.json`
//! also in parallel chunks, [`crate::read::events`]); in the write pass each reader rewrites its
//! events into blocks of about [`BLOCK`] bytes that the calling thread writes out as they
//! come. So the merged trace holds each source's events in the source's order, in blocks
//! interleaved with other sources' blocks: viewers sort events by time themselves. The
//! calling thread answers Ctrl-C between waits of at most [`crate::output::interrupt::POLL`].
//!
//! ## Memory
//! Bounded whatever the number and size of the sources: per reader (at most `threads` at
//! once) the reading buffers of [`crate::read::events`] (256 KiB, or with chunked reading its
//! chunks in flight), two blocks, the process table (at most [`MAX_PROCESSES`] per source,
//! ~100 B each), and when filtering or cutting parts the source's metadata events (at most
//! [`MAX_KEPT_TEXT`]) and its flow table (flow ends waiting for their other end, ~150 B each,
//! as in `split`); the queue of blocks ([`QUEUE_BYTES_PER_READER`] per reader); the
//! top-level keys of all sources (at most [`MAX_KEPT_TEXT`] in all) and a few hundred bytes
//! per source and process; with alignment the step starts (at most [`MAX_STEPS`] per source);
//! with parts one histogram per reader and one merged (at most [`MAX_CELLS`] cells each) and
//! a 64 KiB buffer per part. Without filter or parts there is no flow table: ids are mapped
//! without state.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, FormatKind, Result, TraceFormat};
use crate::json::decimal::{parse_int, Decimal};
use crate::json::lexer::{Input, Stop, BUF_SIZE};
use crate::json::object::{member, member_value, string_body, Duplicates::Last};
use crate::json::render::{push_int, push_json_string, push_json_string_body};
use crate::json::scan::Scanner;
use crate::output::sink::{Encoding, Sink};
use crate::read::events::{
    read_trace_with, Event, ReadOptions, Visitor, SLOT_ID, SLOT_PID, SLOT_TS,
};
use crate::read::filter::{Binder, FilterSpec, OpenFlows, Present};
use crate::read::members::Source;
use crate::read::ranks::{self, rank_in_name};
use crate::read::sources::{Msg, Reader, Sources};
use crate::tools::parts::{
    finish_parts, keep_text, part_head, stem, Histogram, Plan, SinkWrite, Temps, TraceWriter,
    MAX_CELLS, MAX_KEPT_TEXT, MAX_PARTS, PART_BUFFER,
};

/// A source's pids are `source × PID_STRIDE + n` (`source` 1-based).
pub(crate) const PID_STRIDE: i64 = 100_000;

/// Most processes in one source.
pub(crate) const MAX_PROCESSES: usize = PID_STRIDE as usize - 1;

/// Bytes of events a reader gathers before handing them to the writer.
const BLOCK: usize = 1 << 20;

/// Bytes of blocks waiting for the writer, per reader.
const QUEUE_BYTES_PER_READER: usize = 4 << 20;

/// Most `ProfilerStep#N` numbers remembered per source.
pub(crate) const MAX_STEPS: usize = 1 << 16;

/// Bytes at the end of a file first searched for the keys after `traceEvents`.
const TAIL: usize = 1 << 20;

/// Most bytes at the end of a gzip source kept while looking for its base.
const GZIP_TAIL: usize = 8 << 20;

/// Phases whose `id` scopes events (flows and async events).
const ID_PHASES: [&[u8]; 10] = [b"s", b"t", b"f", b"b", b"e", b"n", b"S", b"T", b"p", b"F"];

/// The separator in process names.
const DOT: &str = " \u{b7} ";

/// How a merge is done.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MergeOptions {
    /// A label per source (in the order given) replacing its rank, or none.
    pub(crate) labels: Vec<Option<String>>,
    /// Align the sources on the start of their first common `ProfilerStep#N`.
    pub(crate) align_step: bool,
    /// The events kept.
    pub(crate) spec: FilterSpec,
    /// Parts of at most this many bytes of JSON, or one trace.
    pub(crate) max_bytes: Option<u64>,
    /// Gzip output (level, threads), or plain JSON.
    pub(crate) gzip: Option<(u32, usize)>,
    /// Threads reading (sources at once, and chunk scanners within one).
    pub(crate) threads: usize,
}

/// One output file of a merge.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutputStats {
    pub(crate) path: PathBuf,
    /// Its window [start, end) in µs of the merged timeline (the whole trace: its span).
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    /// Events written, metadata included.
    pub(crate) events: u64,
    pub(crate) json_bytes: u64,
}

/// A process of a source, as merged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    /// The source's pid as JSON (a number, a string, or `null` when events had none).
    pub(crate) source_pid: String,
    pub(crate) pid: i64,
    /// Its name, as the body of a JSON string (escapes as written).
    pub(crate) name: String,
    pub(crate) sort_index: i64,
}

/// One source of a merge.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankStats {
    pub(crate) source: PathBuf,
    pub(crate) label: String,
    pub(crate) rank: Option<i64>,
    /// Where the rank came from: `label`, `distributedInfo`, `file name` or `order`.
    pub(crate) rank_from: &'static str,
    pub(crate) base_time_ns: Option<i128>,
    /// What was added to each `ts` (ns), and the part of it that aligns steps.
    pub(crate) offset_ns: i128,
    pub(crate) align_offset_ns: i128,
    pub(crate) events_read: u64,
    pub(crate) events_written: u64,
    pub(crate) json_bytes_read: u64,
    pub(crate) processes: Vec<ProcessStats>,
}

/// What [`merge`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MergeStats {
    pub(crate) outputs: Vec<OutputStats>,
    /// In rank order.
    pub(crate) ranks: Vec<RankStats>,
    pub(crate) base_time_ns: Option<i128>,
    pub(crate) aligned_step: Option<u64>,
    pub(crate) events_read: u64,
    pub(crate) events_written: u64,
    /// Flow ends dropped because another end was not kept (filter) or is in another part.
    pub(crate) flow_events_cut: u64,
    /// Bytes of JSON read in the write pass, and written (all outputs).
    pub(crate) json_bytes_read: u64,
    pub(crate) json_bytes_written: u64,
    /// Parts over the size asked for.
    pub(crate) oversized_parts: u64,
    /// Things worth knowing that did not stop the merge.
    pub(crate) warnings: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// Small readers of JSON text already known to be valid
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Pass 1: each source's base
// ---------------------------------------------------------------------------------------

/// The base of a source: `Some(ns)` from `baseTimeNanoseconds`, `None` when it has none.
type Base = Option<i128>;

/// The base in a list of top-level members, as an error when it is not an integer.
fn base_in<'a>(
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

/// A top-level member of a source: its key and its text (`"key": value`).
type Member = (Box<[u8]>, Box<[u8]>);

// ---------------------------------------------------------------------------------------
// Pass 2: the steps
// ---------------------------------------------------------------------------------------

/// The start of each `ProfilerStep#N` of a source (ns of its own clock).
#[derive(Default)]
struct Steps {
    starts: BTreeMap<u64, i128>,
}

/// `N` of a `ProfilerStep#N` name.
fn step_number(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"ProfilerStep#")?;
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Visitor for Steps {
    fn header(&mut self, _key: &[u8], _raw: &[u8], _after_events: bool) -> Result<()> {
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        // The host's step (Kineto also copies it onto GPU rows as gpu_user_annotation).
        if ev.ph != b"X" || ev.cat == Some("gpu_user_annotation") {
            return Ok(());
        }
        let Some(n) = step_number(ev.name) else {
            return Ok(());
        };
        let Some(ns) = ev
            .value_text(SLOT_TS)
            .and_then(Decimal::parse)
            .and_then(Decimal::floor_ns)
        else {
            return Ok(());
        };
        if self.starts.len() < MAX_STEPS || self.starts.contains_key(&n) {
            let start = self.starts.entry(n).or_insert(ns);
            *start = (*start).min(ns);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Passes 3 and 4: rewriting the events
// ---------------------------------------------------------------------------------------

/// What a reader needs to know about its source.
struct SourceCtx<'a> {
    path: &'a Path,
    /// 0-based position, and the number of sources.
    index: usize,
    sources: usize,
    base: Base,
    /// Added to every `ts` (ns), and the same in µs for filter decisions.
    offset_ns: i128,
    offset_us: f64,
    spec: &'a FilterSpec,
    /// Filter and flow rules apply (a filter or parts).
    cutting: bool,
    plan: Option<&'a Plan>,
    parts: usize,
}

/// A process of a source.
#[derive(Debug, Clone, Default)]
struct Process {
    /// Type-tagged pid (empty when the events had none).
    key: Box<[u8]>,
    /// `args.name` of its `process_name` and `args.labels` of its `process_labels`, as
    /// written between the quotes; `args.sort_index` of its `process_sort_index`.
    name: Option<Box<[u8]>>,
    labels: Option<Box<[u8]>>,
    sort_index: Option<i64>,
}

/// A source's processes in order of first appearance.
#[derive(Default)]
struct Processes {
    index: HashMap<Box<[u8]>, u32>,
    list: Vec<Process>,
    last: Option<(Box<[u8]>, u32)>,
}

impl Processes {
    fn of(&mut self, key: &[u8], path: &Path) -> Result<u32> {
        if let Some((k, n)) = &self.last {
            if **k == *key {
                return Ok(*n);
            }
        }
        let n = match self.index.get(key) {
            Some(&n) => n,
            None => {
                if self.list.len() >= MAX_PROCESSES {
                    return Err(Error::trace_fault(
                        path,
                        FormatKind::TooLarge,
                        format!(
                            "more than {MAX_PROCESSES} processes: not a trace this tool can merge"
                        ),
                    ));
                }
                let n = self.list.len() as u32;
                self.index.insert(key.into(), n);
                self.list.push(Process {
                    key: key.into(),
                    ..Process::default()
                });
                n
            }
        };
        self.last = Some((key.into(), n));
        Ok(n)
    }
}

/// A metadata event kept for the end (when filtering): its merged text and whose it is.
struct KeptMeta {
    text: Box<[u8]>,
    pid_key: Box<[u8]>,
    thread_key: Box<[u8]>,
    thread_level: bool,
}

/// Where a reader's events go: blocks for the writer, or the survey's histogram.
enum ReaderOut<'c, 'q> {
    Write {
        ctl: &'c Reader<'q, Msg<Block, SourceDone>>,
        blocks: Vec<Block>,
    },
    Survey {
        histogram: Histogram,
        untimed: u64,
    },
}

/// A run of events of one source for one output.
#[derive(Default)]
struct Block {
    part: usize,
    text: Vec<u8>,
    events: u64,
}

/// What a reader reports when its source is read.
#[derive(Default)]
struct SourceDone {
    header: Vec<Member>,
    processes: Vec<Process>,
    /// Per process, the outputs it has events in.
    present: Vec<Vec<bool>>,
    events_read: u64,
    events_written: u64,
    flow_events_cut: u64,
    json_bytes_read: u64,
    /// First `ts` and last end of its events (ns, merged clock).
    span: Option<(i128, i128)>,
    /// Survey only.
    histogram: Option<(Histogram, u64)>,
    metadata_bytes: usize,
}

/// Reads one source, rewriting its events into the merged trace's text.
struct Rewriting<'c, 'q> {
    ctx: &'c SourceCtx<'c>,
    out: ReaderOut<'c, 'q>,
    processes: Processes,
    header: Vec<Member>,
    header_bytes: usize,
    text: Vec<u8>,
    binder: Binder,
    flows: Vec<OpenFlows>,
    present: Vec<Present>,
    metadata: Vec<KeptMeta>,
    metadata_bytes: usize,
    events_read: u64,
    events_written: u64,
    span: Option<(i128, i128)>,
}

impl<'c, 'q> Rewriting<'c, 'q> {
    fn new(ctx: &'c SourceCtx<'c>, out: ReaderOut<'c, 'q>) -> Self {
        let parts = ctx.parts.max(1);
        Rewriting {
            ctx,
            out,
            processes: Processes::default(),
            header: Vec::new(),
            header_bytes: 0,
            text: Vec::new(),
            binder: Binder::default(),
            flows: (0..parts).map(|_| OpenFlows::default()).collect(),
            present: (0..parts).map(|_| Present::default()).collect(),
            metadata: Vec::new(),
            metadata_bytes: 0,
            events_read: 0,
            events_written: 0,
            span: None,
        }
    }

    /// An error about the event being read.
    fn bad(&self, msg: impl std::fmt::Display) -> Error {
        Error::TraceFormat(Box::new(TraceFormat {
            kind: FormatKind::TooLarge,
            path: self.ctx.path.display().to_string(),
            offset: None,
            event_index: Some(self.events_read - 1),
            message: msg.to_string(),
        }))
    }

    /// Writes `ev`'s merged text into `self.text`; returns its `ts` in ns of the merged
    /// clock (when it has a numeric one).
    fn rewrite(&mut self, ev: &Event<'_>) -> Result<Option<i128>> {
        let pid_key = if ev.value_text(SLOT_PID).is_some() {
            ev.pid_key
        } else {
            b""
        };
        let n = self.processes.of(pid_key, self.ctx.path)?;
        let pid = (self.ctx.index as i64 + 1) * PID_STRIDE + i64::from(n);
        let mut edits: [(u32, u32, u8); 3] = [(0, 0, 0); 3];
        let mut count = 0;
        match ev.values[SLOT_PID] {
            (s, e) if e > s => edits[count] = (s, e, b'p'),
            // No pid: one goes after the `{`.
            _ => edits[count] = (1, 1, b'p'),
        }
        count += 1;
        let mut ts_ns = None;
        // Only a number is a time (a string, boolean or null `ts` stays as written).
        let ts = ev
            .value_text(SLOT_TS)
            .filter(|t| matches!(t[0], b'-' | b'0'..=b'9'));
        let mut shifted = None;
        if let Some(text) = ts {
            let d = Decimal::parse(text).ok_or_else(|| {
                self.bad(format_args!(
                    "ts {} cannot be shifted exactly",
                    String::from_utf8_lossy(text)
                ))
            })?;
            let moved = if self.ctx.offset_ns == 0 {
                d
            } else {
                let moved = d.plus_ns(self.ctx.offset_ns).ok_or_else(|| {
                    self.bad(format_args!(
                        "ts {} is out of range once shifted",
                        String::from_utf8_lossy(text)
                    ))
                })?;
                shifted = Some(moved);
                let (s, e) = ev.values[SLOT_TS];
                edits[count] = (s, e, b't');
                count += 1;
                moved
            };
            ts_ns = moved.floor_ns();
        }
        let id = ID_PHASES
            .contains(&ev.ph)
            .then(|| ev.values[SLOT_ID])
            .filter(|(s, e)| e > s && &ev.raw[*s as usize..*e as usize] != b"null");
        if let Some((s, e)) = id {
            edits[count] = (s, e, b'i');
            count += 1;
        }
        let edits = &mut edits[..count];
        edits.sort_unstable();
        let raw = ev.raw;
        let out = &mut self.text;
        out.clear();
        let mut at = 0usize;
        for &(s, e, what) in edits.iter() {
            let (s, e) = (s as usize, e as usize);
            out.extend_from_slice(&raw[at..s]);
            match what {
                b'p' if s == e => {
                    out.extend_from_slice(b"\"pid\":");
                    push_int(out, pid);
                    out.push(b',');
                }
                b'p' => push_int(out, pid),
                b't' => shifted.expect("an edit of ts has its value").push(out),
                _ => push_id(out, &raw[s..e], self.ctx.index, self.ctx.sources),
            }
            at = e;
        }
        out.extend_from_slice(&raw[at..]);
        Ok(ts_ns)
    }

    /// Hands the merged text in `self.text` to output `part`.
    fn emit(&mut self, part: usize, ts_ns: Option<i128>) -> Result<()> {
        self.events_written += 1;
        match &mut self.out {
            ReaderOut::Write { ctl, blocks } => {
                let block = &mut blocks[part];
                if block.events > 0 {
                    block.text.extend_from_slice(b",\n");
                }
                block.text.extend_from_slice(&self.text);
                block.events += 1;
                if block.text.len() >= BLOCK {
                    let full = std::mem::replace(
                        block,
                        Block {
                            part,
                            text: Vec::with_capacity(BLOCK + (BLOCK >> 3)),
                            events: 0,
                        },
                    );
                    let bytes = full.text.len();
                    ctl.send(Msg::Part(full), bytes)?;
                }
            }
            ReaderOut::Survey { histogram, untimed } => {
                let bytes = self.text.len() as u64 + 2;
                match ts_ns.and_then(|t| i64::try_from(t).ok()) {
                    Some(t) => histogram.add(t, bytes),
                    None => *untimed += bytes,
                }
            }
        }
        Ok(())
    }

    /// Notes the span of a kept non-metadata event.
    fn extend_span(&mut self, ts_ns: Option<i128>, ev: &Event<'_>) {
        let Some(start) = ts_ns else { return };
        let dur = ev
            .dur
            .filter(|d| *d > 0.0)
            .map_or(0, |d| (d * 1000.0) as i128);
        let end = start + dur;
        self.span = Some(match self.span {
            Some((a, b)) => (a.min(start), b.max(end)),
            None => (start, end),
        });
    }

    /// The part an event of merged time `ts_us` goes to.
    fn part_of(&self, ts_us: Option<f64>) -> usize {
        self.ctx.plan.map_or(0, |p| p.part_of(ts_us))
    }

    /// Records what a process's `process_name`, `process_labels` or `process_sort_index`
    /// event says; true for the events the merge replaces.
    fn process_metadata(&mut self, ev: &Event<'_>) -> Result<bool> {
        let field: &[u8] = match ev.name {
            b"process_name" => b"name",
            b"process_labels" => b"labels",
            b"process_sort_index" => b"sort_index",
            _ => return Ok(false),
        };
        let pid_key = if ev.value_text(SLOT_PID).is_some() {
            ev.pid_key
        } else {
            b""
        };
        let n = self.processes.of(pid_key, self.ctx.path)? as usize;
        let value = member(ev.raw, b"args", Last).and_then(|args| member(args, field, Last));
        let p = &mut self.processes.list[n];
        match field {
            b"name" => {
                if let Some(body) = value.and_then(string_body) {
                    p.name = Some(body.into());
                }
                Ok(true)
            }
            b"labels" => {
                if let Some(body) = value.and_then(string_body) {
                    p.labels = Some(body.into());
                }
                Ok(false)
            }
            _ => {
                if let Some(v) = value.and_then(|v| std::str::from_utf8(v).ok()) {
                    p.sort_index = v.parse().ok();
                }
                Ok(true)
            }
        }
    }

    /// The end of the source: metadata of what remains, the last blocks, the report.
    fn finish(mut self, json_bytes_read: u64) -> Result<SourceDone> {
        if self.ctx.cutting && matches!(self.out, ReaderOut::Write { .. }) {
            for m in std::mem::take(&mut self.metadata) {
                for part in 0..self.present.len() {
                    let present = &self.present[part];
                    let wanted = if m.thread_level {
                        present.threads.contains(&m.thread_key)
                    } else {
                        present.pids.contains(&m.pid_key)
                    };
                    if wanted {
                        self.text.clear();
                        self.text.extend_from_slice(&m.text);
                        self.emit(part, None)?;
                    }
                }
            }
        }
        let parts = self.present.len();
        let present: Vec<Vec<bool>> = self
            .processes
            .list
            .iter()
            .map(|p| {
                (0..parts)
                    .map(|part| !self.ctx.cutting || self.present[part].pids.contains(&p.key))
                    .collect()
            })
            .collect();
        let flow_events_cut = self.flows.iter().map(OpenFlows::left).sum();
        let mut done = SourceDone {
            header: std::mem::take(&mut self.header),
            processes: std::mem::take(&mut self.processes.list),
            present,
            events_read: self.events_read,
            events_written: 0,
            flow_events_cut,
            json_bytes_read,
            span: self.span,
            histogram: None,
            metadata_bytes: self.metadata_bytes,
        };
        match self.out {
            ReaderOut::Write { ctl, blocks } => {
                for block in blocks {
                    if block.events > 0 {
                        let bytes = block.text.len();
                        ctl.send(Msg::Part(block), bytes)?;
                    }
                }
            }
            ReaderOut::Survey { histogram, untimed } => done.histogram = Some((histogram, untimed)),
        }
        done.events_written = self.events_written;
        Ok(done)
    }
}

/// Writes a merged flow or async `id` (`raw`, as written) of source `k` of `n`.
fn push_id(out: &mut Vec<u8>, raw: &[u8], k: usize, n: usize) {
    if !raw.contains(&b'.') && !raw.iter().any(|b| matches!(b, b'e' | b'E' | b'"')) {
        if let Some(id) = parse_int(raw)
            .and_then(|id| id.checked_mul(n as i128))
            .and_then(|id| id.checked_add(k as i128))
        {
            push_int(out, id);
            return;
        }
    }
    out.push(b'"');
    push_int(out, k);
    out.push(b':');
    out.extend_from_slice(string_body(raw).unwrap_or(raw));
    out.push(b'"');
}

impl Visitor for Rewriting<'_, '_> {
    fn header(&mut self, key: &[u8], raw: &[u8], _after_events: bool) -> Result<()> {
        keep_text(
            &mut self.header_bytes,
            raw.len(),
            "top-level keys",
            self.ctx.path,
        )?;
        self.header.push((key.into(), raw.into()));
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.events_read += 1;
        if ev.is_metadata() {
            if self.process_metadata(ev)? {
                return Ok(());
            }
            self.rewrite(ev)?;
            if !self.ctx.cutting {
                return self.emit(0, None);
            }
            keep_text(
                &mut self.metadata_bytes,
                self.text.len() + 2,
                "metadata events",
                self.ctx.path,
            )?;
            self.metadata.push(KeptMeta {
                text: self.text.as_slice().into(),
                pid_key: ev.pid_key.into(),
                thread_key: ev.thread_key.into(),
                thread_level: ev.is_thread_metadata(),
            });
            return Ok(());
        }
        // The event as the filter sees it: `ts` on the merged timeline.
        let shifted = Event {
            raw: ev.raw,
            ph: ev.ph,
            cat: ev.cat,
            name: ev.name,
            pid_key: ev.pid_key,
            thread_key: ev.thread_key,
            ts: ev.ts.map(|t| t + self.ctx.offset_us),
            dur: ev.dur,
            flow_key: ev.flow_key,
            values: ev.values,
            offset: ev.offset,
            index: ev.index,
        };
        if !self.ctx.cutting {
            let ts = self.rewrite(ev)?;
            self.extend_span(ts, ev);
            return self.emit(0, ts);
        }
        if let Some(key) = ev.flow_key {
            let part = match self.binder.bound(ev) {
                Some(bound) => bound.map(|p| p as usize),
                None => self
                    .ctx
                    .spec
                    .keeps_place(&shifted, None)
                    .then(|| self.part_of(shifted.ts)),
            };
            let Some(part) = part else { return Ok(()) };
            self.present[part].add(ev);
            let ts = self.rewrite(ev)?;
            if matches!(self.out, ReaderOut::Survey { .. }) {
                return self.emit(part, ts);
            }
            if let Some(all) = self.flows[part].add(key, ev.ph, &self.text) {
                for text in all {
                    self.text.clear();
                    self.text.extend_from_slice(&text);
                    self.emit(part, None)?;
                }
            }
            self.extend_span(ts, ev);
            return Ok(());
        }
        let kept = self.ctx.spec.keeps(&shifted);
        let part = self.part_of(shifted.ts);
        self.binder.saw(ev, kept.then_some(part as i64));
        if !kept {
            return Ok(());
        }
        self.present[part].add(ev);
        let ts = self.rewrite(ev)?;
        self.extend_span(ts, ev);
        self.emit(part, ts)
    }
}

// ---------------------------------------------------------------------------------------
// Ranks and names
// ---------------------------------------------------------------------------------------

/// The rank in a source's `distributedInfo`, if it is an integer.
fn distributed_rank(header: &[Member]) -> Option<i64> {
    let raw = header
        .iter()
        .find(|(k, _)| &**k == b"distributedInfo")?
        .1
        .as_ref();
    ranks::distributed_rank(raw)
}

/// A string member's body as written (escapes kept), e.g. `host_name`.
fn header_string<'a>(header: &'a [Member], key: &[u8]) -> Option<&'a [u8]> {
    let raw = header.iter().find(|(k, _)| &**k == key)?.1.as_ref();
    string_body(member_value(raw)?)
}

/// What kind of process, for its name and its place in the order.
fn process_class(p: &Process) -> u8 {
    match p.labels.as_deref() {
        Some(b"CPU") => 0,
        Some(_) => 1,
        None if p.key.first() == Some(&b'n') && !p.key[1..].starts_with(b"-") => 0,
        None => 2,
    }
}

/// The merged name of a process (JSON string body): `<label> · ...`.
fn process_name(label: &[u8], host: Option<&[u8]>, p: &Process) -> Vec<u8> {
    let mut name = label.to_vec();
    name.extend_from_slice(DOT.as_bytes());
    let pid_text = p.key.get(1..).unwrap_or(b"");
    match (process_class(p), p.labels.as_deref()) {
        (1, Some(labels)) => name.extend_from_slice(labels),
        (0, _) => {
            if let Some(host) = host {
                name.extend_from_slice(host);
                name.push(b' ');
            }
            name.extend_from_slice(b"pid ");
            push_json_string_body(&mut name, pid_text);
        }
        _ => match (&p.name, p.key.first()) {
            (Some(n), _) => name.extend_from_slice(n),
            (None, None) => name.extend_from_slice(b"(no pid)"),
            (None, Some(_)) if pid_text.is_empty() => name.extend_from_slice(b"pid \\\"\\\""),
            (None, Some(_)) => push_json_string_body(&mut name, pid_text),
        },
    }
    name
}

/// The source pid of a process as JSON.
fn source_pid_json(key: &[u8]) -> String {
    match key.split_first() {
        None => "null".into(),
        Some((b'n', text)) => String::from_utf8_lossy(text).into_owned(),
        Some((_, text)) => {
            let mut out = Vec::new();
            push_json_string(&mut out, text);
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}

/// A source once read: who it is and what it had.
struct Ranked {
    index: usize,
    label: String,
    rank: Option<i64>,
    rank_from: &'static str,
    done: SourceDone,
}

/// Gives every source its rank and label, checks that none is claimed twice, and orders
/// them.
fn rank_sources(
    sources: &[PathBuf],
    labels: &[Option<String>],
    dones: Vec<SourceDone>,
) -> Result<Vec<Ranked>> {
    let mut ranked: Vec<Ranked> = Vec::with_capacity(dones.len());
    for (i, done) in dones.into_iter().enumerate() {
        let given = labels.get(i).cloned().flatten();
        let file_name = sources[i]
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (rank, rank_from) = match &given {
            Some(l) => (l.trim().parse::<i64>().ok(), "label"),
            None => match distributed_rank(&done.header) {
                Some(r) => (Some(r), "distributedInfo"),
                None => match rank_in_name(&file_name) {
                    Some(r) => (Some(r), "file name"),
                    None => (Some(i as i64), "order"),
                },
            },
        };
        let label = match (&given, rank) {
            (Some(l), None) => l.clone(),
            (_, Some(r)) => format!("rank {r}"),
            (None, None) => unreachable!("a source without a label has a rank"),
        };
        if let Some(other) = ranked.iter().find(|r| r.label == label) {
            return Err(Error::InvalidArgument(format!(
                "{} ({}) and {} ({}) are both {label}: give each source a --label to merge them",
                sources[other.index].display(),
                other.rank_from,
                sources[i].display(),
                rank_from
            )));
        }
        ranked.push(Ranked {
            index: i,
            label,
            rank,
            rank_from,
            done,
        });
    }
    ranked.sort_by_key(|r| (r.rank.is_none(), r.rank, r.index));
    Ok(ranked)
}

// ---------------------------------------------------------------------------------------
// The merge
// ---------------------------------------------------------------------------------------

/// An output being written by the calling thread.
enum OutFile {
    Single(Box<SinkWrite>),
    Part(BufWriter<File>),
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            OutFile::Single(w) => w.write(buf),
            OutFile::Part(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            OutFile::Single(w) => w.flush(),
            OutFile::Part(w) => w.flush(),
        }
    }
}

/// Merges the traces at `sources` into `dst` (or, with `max_bytes`, into parts named
/// after it); see the module docs. Nothing is left at `dst` (or beside it) on error.
pub(crate) fn merge(
    sources: &[PathBuf],
    dst: &Path,
    options: &MergeOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<MergeStats> {
    validate(sources, options)?;
    let pool = Sources::new(sources, options.threads, QUEUE_BYTES_PER_READER);
    let (bases, merged_base) = pass_bases(&pool, progress)?;
    let mut timeline = Timeline::new(sources, &options.spec, bases, merged_base);
    timeline.cutting = !options.spec.is_everything() || options.max_bytes.is_some();
    let aligned_step = if options.align_step {
        Some(pass_steps(&pool, &mut timeline, progress)?)
    } else {
        None
    };
    let plan = match options.max_bytes {
        Some(max_bytes) => Some(pass_survey(&pool, &timeline, max_bytes, progress)?),
        None => None,
    };
    let mut outs = Outputs::open(dst, options.gzip, plan.as_ref())?;
    let dones = pass_write(&pool, &timeline, plan.as_ref(), &mut outs, progress)?;
    let mut ranked = rank_sources(sources, &options.labels, dones)?;
    let mut stats = MergeStats {
        base_time_ns: merged_base,
        aligned_step,
        ..MergeStats::default()
    };
    add_source_totals(&ranked, &mut stats)?;
    if stats.events_read > 0 && outs.writers.iter().all(|w| w.events == 0) {
        return Err(nothing_kept(&options.spec));
    }
    name_processes(&mut ranked, &timeline, &mut outs, &mut stats)?;
    let spans = warn_of_apart_spans(&ranked, sources, &mut stats);
    let record = merge_record(&ranked, sources, &stats);
    let unit = common_time_unit(&ranked);
    outs.close(
        &record,
        unit.as_deref(),
        options.max_bytes,
        plan.as_ref(),
        &spans,
        &mut stats,
    )?;
    outs.finish(
        plan.is_some(),
        options.gzip,
        stats.json_bytes_read,
        progress,
    )?;
    Ok(stats)
}

/// The arguments' checks, before any source is read.
fn validate(sources: &[PathBuf], options: &MergeOptions) -> Result<()> {
    let n = sources.len();
    if n == 0 {
        return Err(Error::InvalidArgument("no trace to merge".into()));
    }
    if !options.labels.is_empty() && options.labels.len() != n {
        return Err(Error::InvalidArgument(format!(
            "{} labels for {n} sources: give one per source",
            options.labels.len()
        )));
    }
    options.spec.validate()?;
    if let Some((level, threads)) = options.gzip {
        Encoding::Gzip { level, threads }.validate()?;
    }
    if options.max_bytes == Some(0) {
        return Err(Error::InvalidArgument(
            "the part size must be more than 0".into(),
        ));
    }
    for (i, a) in sources.iter().enumerate() {
        if sources[..i].contains(a) {
            return Err(Error::InvalidArgument(format!(
                "{} is given twice",
                a.display()
            )));
        }
    }
    Ok(())
}

/// Where each source lies on the merged clock.
struct Timeline<'a> {
    sources: &'a [PathBuf],
    spec: &'a FilterSpec,
    bases: Vec<Base>,
    /// Added to each source's `ts` (ns): its base's distance from the merged one, plus its
    /// step alignment.
    offsets: Vec<i128>,
    /// Each source's step alignment alone (ns).
    align: Vec<i128>,
    /// Filter and flow rules apply (a filter or parts).
    cutting: bool,
}

impl<'a> Timeline<'a> {
    /// Sources without a base are absolute (base 0); the merged base is the earliest, and
    /// written only when every source has one.
    fn new(sources: &'a [PathBuf], spec: &'a FilterSpec, bases: Vec<Base>, merged: Base) -> Self {
        let offsets = bases
            .iter()
            .map(|&b| b.unwrap_or(0) - merged.unwrap_or(0))
            .collect();
        Timeline {
            sources,
            spec,
            align: vec![0; bases.len()],
            bases,
            offsets,
            cutting: false,
        }
    }

    /// A reader's view of source `i` (its plan of parts is set where there is one).
    fn ctx(&self, i: usize) -> SourceCtx<'_> {
        SourceCtx {
            path: &self.sources[i],
            index: i,
            sources: self.sources.len(),
            base: self.bases[i],
            offset_ns: self.offsets[i],
            offset_us: self.offsets[i] as f64 / 1000.0,
            spec: self.spec,
            cutting: self.cutting,
            plan: None,
            parts: 1,
        }
    }
}

/// Pass 1: each source's base, and the merged base (the earliest, when all have one).
fn pass_bases(
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

/// Pass 2: the first `ProfilerStep#N` in every source, each source's start of it moved to
/// the latest one's (added to the timeline's offsets); the step.
fn pass_steps(
    pool: &Sources<'_>,
    timeline: &mut Timeline<'_>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<u64> {
    let n = pool.paths.len();
    let mut steps: Vec<BTreeMap<u64, i128>> = vec![BTreeMap::new(); n];
    pool.run::<(), BTreeMap<u64, i128>>(
        &|i, ctl| {
            let mut v = Steps::default();
            let mut reading = ctl.reading();
            read_trace_with(&pool.paths[i], &mut v, &mut reading, pool.read_options)?;
            Ok(v.starts)
        },
        &mut |msg| {
            if let Msg::Done(i, s) = msg {
                steps[i] = s;
            }
            Ok(())
        },
        progress,
    )?;
    let common = steps[0]
        .keys()
        .copied()
        .find(|k| steps.iter().all(|s| s.contains_key(k)));
    let Some(step) = common else {
        let missing: Vec<String> = pool
            .paths
            .iter()
            .zip(&steps)
            .filter(|(_, s)| s.is_empty())
            .map(|(p, _)| p.display().to_string())
            .collect();
        return Err(Error::InvalidArgument(if missing.is_empty() {
            "--align step: no ProfilerStep#N is in every source".into()
        } else {
            format!("--align step: no ProfilerStep#N in {}", missing.join(", "))
        }));
    };
    let starts: Vec<i128> = (0..n)
        .map(|i| steps[i][&step] + timeline.offsets[i])
        .collect();
    let latest = starts.iter().copied().max().unwrap_or(0);
    for (i, start) in starts.iter().enumerate() {
        timeline.align[i] = latest - start;
        timeline.offsets[i] += timeline.align[i];
    }
    Ok(step)
}

/// Pass 3: the survey of the merged events' bytes over time, cut into the plan of parts of
/// at most `max_bytes` each (with room for the keys and metadata every part repeats).
fn pass_survey(
    pool: &Sources<'_>,
    timeline: &Timeline<'_>,
    max_bytes: u64,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Plan> {
    let mut histogram = Histogram::default();
    let mut untimed = 0u64;
    let mut overhead = 4096usize;
    pool.run::<(), SourceDone>(
        &|i, ctl| {
            let ctx = timeline.ctx(i);
            let out = ReaderOut::Survey {
                histogram: Histogram::default(),
                untimed: 0,
            };
            let mut v = Rewriting::new(&ctx, out);
            let mut reading = ctl.reading();
            let bytes = read_trace_with(&pool.paths[i], &mut v, &mut reading, pool.read_options)?;
            v.finish(bytes)
        },
        &mut |msg| {
            if let Msg::Done(_, done) = msg {
                if let Some((h, u)) = done.histogram {
                    merge_histogram(&mut histogram, h);
                    untimed += u;
                }
                overhead += done.metadata_bytes
                    + done.header.iter().map(|(_, r)| r.len() + 4).sum::<usize>()
                    + 400 * done.processes.len();
            }
            Ok(())
        },
        progress,
    )?;
    if histogram.cells.is_empty() && untimed == 0 {
        return Err(nothing_kept(timeline.spec));
    }
    if overhead as u64 >= max_bytes {
        return Err(Error::InvalidArgument(format!(
            "a part of at most {max_bytes} bytes cannot hold the merged trace's top-level \
             keys and metadata events ({overhead} bytes): choose a larger size"
        )));
    }
    let plan = Plan::cut(&mut histogram, untimed, max_bytes - overhead as u64);
    if plan.firsts.len() > MAX_PARTS {
        return Err(Error::InvalidArgument(format!(
            "parts of at most {:.3} MB make more than {MAX_PARTS} parts: choose a larger size",
            max_bytes as f64 / 1e6
        )));
    }
    Ok(plan)
}

/// Pass 4: every source's events rewritten by the readers, written here in blocks to their
/// outputs; what each source's reader found.
fn pass_write(
    pool: &Sources<'_>,
    timeline: &Timeline<'_>,
    plan: Option<&Plan>,
    outs: &mut Outputs,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Vec<SourceDone>> {
    let parts = outs.writers.len();
    let mut dones: Vec<Option<SourceDone>> = (0..pool.paths.len()).map(|_| None).collect();
    pool.run::<Block, SourceDone>(
        &|i, ctl| {
            let mut ctx = timeline.ctx(i);
            ctx.plan = plan;
            ctx.parts = parts;
            let blocks = (0..parts)
                .map(|part| Block {
                    part,
                    text: Vec::with_capacity(BLOCK + (BLOCK >> 3)),
                    events: 0,
                })
                .collect();
            let mut v = Rewriting::new(&ctx, ReaderOut::Write { ctl, blocks });
            let mut reading = ctl.reading();
            let path = &pool.paths[i];
            let bytes = read_trace_with(path, &mut v, &mut reading, pool.read_options)?;
            let found = base_in(v.header.iter().map(|(k, r)| (&k[..], &r[..])), path)?;
            if found.flatten() != ctx.base {
                return Err(Error::not_a_trace(
                    path,
                    "its baseTimeNanoseconds is not the one found ahead of the events (did \
                     the file change while it was merged?)",
                ));
            }
            v.finish(bytes)
        },
        &mut |msg| {
            match msg {
                Msg::Part(block) => outs.append(&block)?,
                Msg::Done(i, done) => dones[i] = Some(done),
            }
            Ok(())
        },
        progress,
    )?;
    dones
        .into_iter()
        .map(|d| d.ok_or_else(|| Error::Panic("a source was not merged".into())))
        .collect()
}

/// The merged outputs being written: one trace, or the parts of a plan (plain temporary
/// files until [`Outputs::finish`]).
struct Outputs {
    writers: Vec<TraceWriter<OutFile>>,
    /// Where each goes in the end.
    finals: Vec<PathBuf>,
    temps: Temps,
    /// The destination (a single output's temporary is the sink's own).
    dst: PathBuf,
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("cannot write {}", path.display()), e)
}

impl Outputs {
    /// The outputs, opened with their leading keys and the `traceEvents` array.
    fn open(dst: &Path, gzip: Option<(u32, usize)>, plan: Option<&Plan>) -> Result<Outputs> {
        let mut outs = Outputs {
            writers: Vec::new(),
            finals: Vec::new(),
            temps: Temps::default(),
            dst: dst.to_path_buf(),
        };
        let Some(plan) = plan else {
            let encoding = match gzip {
                Some((level, threads)) => Encoding::Gzip { level, threads },
                None => Encoding::Plain,
            };
            let sink = SinkWrite(Sink::create(dst, encoding)?);
            let mut w = TraceWriter::new(OutFile::Single(Box::new(sink)));
            w.member(b"\"schemaVersion\": 1")
                .map_err(|e| write_error(dst, e))?;
            w.open_events().map_err(|e| write_error(dst, e))?;
            outs.writers.push(w);
            outs.finals.push(dst.to_path_buf());
            return Ok(outs);
        };
        let name = dst
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "merged".into());
        let dir = dst
            .parent()
            .map(Path::to_path_buf)
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        let suffix = if gzip.is_some() { ".json.gz" } else { ".json" };
        let parts = plan.firsts.len();
        let stem = stem(&name).to_string();
        for i in 0..parts {
            let fin = dir.join(format!("{stem}.part-{:03}-of-{parts:03}{suffix}", i + 1));
            outs.open_part(&dir, fin, plan, i, &name)?;
        }
        Ok(outs)
    }

    /// Part `i` of `plan`, as a temporary file in `dir` that becomes `fin`.
    fn open_part(
        &mut self,
        dir: &Path,
        fin: PathBuf,
        plan: &Plan,
        i: usize,
        name: &str,
    ) -> Result<()> {
        let (file, temp) = crate::output::temps::create(dir, fin.file_name().expect("a file name"))
            .map_err(|e| {
                Error::io(
                    format!("cannot create a temporary file for {}", fin.display()),
                    e,
                )
            })?;
        self.temps.paths.push(temp.clone());
        let mut w = TraceWriter::new(OutFile::Part(BufWriter::with_capacity(PART_BUFFER, file)));
        let head = part_head(plan, i, name);
        w.member(&head).map_err(|e| write_error(&temp, e))?;
        w.member(b"\"schemaVersion\": 1")
            .map_err(|e| write_error(&temp, e))?;
        w.open_events().map_err(|e| write_error(&temp, e))?;
        self.writers.push(w);
        self.finals.push(fin);
        Ok(())
    }

    /// A reader's block of events, after the events already in its output.
    fn append(&mut self, block: &Block) -> Result<()> {
        let w = &mut self.writers[block.part];
        let sep: &[u8] = if w.events == 0 { b"\n" } else { b",\n" };
        let written = w.put(sep).and_then(|_| w.put(&block.text));
        if let Err(e) = written {
            let path = self.temps.paths.get(block.part).unwrap_or(&self.dst);
            return Err(write_error(path, e));
        }
        w.events += block.events;
        Ok(())
    }

    /// Ends every output: the `traceEvents` array, then the keys after it (the merged base,
    /// the common time unit, the merge's `record`); their stats.
    fn close(
        &mut self,
        record: &[u8],
        unit: Option<&[u8]>,
        max_bytes: Option<u64>,
        plan: Option<&Plan>,
        spans: &[(usize, (i128, i128))],
        stats: &mut MergeStats,
    ) -> Result<()> {
        for (part, w) in self.writers.iter_mut().enumerate() {
            let path = self.finals[part].clone();
            let io = |e| write_error(&path, e);
            w.close_events().map_err(io)?;
            if let Some(base) = stats.base_time_ns {
                let mut m = b"\"baseTimeNanoseconds\": ".to_vec();
                push_int(&mut m, base);
                w.member(&m).map_err(io)?;
            }
            if let Some(unit) = unit {
                let mut m = b"\"displayTimeUnit\": \"".to_vec();
                m.extend_from_slice(unit);
                m.push(b'"');
                w.member(&m).map_err(io)?;
            }
            w.member(record).map_err(io)?;
            w.end().map_err(io)?;
            stats.events_written += w.events;
            stats.json_bytes_written += w.bytes;
            if max_bytes.is_some_and(|m| w.bytes > m) {
                stats.oversized_parts += 1;
            }
            let (start_us, end_us) = match plan {
                Some(p) => p.window_us(part),
                None => spans
                    .iter()
                    .fold(None, |acc: Option<(i128, i128)>, (_, s)| {
                        Some(acc.map_or(*s, |a| (a.0.min(s.0), a.1.max(s.1))))
                    })
                    .map_or((0.0, 0.0), |(a, b)| (a as f64 / 1000.0, b as f64 / 1000.0)),
            };
            stats.outputs.push(OutputStats {
                path,
                start_us,
                end_us,
                events: w.events,
                json_bytes: w.bytes,
            });
        }
        Ok(())
    }

    /// Puts the outputs in place: the single one's sink finished, or the parts compressed
    /// (for gzip) and renamed, all or none.
    fn finish(
        self,
        parted: bool,
        gzip: Option<(u32, usize)>,
        read: u64,
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        let Outputs {
            writers,
            finals,
            mut temps,
            ..
        } = self;
        let mut plain_temps = Vec::new();
        for (part, w) in writers.into_iter().enumerate() {
            match w.out {
                OutFile::Single(sink) => {
                    sink.0.finish()?;
                }
                OutFile::Part(mut file) => {
                    file.flush().map_err(|e| write_error(&finals[part], e))?;
                    plain_temps.push(temps.paths[part].clone());
                }
            }
        }
        if parted {
            finish_parts(&plain_temps, &finals, gzip, &mut temps, &mut || {
                progress(read)
            })?;
        }
        Ok(())
    }
}

/// Adds each source's counts to `stats`; an error past [`MAX_KEPT_TEXT`] of top-level keys.
fn add_source_totals(ranked: &[Ranked], stats: &mut MergeStats) -> Result<()> {
    let mut header_bytes_all = 0usize;
    for r in ranked {
        stats.events_read += r.done.events_read;
        stats.flow_events_cut += r.done.flow_events_cut;
        stats.json_bytes_read += r.done.json_bytes_read;
        header_bytes_all += r
            .done
            .header
            .iter()
            .map(|(k, raw)| k.len() + raw.len())
            .sum::<usize>();
        if header_bytes_all > MAX_KEPT_TEXT {
            return Err(Error::InvalidArgument(format!(
                "more than {} MiB of top-level keys in the sources",
                MAX_KEPT_TEXT >> 20
            )));
        }
    }
    Ok(())
}

/// Names and sorts the processes, rank by rank: a `process_name` and a `process_sort_index`
/// event for each in every output it has events in; each rank's stats.
fn name_processes(
    ranked: &mut [Ranked],
    timeline: &Timeline<'_>,
    outs: &mut Outputs,
    stats: &mut MergeStats,
) -> Result<()> {
    let mut sort_index = 0i64;
    let mut naming: Vec<u8> = Vec::new();
    for r in ranked.iter_mut() {
        let host = header_string(&r.done.header, b"host_name").map(<[u8]>::to_vec);
        let mut processes = Vec::with_capacity(r.done.processes.len());
        let label = json_body(&r.label);
        for p in process_order(&r.done.processes) {
            let proc_ = &r.done.processes[p];
            let pid = (r.index as i64 + 1) * PID_STRIDE + p as i64;
            let name = process_name(&label, host.as_deref(), proc_);
            for (part, w) in outs.writers.iter_mut().enumerate() {
                if !r.done.present[p][part] {
                    continue;
                }
                process_name_event(&mut naming, pid, &name);
                w.event(&naming)
                    .map_err(|e| write_error(&outs.finals[part], e))?;
                process_sort_event(&mut naming, pid, sort_index);
                w.event(&naming)
                    .map_err(|e| write_error(&outs.finals[part], e))?;
            }
            processes.push(ProcessStats {
                source_pid: source_pid_json(&proc_.key),
                pid,
                name: String::from_utf8_lossy(&name).into_owned(),
                sort_index,
            });
            sort_index += 1;
        }
        let i = r.index;
        stats.ranks.push(RankStats {
            source: timeline.sources[i].clone(),
            label: r.label.clone(),
            rank: r.rank,
            rank_from: r.rank_from,
            base_time_ns: timeline.bases[i],
            offset_ns: timeline.offsets[i],
            align_offset_ns: timeline.align[i],
            events_read: r.done.events_read,
            events_written: r.done.events_written,
            json_bytes_read: r.done.json_bytes_read,
            processes,
        });
    }
    Ok(())
}

/// A source's processes in the order they are shown: by class, then their own sort index
/// (or numeric pid), then first appearance.
fn process_order(processes: &[Process]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..processes.len()).collect();
    order.sort_by_key(|&p| {
        let proc_ = &processes[p];
        let pid_num = proc_
            .key
            .strip_prefix(b"n")
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(|t| t.parse::<i64>().ok());
        (
            process_class(proc_),
            proc_.sort_index.or(pid_num).unwrap_or(i64::MAX),
            p,
        )
    });
    order
}

/// The `process_name` metadata event of `pid`, into `out`.
fn process_name_event(out: &mut Vec<u8>, pid: i64, name: &[u8]) {
    out.clear();
    out.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
    push_int(out, pid);
    out.extend_from_slice(b",\"tid\":0,\"args\":{\"name\":\"");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\"}}");
}

/// The `process_sort_index` metadata event of `pid`, into `out`.
fn process_sort_event(out: &mut Vec<u8>, pid: i64, sort_index: i64) {
    out.clear();
    out.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":");
    push_int(out, pid);
    out.extend_from_slice(b",\"tid\":0,\"args\":{\"sort_index\":");
    push_int(out, sort_index);
    out.extend_from_slice(b"}}");
}

/// Each rank's time span (ns, merged clock), by position in `ranked`; a warning in `stats`
/// when some rank ends before another starts.
fn warn_of_apart_spans(
    ranked: &[Ranked],
    sources: &[PathBuf],
    stats: &mut MergeStats,
) -> Vec<(usize, (i128, i128))> {
    let spans: Vec<(usize, (i128, i128))> = ranked
        .iter()
        .enumerate()
        .filter_map(|(k, r)| r.done.span.map(|s| (k, s)))
        .collect();
    if let (Some(late), Some(early)) = (
        spans.iter().max_by_key(|(_, s)| s.0),
        spans.iter().min_by_key(|(_, s)| s.1),
    ) {
        if late.1 .0 > early.1 .1 {
            let (a, b) = (&ranked[early.0], &ranked[late.0]);
            stats.warnings.push(format!(
                "the ranks' time spans do not all overlap: {} ({}) ends at {:.3} us, before {} \
                 ({}) starts at {:.3} us: are they from one run?",
                a.label,
                sources[a.index].display(),
                early.1 .1 as f64 / 1000.0,
                b.label,
                sources[b.index].display(),
                late.1 .0 as f64 / 1000.0
            ));
        }
    }
    spans
}

/// The `displayTimeUnit` every source that has one agrees on.
fn common_time_unit(ranked: &[Ranked]) -> Option<Vec<u8>> {
    let units: Vec<&[u8]> = ranked
        .iter()
        .filter_map(|r| header_string(&r.done.header, b"displayTimeUnit"))
        .collect();
    units
        .first()
        .filter(|u| units.iter().all(|v| v == *u))
        .map(|u| u.to_vec())
}

/// The `kinetrace_merge` member written after the events: the base, the alignment, and per
/// rank where it came from and how its pids were mapped.
fn merge_record(ranked: &[Ranked], sources: &[PathBuf], stats: &MergeStats) -> Vec<u8> {
    let mut record = b"\"kinetrace_merge\": {\"version\": 1, \"base_time_ns\": ".to_vec();
    push_opt_int(&mut record, stats.base_time_ns);
    record.extend_from_slice(b", \"align\": ");
    match stats.aligned_step {
        Some(step) => {
            record.extend_from_slice(b"\"step\", \"aligned_step\": ");
            push_int(&mut record, step);
        }
        None => record.extend_from_slice(b"null, \"aligned_step\": null"),
    }
    record.extend_from_slice(b", \"ranks\": [");
    for (k, (r, s)) in ranked.iter().zip(&stats.ranks).enumerate() {
        if k > 0 {
            record.push(b',');
        }
        push_rank_record(&mut record, r, s, &sources[r.index]);
    }
    record.extend_from_slice(b"\n]}");
    record
}

/// One rank of the `kinetrace_merge` member.
fn push_rank_record(record: &mut Vec<u8>, r: &Ranked, s: &RankStats, source: &Path) {
    record.extend_from_slice(b"\n{\"label\": ");
    push_json_string(record, r.label.as_bytes());
    record.extend_from_slice(b", \"index\": ");
    push_int(record, r.index);
    record.extend_from_slice(b", \"rank\": ");
    push_opt_int(record, r.rank.map(i128::from));
    record.extend_from_slice(b", \"rank_from\": ");
    push_json_string(record, r.rank_from.as_bytes());
    record.extend_from_slice(b", \"source\": ");
    push_json_string(record, source.to_string_lossy().as_bytes());
    record.extend_from_slice(b", \"base_time_ns\": ");
    push_opt_int(record, s.base_time_ns);
    record.extend_from_slice(b", \"offset_ns\": ");
    push_int(record, s.offset_ns);
    record.extend_from_slice(b", \"align_offset_ns\": ");
    push_int(record, s.align_offset_ns);
    record.extend_from_slice(b", \"events_read\": ");
    push_int(record, s.events_read);
    record.extend_from_slice(b", \"pids\": [");
    for (j, p) in s.processes.iter().enumerate() {
        if j > 0 {
            record.extend_from_slice(b", ");
        }
        record.extend_from_slice(b"{\"source\": ");
        record.extend_from_slice(p.source_pid.as_bytes());
        record.extend_from_slice(b", \"pid\": ");
        push_int(record, p.pid);
        record.extend_from_slice(b", \"name\": \"");
        record.extend_from_slice(p.name.as_bytes());
        record.extend_from_slice(b"\"}");
    }
    record.extend_from_slice(b"], \"header\": {");
    for (j, (_, raw)) in r.done.header.iter().enumerate() {
        if j > 0 {
            record.extend_from_slice(b", ");
        }
        record.extend_from_slice(raw);
    }
    record.extend_from_slice(b"}}");
}

/// The error of a merge that keeps nothing.
fn nothing_kept(spec: &FilterSpec) -> Error {
    Error::InvalidArgument(if spec.is_everything() {
        "the sources have no events to merge".into()
    } else {
        "the filter selects no events in any source".into()
    })
}

/// `label` as the body of a JSON string.
fn json_body(label: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_json_string_body(&mut out, label.as_bytes());
    out
}

fn push_opt_int(out: &mut Vec<u8>, v: Option<i128>) {
    match v {
        Some(v) => push_int(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// Adds the histogram `from` into `into`, at the coarser of their cell widths.
fn merge_histogram(into: &mut Histogram, from: Histogram) {
    let target = into.shift.max(from.shift);
    coarsen(into, target);
    for (cell, bytes) in from.cells {
        *into.cells.entry(cell >> (target - from.shift)).or_default() += bytes;
    }
    while into.cells.len() > MAX_CELLS {
        coarsen(into, into.shift + 1);
    }
}

fn coarsen(h: &mut Histogram, shift: u32) {
    if h.shift >= shift {
        return;
    }
    let by = shift - h.shift;
    let mut merged = HashMap::with_capacity_and_hasher(h.cells.len(), Default::default());
    for (cell, bytes) in h.cells.drain() {
        *merged.entry(cell >> by).or_default() += bytes;
    }
    h.cells = merged;
    h.shift = shift;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{entries, scratch};
    use serde_json::Value;
    use std::collections::BTreeMap;
    use std::fs;

    fn no_progress() -> impl FnMut(u64) -> Result<()> {
        |_| Ok(())
    }

    #[test]
    fn flow_ids_are_unique_per_source() {
        let id = |raw: &str, k, n| {
            let mut out = Vec::new();
            push_id(&mut out, raw.as_bytes(), k, n);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(id("7", 0, 3), "21");
        assert_eq!(id("7", 2, 3), "23");
        assert_eq!(id("-7", 1, 3), "-20");
        assert_eq!(id("\"0x1f\"", 1, 3), "\"1:0x1f\"");
        assert_eq!(id("1.5", 2, 3), "\"2:1.5\"");
        assert_eq!(id("1e3", 2, 3), "\"2:1e3\"");
    }

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

    /// One rank's trace as torch or Kineto write it: a CPU process `pid` with threads,
    /// GPU 0 (pid 0), launch flows CPU -> kernel with ids from 1, fwdbwd flows, a
    /// `ProfilerStep#N` per step, instants on string pids; the base before or after the
    /// events (or none: absolute `ts`), `distributedInfo` with `rank` (or none).
    struct Rank {
        pid: u32,
        base: Option<i128>,
        base_after: bool,
        rank: Option<i64>,
        start_us: u64,
        steps: usize,
        first_step: usize,
        pretty: bool,
    }

    // Long because it writes one synthetic rank's trace text field by field, as the
    // tests' fixture; its lines are the trace's shape, in the order a reader sees it.
    #[allow(clippy::too_many_lines)]
    fn rank_trace(r: &Rank) -> String {
        let mut events = Vec::new();
        let p = r.pid;
        for (pid, label, sort) in [
            (p.to_string(), "CPU", p as i64),
            ("0".into(), "GPU 0", 5000000),
        ] {
            events.push(format!(
                r#"{{"name":"process_name","ph":"M","ts":0.000,"pid":{pid},"tid":0,"args":{{"name":"python3"}}}}"#
            ));
            events.push(format!(
                r#"{{"name":"process_labels","ph":"M","ts":0.000,"pid":{pid},"tid":0,"args":{{"labels":"{label}"}}}}"#
            ));
            events.push(format!(
                r#"{{"name":"process_sort_index","ph":"M","ts":0.000,"pid":{pid},"tid":0,"args":{{"sort_index":{sort}}}}}"#
            ));
        }
        events.push(format!(
            r#"{{"name":"thread_name","ph":"M","ts":0.000,"pid":{p},"tid":{p},"args":{{"name":"thread {p}"}}}}"#
        ));
        events.push(
            r#"{"name":"thread_name","ph":"M","ts":0.000,"pid":0,"tid":7,"args":{"name":"stream 7"}}"#
                .into(),
        );
        let mut kernels = Vec::new();
        for s in 0..r.steps {
            let t = r.start_us + s as u64 * 1000;
            let n = r.first_step + s;
            events.push(format!(
                r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{n}","pid":{p},"tid":{p},"ts":{t}.125,"dur":900.000,"args":{{"External id":{n}}}}}"#
            ));
            for k in 0..3u64 {
                let id = s as u64 * 3 + k + 1;
                let lt = t + 10 + k * 100;
                events.push(format!(
                    r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":{p},"tid":{p},"ts":{lt}.500,"dur":5.000,"args":{{"correlation":{id}}}}}"#
                ));
                events.push(format!(
                    r#"{{"ph":"s","id":{id},"pid":{p},"tid":{p},"ts":{lt}.500,"cat":"ac2g","name":"ac2g"}}"#
                ));
                kernels.push(format!(
                    r#"{{"ph":"X","cat":"kernel","name":"k{k}","pid":0,"tid":7,"ts":{}.000,"dur":30.000,"args":{{"correlation":{id}}}}}"#,
                    lt + 20
                ));
                kernels.push(format!(
                    r#"{{"ph":"f","id":{id},"pid":0,"tid":7,"ts":{}.000,"cat":"ac2g","name":"ac2g","bp":"e"}}"#,
                    lt + 20
                ));
            }
        }
        events.extend(kernels);
        let end = r.start_us + r.steps as u64 * 1000;
        events.push(format!(
            r#"{{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":{}.000,"dur":{}.000}}"#,
            r.start_us,
            end - r.start_us
        ));
        events.push(format!(
            r#"{{"name":"Record Window End","ph":"i","s":"g","pid":"","tid":"","ts":{end}.000}}"#
        ));
        let sep = if r.pretty { ",\n  " } else { ",\n" };
        let body = events
            .iter()
            .map(|e| {
                if r.pretty {
                    e.replace(",\"args\"", ",\n    \"args\"")
                } else {
                    e.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(sep);
        let mut head = String::from("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"H100\"}],\n");
        let mut tail = String::from("\n],\n  \"traceName\": \"t.json\"");
        if let Some(rank) = r.rank {
            head.push_str(&format!(
                "  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": 4}},\n"
            ));
        }
        if let Some(base) = r.base {
            let m = format!("\"baseTimeNanoseconds\": {base}");
            if r.base_after {
                tail.push_str(&format!(",\n  {m}"));
            } else {
                head.push_str(&format!("  {m},\n"));
            }
        }
        format!("{head}  \"traceEvents\": [\n  {body}{tail}\n}}\n")
    }

    fn gzip(text: &str) -> Vec<u8> {
        crate::testing::gzip_member(text.as_bytes(), 1)
    }

    fn parse(path: &Path) -> Value {
        let raw = fs::read(path).unwrap();
        let raw = if raw.starts_with(&[0x1f, 0x8b]) {
            let mut d = flate2::read::MultiGzDecoder::new(&raw[..]);
            let mut out = Vec::new();
            d.read_to_end(&mut out).unwrap();
            out
        } else {
            raw
        };
        serde_json::from_slice(&raw).unwrap()
    }

    /// A source event as the merge writes it (the documented mapping), for comparison.
    fn mapped(e: &Value, k: usize, n: usize, offset_ns: i128) -> Value {
        let mut e = e.clone();
        let o = e.as_object_mut().unwrap();
        let pid = o.get("pid").cloned().unwrap_or(Value::Null);
        o.insert("pid".into(), Value::String(format!("{k}/{pid}")));
        if let Some(ts) = o.get("ts").and_then(Value::as_f64) {
            o.insert(
                "ts".into(),
                Value::from(((ts * 1000.0).round() as i128 + offset_ns) as f64 / 1000.0),
            );
        }
        let ph = o["ph"].as_str().unwrap().to_string();
        if ID_PHASES.contains(&ph.as_bytes()) {
            if let Some(id) = o.get("id").and_then(Value::as_i64) {
                o.insert("id".into(), Value::from(id * n as i64 + k as i64));
            }
        }
        e
    }

    fn counts(events: impl Iterator<Item = Value>) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in events {
            *m.entry(e.to_string()).or_default() += 1;
        }
        m
    }

    fn options() -> MergeOptions {
        MergeOptions {
            threads: 2,
            ..MergeOptions::default()
        }
    }

    /// Three ranks with the same pids, tids and flow ids and different bases (one before
    /// the events, one after them in a gzip file, one with none); each source event is in
    /// the merged trace exactly once after the documented mapping.
    // Long because one scenario (three ranks, three kinds of base) whose every event is
    // followed through the documented mapping; the checks share its maps.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn every_event_once_on_one_clock() {
        let dir = scratch("merge-basic");
        let base = 1_790_857_026_000_000_000i128;
        let ranks = [
            Rank {
                pid: 4242,
                base: Some(base + 500_000),
                base_after: false,
                rank: Some(1),
                start_us: 1000,
                steps: 3,
                first_step: 1,
                pretty: false,
            },
            Rank {
                pid: 4242,
                base: Some(base),
                base_after: true,
                rank: Some(0),
                start_us: 900,
                steps: 3,
                first_step: 1,
                pretty: true,
            },
            Rank {
                pid: 4242,
                base: Some(base + 2_000),
                base_after: true,
                rank: None,
                start_us: 800,
                steps: 2,
                first_step: 2,
                pretty: false,
            },
        ];
        let texts: Vec<String> = ranks.iter().map(rank_trace).collect();
        let paths = [
            dir.join("a.json"),
            dir.join("b.json.gz"),
            dir.join("c_rank2.json"),
        ];
        fs::write(&paths[0], &texts[0]).unwrap();
        fs::write(&paths[1], gzip(&texts[1])).unwrap();
        fs::write(&paths[2], &texts[2]).unwrap();
        let dst = dir.join("merged.json");
        let stats = merge(&paths, &dst, &options(), &mut no_progress()).unwrap();
        assert_eq!(stats.base_time_ns, Some(base));
        assert!(stats.warnings.is_empty(), "{:?}", stats.warnings);
        let labels: Vec<&str> = stats.ranks.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["rank 0", "rank 1", "rank 2"]);
        let froms: Vec<&str> = stats.ranks.iter().map(|r| r.rank_from).collect();
        assert_eq!(froms, ["distributedInfo", "distributedInfo", "file name"]);
        let v = parse(&dst);
        let merged = v["traceEvents"].as_array().unwrap();
        assert_eq!(v["baseTimeNanoseconds"], Value::from(base as i64));
        // Map merged pids back to (source, source pid) through the record.
        let record = &v["kinetrace_merge"];
        let mut pid_map = BTreeMap::new();
        for (r, stat) in record["ranks"].as_array().unwrap().iter().zip(&stats.ranks) {
            let k = paths.iter().position(|p| *p == stat.source).unwrap();
            for p in r["pids"].as_array().unwrap() {
                pid_map.insert(p["pid"].as_i64().unwrap(), format!("{k}/{}", p["source"]));
            }
            assert_eq!(r["offset_ns"].as_i64().unwrap() as i128, stat.offset_ns);
            assert_eq!(r["header"]["traceName"], "t.json");
        }
        let mut got = Vec::new();
        let mut names = Vec::new();
        for e in merged {
            let mut e = e.clone();
            if e["ph"] == "M" && (e["name"] == "process_name" || e["name"] == "process_sort_index")
            {
                names.push(e);
                continue;
            }
            let pid = e["pid"].as_i64().unwrap();
            e.as_object_mut()
                .unwrap()
                .insert("pid".into(), Value::String(pid_map[&pid].clone()));
            got.push(e);
        }
        let mut want = Vec::new();
        for (k, text) in texts.iter().enumerate() {
            let src: Value = serde_json::from_str(text).unwrap();
            let offset = stats
                .ranks
                .iter()
                .find(|r| r.source == paths[k])
                .unwrap()
                .offset_ns;
            for e in src["traceEvents"].as_array().unwrap() {
                if e["ph"] == "M"
                    && (e["name"] == "process_name" || e["name"] == "process_sort_index")
                {
                    continue;
                }
                want.push(mapped(e, k, 3, offset));
            }
        }
        assert_eq!(counts(got.into_iter()), counts(want.into_iter()));
        // Offsets: each base against the earliest.
        let offsets: Vec<i128> = stats.ranks.iter().map(|r| r.offset_ns).collect();
        assert_eq!(offsets, [0, 500_000, 2_000]);
        // Every ts keeps three decimals, shifted ones included.
        let raw = fs::read_to_string(&dst).unwrap();
        assert!(
            raw.contains("\"ts\":1500.125"),
            "rank 1's first step, 0.5 ms later"
        );
        // Names and order: rank by rank, CPU then GPU then the rest.
        let mut order: Vec<(i64, String)> = Vec::new();
        let mut name_of = BTreeMap::new();
        for e in &names {
            let pid = e["pid"].as_i64().unwrap();
            if e["name"] == "process_name" {
                name_of.insert(pid, e["args"]["name"].as_str().unwrap().to_string());
            }
        }
        for e in &names {
            if e["name"] == "process_sort_index" {
                let pid = e["pid"].as_i64().unwrap();
                order.push((
                    e["args"]["sort_index"].as_i64().unwrap(),
                    name_of[&pid].clone(),
                ));
            }
        }
        order.sort();
        let order: Vec<String> = order.into_iter().map(|(_, n)| n).collect();
        assert_eq!(
            order,
            [
                "rank 0 · pid 4242",
                "rank 0 · GPU 0",
                "rank 0 · Spans",
                "rank 0 · pid \"\"",
                "rank 1 · pid 4242",
                "rank 1 · GPU 0",
                "rank 1 · Spans",
                "rank 1 · pid \"\"",
                "rank 2 · pid 4242",
                "rank 2 · GPU 0",
                "rank 2 · Spans",
                "rank 2 · pid \"\"",
            ]
        );
        // Flows pair within a rank only: each (cat, id) has one s and one f.
        let mut flows: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for e in merged.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
            let f = flows
                .entry(format!("{}/{}", e["cat"], e["id"]))
                .or_default();
            if e["ph"] == "s" {
                f.0 += 1
            } else {
                f.1 += 1
            }
        }
        assert!(flows.values().all(|&c| c == (1, 1)), "{flows:?}");
        assert_eq!(flows.len(), 3 * 3 + 3 * 3 + 2 * 3);
        assert_eq!(stats.outputs[0].events, merged.len() as u64);
        assert_eq!(
            entries(&dir),
            ["a.json", "b.json.gz", "c_rank2.json", "merged.json"]
        );

        // Gzip output, in one member; an absolute source makes the merge absolute.
        let mut abs = Rank {
            pid: 4242,
            base: None,
            base_after: false,
            rank: Some(3),
            start_us: 0,
            steps: 2,
            first_step: 1,
            pretty: false,
        };
        abs.start_us = 1_790_857_026_000_000 + 1000;
        let abs_path = dir.join("abs.json");
        fs::write(&abs_path, rank_trace(&abs)).unwrap();
        let mut o = options();
        o.gzip = Some((1, 2));
        let gz = dir.join("merged.json.gz");
        let stats = merge(
            &[paths[0].clone(), abs_path.clone()],
            &gz,
            &o,
            &mut no_progress(),
        )
        .unwrap();
        assert_eq!(stats.base_time_ns, None);
        let v = parse(&gz);
        assert!(v.get("baseTimeNanoseconds").is_none());
        let ts: Vec<f64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "ProfilerStep#1")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert_eq!(ts.len(), 2);
        assert!(
            (ts[0] - ts[1]).abs() < 10_000.0,
            "{ts:?}: on one absolute clock"
        );
    }

    /// Events with no pid, a null or a boolean pid get one pid per source (no second `pid`
    /// key); a `ts` that is not a number stays as written.
    #[test]
    fn events_without_a_usable_pid() {
        let dir = scratch("merge-nopid");
        let text = concat!(
            "{\"traceEvents\": [\n",
            "{\"ph\":\"i\",\"name\":\"a\",\"ts\":1.000,\"s\":\"g\"},\n",
            "{\"ph\":\"X\",\"name\":\"b\",\"pid\":null,\"tid\":1,\"ts\":2.000,\"dur\":1},\n",
            "{\"ph\":\"X\",\"name\":\"c\",\"pid\":true,\"ts\":\"3\",\"dur\":1}\n",
            "], \"baseTimeNanoseconds\": 1000}"
        );
        let paths = [dir.join("a.json"), dir.join("b.json")];
        fs::write(&paths[0], text).unwrap();
        fs::write(&paths[1], text.replace(": 1000}", ": 3000}")).unwrap();
        let dst = dir.join("m.json");
        merge(&paths, &dst, &options(), &mut no_progress()).unwrap();
        let raw = fs::read_to_string(&dst).unwrap();
        let v: Value = serde_json::from_str(&raw).unwrap();
        let events: Vec<&Value> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] != "M")
            .collect();
        assert_eq!(events.len(), 6);
        let pids: std::collections::BTreeSet<i64> =
            events.iter().map(|e| e["pid"].as_i64().unwrap()).collect();
        assert_eq!(pids.len(), 2, "one process per source: {pids:?}");
        for line in raw
            .lines()
            .filter(|l| l.starts_with("{\"ph\":\"") && !l.contains("\"M\""))
        {
            assert_eq!(line.matches("\"pid\"").count(), 1, "{line}");
        }
        assert!(raw.contains("\"ts\":\"3\""));
        assert!(raw.contains("\"ts\":3.000"), "b's first event, 2 us later");
    }

    // Long because one merge with alignment, a filter and parts at once, whose checks
    // share the merged parts read back.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn align_step_filter_and_parts() {
        let dir = scratch("merge-align");
        let base = 1_790_857_026_000_000_000i128;
        let a = Rank {
            pid: 10,
            base: Some(base),
            base_after: false,
            rank: Some(0),
            start_us: 1000,
            steps: 4,
            first_step: 1,
            pretty: false,
        };
        // Rank 1 starts its step 2 at 1500 µs where rank 0 has its step 2 at 2000 µs.
        let b = Rank {
            pid: 10,
            base: Some(base),
            base_after: true,
            rank: Some(1),
            start_us: 500,
            steps: 3,
            first_step: 2,
            pretty: false,
        };
        let paths = [dir.join("r0.json"), dir.join("r1.json")];
        fs::write(&paths[0], rank_trace(&a)).unwrap();
        fs::write(&paths[1], rank_trace(&b)).unwrap();
        let mut o = options();
        o.align_step = true;
        let dst = dir.join("m.json");
        let stats = merge(&paths, &dst, &o, &mut no_progress()).unwrap();
        assert_eq!(stats.aligned_step, Some(2));
        let aligns: Vec<i128> = stats.ranks.iter().map(|r| r.align_offset_ns).collect();
        assert_eq!(aligns, [0, 1_500_000]);
        let v = parse(&dst);
        let step2: Vec<f64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "ProfilerStep#2")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert_eq!(step2, [2000.125, 2000.125]);
        assert_eq!(
            v["kinetrace_merge"]["ranks"][1]["align_offset_ns"],
            1_500_000
        );

        // Kernels only, in a window: kernels of both ranks, no flows (their CPU ends go).
        let mut o = options();
        o.spec = FilterSpec {
            include_cats: vec!["kernel".into()],
            window_us: Some((1000.0, 2000.0)),
            ..FilterSpec::default()
        };
        let stats = merge(&paths, &dst, &o, &mut no_progress()).unwrap();
        let v = parse(&dst);
        let events = v["traceEvents"].as_array().unwrap();
        let kernels: Vec<&Value> = events.iter().filter(|e| e["cat"] == "kernel").collect();
        assert!(!kernels.is_empty());
        for k in &kernels {
            let ts = k["ts"].as_f64().unwrap();
            assert!(ts < 2000.0 && ts + 30.0 > 1000.0, "{ts}");
        }
        assert!(events
            .iter()
            .all(|e| e["ph"] == "M" || e["cat"] == "kernel"));
        assert_eq!(stats.flow_events_cut, kernels.len() as u64);
        // Only GPU processes remain, named.
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["rank 0 · GPU 0", "rank 1 · GPU 0"]);

        // Parts of the merged timeline.
        let mut o = options();
        o.max_bytes = Some(9_000);
        o.gzip = Some((1, 1));
        let stats = merge(&paths, &dir.join("p.json.gz"), &o, &mut no_progress()).unwrap();
        assert!(stats.outputs.len() > 1);
        let mut seen = 0;
        let mut union = Vec::new();
        for out in &stats.outputs {
            assert!(
                out.path.to_string_lossy().contains(".part-"),
                "{:?}",
                out.path
            );
            let v = parse(&out.path);
            let events = v["traceEvents"].as_array().unwrap();
            seen += events.iter().filter(|e| e["ph"] != "M").count();
            union.extend(events.iter().filter(|e| e["ph"] != "M").cloned());
            assert!(v["kinetrace_part"]["count"].as_u64().unwrap() as usize == stats.outputs.len());
            assert!(v["kinetrace_merge"]["ranks"].as_array().unwrap().len() == 2);
        }
        let total: usize = [&a, &b]
            .iter()
            .map(|r| {
                let v: Value = serde_json::from_str(&rank_trace(r)).unwrap();
                v["traceEvents"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["ph"] != "M")
                    .count()
            })
            .sum();
        assert_eq!(seen as u64 + stats.flow_events_cut, total as u64);
    }

    // Long because a table of bad sources, each a few lines: its error and an empty
    // output directory.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn bad_sources_are_clear_errors_and_leave_nothing() {
        let dir = scratch("merge-bad");
        let good = rank_trace(&Rank {
            pid: 1,
            base: Some(1000),
            base_after: true,
            rank: Some(0),
            start_us: 10,
            steps: 200,
            first_step: 1,
            pretty: false,
        });
        let other = rank_trace(&Rank {
            pid: 1,
            base: Some(1000),
            base_after: false,
            rank: Some(1),
            start_us: 10,
            steps: 2,
            first_step: 1,
            pretty: false,
        });
        let out = dir.join("out");
        fs::create_dir(&out).unwrap();
        let dst = out.join("m.json");
        fs::write(&dst, "old").unwrap();
        let g = dir.join("good.json");
        fs::write(&g, &other).unwrap();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "trunc.json",
                good.as_bytes()[..good.len() / 2].to_vec(),
                "end of file",
            ),
            (
                "trunc.json.gz",
                {
                    let z = gzip(&good);
                    z[..z.len() / 2].to_vec()
                },
                "corrupt gzip data",
            ),
            ("array.json", b"[1, 2]".to_vec(), "not a trace"),
            ("text.json", b"hello".to_vec(), "offset 0"),
            (
                "badbase.json",
                good.replace(
                    "\"baseTimeNanoseconds\": 1000",
                    "\"baseTimeNanoseconds\": 1.5",
                )
                .into_bytes(),
                "not an integer",
            ),
        ];
        for (name, data, want) in cases {
            let src = dir.join(name);
            fs::write(&src, &data).unwrap();
            for pair in [[g.clone(), src.clone()], [src.clone(), g.clone()]] {
                let err = merge(&pair, &dst, &options(), &mut no_progress()).unwrap_err();
                assert!(matches!(err, Error::TraceFormat(_)), "{name}: {err:?}");
                let msg = err.to_string();
                assert!(msg.contains(name) && msg.contains(want), "{name}: {msg}");
                assert_eq!(entries(&out), ["m.json"], "{name}");
                assert_eq!(fs::read(&dst).unwrap(), b"old");
            }
        }
        // Two sources claiming one rank.
        let g2 = dir.join("again.json");
        fs::write(&g2, &other).unwrap();
        let err = merge(
            &[g.clone(), g2.clone()],
            &dst,
            &options(),
            &mut no_progress(),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("good.json") && msg.contains("again.json") && msg.contains("rank 1"),
            "{msg}"
        );
        // Labels tell them apart.
        let mut o = options();
        o.labels = vec![Some("left".into()), Some("right".into())];
        let stats = merge(&[g.clone(), g2.clone()], &dst, &o, &mut no_progress()).unwrap();
        assert_eq!(stats.ranks[0].label, "left");
        let v = parse(&dst);
        assert!(v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["args"]["name"] == "right · GPU 0"));
        // Interrupted: the old output stays.
        fs::write(&dst, "old").unwrap();
        let mut calls = 0;
        let big = dir.join("big.json");
        fs::write(
            &big,
            rank_trace(&Rank {
                pid: 1,
                base: Some(1000),
                base_after: false,
                rank: Some(5),
                start_us: 10,
                steps: 40_000,
                first_step: 1,
                pretty: false,
            }),
        )
        .unwrap();
        let r = merge(&[g.clone(), big], &dst, &options(), &mut |_| {
            calls += 1;
            if calls > 5 {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
        assert_eq!(entries(&out), ["m.json"]);
        assert_eq!(fs::read(&dst).unwrap(), b"old");
        // Spans that do not meet: a warning.
        let late = dir.join("late.json");
        fs::write(
            &late,
            rank_trace(&Rank {
                pid: 1,
                base: Some(1000),
                base_after: false,
                rank: Some(7),
                start_us: 1_000_000,
                steps: 2,
                first_step: 1,
                pretty: false,
            }),
        )
        .unwrap();
        let stats = merge(&[g, late], &dst, &options(), &mut no_progress()).unwrap();
        assert_eq!(stats.warnings.len(), 1);
        assert!(
            stats.warnings[0].contains("do not all overlap"),
            "{:?}",
            stats.warnings
        );
    }
}
