//! Streaming tools over existing trace files: `kinetrace check` (strict validation and a
//! summary) and `kinetrace compress` (re-encode as one gzip member).
//!
//! Both read `.json` or gzip (one member or several, recognised by the magic bytes, not the
//! name) in constant memory, so they work on traces of many GB.
//!
//! The validator is a strict RFC 8259 parser over a byte buffer: no NaN / Infinity, no
//! trailing commas, no leading zeros, only the standard escapes, UTF-8 checked (no overlong
//! forms, no encoded surrogates), no raw control characters in strings, a nesting limit, and
//! nothing after the top-level value. It walks the top-level object and the `traceEvents`
//! array and reads each event into a small reused record of the fields it checks (`ph`,
//! `cat`, `name`, `pid`, `tid`, `ts`, `dur`, `id`, `args`); everything else is validated and
//! skipped without being stored. Decoded strings are capped at [`crate::lexer::STRING_CAP`] bytes, and the
//! distinct values it counts (phases, categories, pids, threads, open flows) at
//! [`MAX_DISTINCT`], so memory stays bounded whatever the input.
//!
//! A JSON syntax error ends the walk (there is no reliable way to resynchronise); trace-level
//! problems (an `X` event without `dur`, an unpaired flow) are collected, up to
//! [`CheckOptions::max_errors`] messages. Every message starts with the byte offset in the
//! decompressed stream and, inside `traceEvents`, the event's index.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::error::{Error, Result};
#[cfg(test)]
use crate::lexer::PROGRESS_EVERY;
use crate::lexer::{show, Input, Kind, PResult, Stop, BUF_SIZE};
use crate::members::Source;

/// Most distinct keys kept in each counting map (phases, categories, pids, threads, open
/// flows). Past it, new values are not counted and the summary is marked truncated.
pub(crate) const MAX_DISTINCT: usize = 1 << 20;

/// Most top-level keys listed in the summary.
const MAX_TOP_KEYS: usize = 64;

/// Settings of [`check_reader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckOptions {
    /// Most error messages kept (all errors are counted).
    pub(crate) max_errors: usize,
    /// Deepest nesting of arrays and objects accepted.
    pub(crate) max_depth: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_errors: 50,
            max_depth: 512,
        }
    }
}

/// A scalar found under one of the top-level keys the summary reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TopValue {
    /// The number exactly as written.
    Number(String),
    Str(String),
    Bool(bool),
    Null,
    /// An object or an array (not kept).
    Container(&'static str),
}

/// What `check` found: validity, the messages, and a summary of the trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CheckReport {
    /// No errors at all (JSON and trace checks).
    pub(crate) valid: bool,
    /// The whole input parsed as one JSON value (it may still fail the trace checks).
    pub(crate) json_valid: bool,
    /// The first `max_errors` messages, plus the syntax error that ended the walk if any.
    pub(crate) errors: Vec<String>,
    /// Every error found (the walk stops at a syntax error, so later ones are not seen).
    pub(crate) error_count: u64,
    /// Things that are valid but worth knowing (a gzip file of several members).
    pub(crate) warnings: Vec<String>,
    /// Bytes of JSON read (decompressed).
    pub(crate) json_bytes: u64,
    /// Gzip members in the file; 0 for plain JSON.
    pub(crate) gzip_members: u32,
    /// Top-level keys in order (at most 64).
    pub(crate) top_level_keys: Vec<String>,
    pub(crate) schema_version: Option<TopValue>,
    pub(crate) trace_name: Option<TopValue>,
    pub(crate) base_time_ns: Option<TopValue>,
    pub(crate) display_time_unit: Option<TopValue>,
    /// Elements of `traceEvents`.
    pub(crate) events: u64,
    /// Events per `ph`, most frequent first.
    pub(crate) phases: Vec<(String, u64)>,
    /// `X` and `i`/`I` events per `cat` (`""` when missing), most frequent first.
    pub(crate) categories: Vec<(String, u64)>,
    /// Distinct `pid` values.
    pub(crate) processes: u64,
    /// Distinct (`pid`, `tid`) pairs.
    pub(crate) threads: u64,
    /// Smallest `ts` in µs.
    pub(crate) ts_min: Option<f64>,
    /// Largest `ts + dur` (or `ts`) in µs.
    pub(crate) ts_max: Option<f64>,
    /// `s`/`f` pairs matched by (`cat`, `id`).
    pub(crate) flows_paired: u64,
    /// Flow events left without their other end.
    pub(crate) flows_unpaired: u64,
    /// Some counting map reached [`MAX_DISTINCT`]: counts are lower bounds.
    pub(crate) summary_truncated: bool,
}

/// The fields of one event that the checks need (reused from event to event).
#[derive(Default)]
struct Fields {
    ph: Option<Kind>,
    cat: Option<Kind>,
    name: Option<Kind>,
    pid: Option<Kind>,
    tid: Option<Kind>,
    ts: Option<Kind>,
    dur: Option<Kind>,
    id: Option<Kind>,
    args: Option<Kind>,
    ph_buf: Vec<u8>,
    cat_buf: Vec<u8>,
    name_buf: Vec<u8>,
    pid_buf: Vec<u8>,
    tid_buf: Vec<u8>,
    ts_buf: Vec<u8>,
    dur_buf: Vec<u8>,
    id_buf: Vec<u8>,
}

impl Fields {
    fn reset(&mut self) {
        self.ph = None;
        self.cat = None;
        self.name = None;
        self.pid = None;
        self.tid = None;
        self.ts = None;
        self.dur = None;
        self.id = None;
        self.args = None;
    }
}

fn kind(k: Option<Kind>) -> Kind {
    k.unwrap_or(Kind::Missing)
}

/// A flow end without its other end yet.
struct OpenFlow {
    /// Starts minus finishes seen.
    balance: i64,
    /// Where the first unmatched one is.
    offset: u64,
    index: u64,
}

/// Counts per distinct byte string, capped at [`MAX_DISTINCT`] keys.
#[derive(Default)]
struct Counter {
    map: HashMap<Box<[u8]>, u64>,
    truncated: bool,
}

impl Counter {
    fn add(&mut self, key: &[u8]) {
        if let Some(n) = self.map.get_mut(key) {
            *n += 1;
        } else if self.map.len() < MAX_DISTINCT {
            self.map.insert(key.into(), 1);
        } else {
            self.truncated = true;
        }
    }

    fn sorted(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .map
            .iter()
            .map(|(k, &n)| (String::from_utf8_lossy(k).into_owned(), n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

struct Checker<'a, R: BufRead> {
    inp: Input<'a, R>,
    f: Fields,
    key: Vec<u8>,
    scratch: Vec<u8>,
    flow_key: Vec<u8>,
    options: CheckOptions,
    report: CheckReport,
    phases: Counter,
    categories: Counter,
    pids: Counter,
    threads: Counter,
    flows: HashMap<Box<[u8]>, OpenFlow>,
    flows_untracked: u64,
}

/// Appends `id` (tagged by type, so `1` and `"1"` differ) to `out`.
fn push_id(out: &mut Vec<u8>, kind: Kind, text: &[u8]) {
    out.push(if kind == Kind::Str { b's' } else { b'n' });
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text);
}

/// An id as written in messages.
fn show_id(kind: Kind, text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    if kind == Kind::Str {
        format!("{text:?}")
    } else {
        text.into_owned()
    }
}

fn parse_number(text: &[u8]) -> Option<f64> {
    // JSON number syntax is a subset of what `f64::from_str` accepts.
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl<'a, R: BufRead> Checker<'a, R> {
    fn error(&mut self, offset: u64, index: Option<u64>, msg: impl AsRef<str>) {
        self.report.error_count += 1;
        if self.report.errors.len() < self.options.max_errors {
            let text = match index {
                Some(i) => format!("offset {offset} (traceEvents[{i}]): {}", msg.as_ref()),
                None => format!("offset {offset}: {}", msg.as_ref()),
            };
            self.report.errors.push(text);
        }
    }

    fn document(&mut self) -> PResult<()> {
        let Some(b) = self.inp.skip_ws()? else {
            return Err(self.inp.fail("empty file (expected a JSON object)"));
        };
        match b {
            b'{' => self.top_object()?,
            b'[' => {
                let at = self.inp.offset();
                self.error(
                    at,
                    None,
                    "the top level is an array (Chrome's JSON Array Format), not an object \
                     with \"traceEvents\"",
                );
                self.events_array()?;
            }
            0xEF => {
                return Err(self
                    .inp
                    .fail("byte order mark (or invalid byte) at the start of the JSON text"))
            }
            _ => {
                let at = self.inp.offset();
                let k = self.inp.value(0, None)?;
                self.error(
                    at,
                    None,
                    format!("the top level is {}, not an object", k.describe()),
                );
            }
        }
        match self.inp.skip_ws()? {
            None => Ok(()),
            Some(b) => Err(self
                .inp
                .fail(format!("extra data after the top-level value: {}", show(b)))),
        }
    }

    fn top_object(&mut self) -> PResult<()> {
        self.inp.pos += 1;
        let mut seen_events = false;
        let mut b = self.inp.ws_expect("a key or '}'")?;
        if b != b'}' {
            loop {
                let key_at = self.inp.offset();
                self.inp.key(b, &mut self.key)?;
                if self.report.top_level_keys.len() < MAX_TOP_KEYS {
                    self.report
                        .top_level_keys
                        .push(String::from_utf8_lossy(&self.key).into_owned());
                }
                match self.key.as_slice() {
                    b"traceEvents" => {
                        if seen_events {
                            self.error(key_at, None, "duplicate key \"traceEvents\"");
                        }
                        seen_events = true;
                        if self.inp.peek()? == Some(b'[') {
                            self.events_array()?;
                        } else {
                            let k = self.inp.value(1, None)?;
                            self.error(
                                key_at,
                                None,
                                format!("\"traceEvents\" is {}, not an array", k.describe()),
                            );
                        }
                    }
                    b"schemaVersion" => self.report.schema_version = Some(self.top_value()?),
                    b"traceName" => self.report.trace_name = Some(self.top_value()?),
                    b"baseTimeNanoseconds" => self.report.base_time_ns = Some(self.top_value()?),
                    b"displayTimeUnit" => self.report.display_time_unit = Some(self.top_value()?),
                    _ => {
                        self.inp.value(1, None)?;
                    }
                }
                match self
                    .inp
                    .next_item(b'}', "a key", "after a top-level value")?
                {
                    Some(next) => b = next,
                    None => break,
                }
            }
        }
        let end = self.inp.offset();
        self.inp.pos += 1;
        if !seen_events {
            self.error(end, None, "no \"traceEvents\" key in the top-level object");
        }
        Ok(())
    }

    fn top_value(&mut self) -> PResult<TopValue> {
        let k = self.inp.value(1, Some(&mut self.scratch))?;
        let text = String::from_utf8_lossy(&self.scratch).into_owned();
        Ok(match k {
            Kind::Num => TopValue::Number(text),
            Kind::Str => TopValue::Str(text),
            Kind::Bool => TopValue::Bool(text == "true"),
            Kind::Null => TopValue::Null,
            Kind::Object => TopValue::Container("object"),
            Kind::Array | Kind::Missing => TopValue::Container("array"),
        })
    }

    fn events_array(&mut self) -> PResult<()> {
        self.inp.pos += 1;
        let mut b = self.inp.ws_expect("an event or ']'")?;
        if b == b']' {
            self.inp.pos += 1;
            return Ok(());
        }
        let mut index = 0u64;
        loop {
            self.inp.event = Some(index);
            self.event(b, index)?;
            index += 1;
            match self.inp.next_item(b']', "an event", "after an event")? {
                Some(next) => b = next,
                None => break,
            }
        }
        self.inp.pos += 1;
        self.inp.event = None;
        Ok(())
    }

    fn event(&mut self, first: u8, index: u64) -> PResult<()> {
        let start = self.inp.offset();
        self.report.events += 1;
        if first != b'{' {
            let k = self.inp.value(2, None)?;
            self.error(
                start,
                Some(index),
                format!("event is {}, not an object", k.describe()),
            );
            return Ok(());
        }
        self.inp.pos += 1;
        let inp = &mut self.inp;
        let f = &mut self.f;
        f.reset();
        let mut b = inp.ws_expect("a key or '}'")?;
        if b != b'}' {
            loop {
                inp.key(b, &mut self.key)?;
                let (slot, buf) = match self.key.as_slice() {
                    b"ph" => (&mut f.ph, Some(&mut f.ph_buf)),
                    b"cat" => (&mut f.cat, Some(&mut f.cat_buf)),
                    b"name" => (&mut f.name, Some(&mut f.name_buf)),
                    b"pid" => (&mut f.pid, Some(&mut f.pid_buf)),
                    b"tid" => (&mut f.tid, Some(&mut f.tid_buf)),
                    b"ts" => (&mut f.ts, Some(&mut f.ts_buf)),
                    b"dur" => (&mut f.dur, Some(&mut f.dur_buf)),
                    b"id" => (&mut f.id, Some(&mut f.id_buf)),
                    b"args" => (&mut f.args, None),
                    _ => {
                        inp.value(3, None)?;
                        b = Self::next_member(inp)?;
                        if b == b'}' {
                            break;
                        }
                        continue;
                    }
                };
                *slot = Some(inp.value(3, buf)?);
                b = Self::next_member(inp)?;
                if b == b'}' {
                    break;
                }
            }
        }
        self.inp.pos += 1;
        self.finish_event(start, index);
        Ok(())
    }

    /// After a member of an event: the next key's first byte, or `}`.
    #[inline]
    fn next_member(inp: &mut Input<'_, R>) -> PResult<u8> {
        Ok(inp.next_item(b'}', "a key", "in an event")?.unwrap_or(b'}'))
    }

    /// "X event \"aten::add\"": how messages name the event in `f`.
    fn describe(f: &Fields) -> String {
        let ph = if f.ph == Some(Kind::Str) {
            String::from_utf8_lossy(&f.ph_buf).into_owned()
        } else {
            "the".to_string()
        };
        if f.name != Some(Kind::Str) {
            return format!("{ph} event");
        }
        let mut name = String::from_utf8_lossy(&f.name_buf).into_owned();
        if name.chars().count() > 60 {
            name = name.chars().take(57).collect::<String>() + "...";
        }
        format!("{ph} event {name:?}")
    }

    fn require(&mut self, f: &Fields, field: &str, k: Option<Kind>, start: u64, index: u64) {
        if k.is_none() {
            let what = Self::describe(f);
            self.error(start, Some(index), format!("{what} has no \"{field}\""));
        }
    }

    /// A `ts` or `dur`: its value if it is a finite number; an error if it is something else.
    fn number_field(
        &mut self,
        field: &str,
        k: Option<Kind>,
        text: &[u8],
        start: u64,
        index: u64,
    ) -> Option<f64> {
        match kind(k) {
            Kind::Missing => None,
            Kind::Num => match parse_number(text) {
                Some(v) if v.is_finite() => Some(v),
                _ => {
                    self.error(
                        start,
                        Some(index),
                        format!("\"{field}\" is out of the range of a double"),
                    );
                    None
                }
            },
            k => {
                self.error(
                    start,
                    Some(index),
                    format!("\"{field}\" is {}, not a number", k.describe()),
                );
                None
            }
        }
    }

    fn finish_event(&mut self, start: u64, index: u64) {
        let at = Some(index);
        let f = std::mem::take(&mut self.f);
        match kind(f.ph) {
            Kind::Str => self.phases.add(&f.ph_buf),
            Kind::Missing => self.error(start, at, "event has no \"ph\""),
            k => self.error(
                start,
                at,
                format!("\"ph\" is {}, not a string", k.describe()),
            ),
        }
        let ts = self.number_field("ts", f.ts, &f.ts_buf, start, index);
        let dur = self.number_field("dur", f.dur, &f.dur_buf, start, index);
        for (field, k) in [("pid", f.pid), ("tid", f.tid), ("id", f.id)] {
            let k = kind(k);
            if !matches!(k, Kind::Missing | Kind::Num | Kind::Str) {
                self.error(
                    start,
                    at,
                    format!("\"{field}\" is {}, not a number or a string", k.describe()),
                );
            }
        }
        for (field, k) in [("cat", f.cat), ("name", f.name)] {
            let k = kind(k);
            if !matches!(k, Kind::Missing | Kind::Str) {
                self.error(
                    start,
                    at,
                    format!("\"{field}\" is {}, not a string", k.describe()),
                );
            }
        }
        let cat: &[u8] = if f.cat == Some(Kind::Str) {
            &f.cat_buf
        } else {
            b""
        };
        let ph: &[u8] = if f.ph == Some(Kind::Str) {
            &f.ph_buf
        } else {
            b""
        };
        match ph {
            b"X" => {
                self.require(&f, "name", f.name, start, index);
                self.require(&f, "cat", f.cat, start, index);
                self.require(&f, "ts", f.ts, start, index);
                self.require(&f, "dur", f.dur, start, index);
                self.categories.add(cat);
            }
            b"i" | b"I" => {
                self.require(&f, "name", f.name, start, index);
                self.require(&f, "ts", f.ts, start, index);
                self.categories.add(cat);
            }
            b"M" => {
                self.require(&f, "name", f.name, start, index);
                self.require(&f, "args", f.args, start, index);
                if let Some(k) = f.args.filter(|&k| k != Kind::Object) {
                    self.error(
                        start,
                        at,
                        format!("\"args\" of an M event is {}, not an object", k.describe()),
                    );
                }
            }
            b"s" | b"f" => match f.id {
                Some(k @ (Kind::Num | Kind::Str)) => {
                    self.flow(ph == b"s", cat, k, &f.id_buf, start, index);
                }
                None => self.require(&f, "id", f.id, start, index),
                Some(_) => {} // reported above
            },
            _ => {}
        }
        let pid = kind(f.pid);
        if matches!(pid, Kind::Num | Kind::Str) {
            self.scratch.clear();
            push_id(&mut self.scratch, pid, &f.pid_buf);
            self.pids.add(&self.scratch);
            let tid = kind(f.tid);
            if matches!(tid, Kind::Num | Kind::Str) {
                push_id(&mut self.scratch, tid, &f.tid_buf);
                self.threads.add(&self.scratch);
            }
        }
        if let Some(ts) = ts {
            let end = ts + dur.unwrap_or(0.0).max(0.0);
            let r = &mut self.report;
            r.ts_min = Some(r.ts_min.map_or(ts, |m| m.min(ts)));
            r.ts_max = Some(r.ts_max.map_or(end, |m| m.max(end)));
        }
        self.f = f;
    }

    /// One end of a flow: pairs it with an open one of the other kind, or opens it.
    fn flow(&mut self, is_start: bool, cat: &[u8], k: Kind, id: &[u8], at: u64, index: u64) {
        let mut key = std::mem::take(&mut self.flow_key);
        key.clear();
        push_id(&mut key, Kind::Str, cat);
        push_id(&mut key, k, id);
        let step = if is_start { 1 } else { -1 };
        if let Some(open) = self.flows.get_mut(key.as_slice()) {
            if open.balance.signum() != step {
                self.report.flows_paired += 1;
            }
            open.balance += step;
            if open.balance == 0 {
                self.flows.remove(key.as_slice());
            }
        } else if self.flows.len() < MAX_DISTINCT {
            self.flows.insert(
                key.as_slice().into(),
                OpenFlow {
                    balance: step,
                    offset: at,
                    index,
                },
            );
        } else {
            self.flows_untracked += 1;
            self.report.summary_truncated = true;
        }
        self.flow_key = key;
    }

    /// Counts the flows left open and, when the walk was complete, reports them (in file
    /// order).
    fn unpaired_flows(&mut self, report_errors: bool) {
        let mut open: Vec<(Box<[u8]>, OpenFlow)> =
            std::mem::take(&mut self.flows).into_iter().collect();
        open.sort_by_key(|(_, o)| o.offset);
        let mut unpaired = self.flows_untracked;
        for (key, o) in &open {
            unpaired += o.balance.unsigned_abs();
            if !report_errors {
                continue;
            }
            let ((_, cat), rest) = split_id(key);
            let ((id_kind, id), _) = split_id(rest);
            let (have, missing) = if o.balance > 0 {
                ('s', 'f')
            } else {
                ('f', 's')
            };
            let extra = if o.balance.abs() > 1 {
                format!(" ({} of them)", o.balance.abs())
            } else {
                String::new()
            };
            self.error(
                o.offset,
                Some(o.index),
                format!(
                    "flow \"{have}\" (cat {}, id {}) has no matching \"{missing}\"{extra}",
                    show_id(Kind::Str, cat),
                    show_id(id_kind, id),
                ),
            );
        }
        if report_errors && self.flows_untracked > 0 {
            self.error(
                self.report.json_bytes,
                None,
                format!(
                    "{} flow events not tracked (more than {MAX_DISTINCT} open flows)",
                    self.flows_untracked
                ),
            );
        }
        self.report.flows_unpaired = unpaired;
    }
}

/// Splits one `push_id` record off the front: ((kind, text), rest).
fn split_id(bytes: &[u8]) -> ((Kind, &[u8]), &[u8]) {
    let kind = if bytes[0] == b's' {
        Kind::Str
    } else {
        Kind::Num
    };
    let len = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes")) as usize;
    ((kind, &bytes[5..5 + len]), &bytes[5 + len..])
}

/// Validates the trace read from `reader` (plain JSON or gzip, detected by the first byte).
///
/// `progress` is called with the decompressed bytes read so far about every
/// [`PROGRESS_EVERY`] bytes; an error from it stops the check and is returned.
///
/// An invalid trace is not an error: the report says so. Errors are I/O failures (with the
/// context "cannot read") and what `progress` returns.
pub(crate) fn check_reader<R: BufRead>(
    reader: R,
    options: CheckOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<CheckReport> {
    let source = Source::detect(reader).map_err(|e| Error::io("cannot read", e))?;
    let mut checker = Checker {
        inp: Input::new(source, progress, options.max_depth),
        f: Fields::default(),
        key: Vec::new(),
        scratch: Vec::new(),
        flow_key: Vec::new(),
        options,
        report: CheckReport::default(),
        phases: Counter::default(),
        categories: Counter::default(),
        pids: Counter::default(),
        threads: Counter::default(),
        flows: HashMap::new(),
        flows_untracked: 0,
    };
    let outcome = checker.document();
    let complete = match outcome {
        Ok(()) => true,
        Err(Stop::Fatal(e)) => return Err(e),
        Err(Stop::Read(e)) => return Err(Error::io("cannot read", e)),
        Err(Stop::Invalid(invalid)) => {
            checker.report.error_count += 1;
            checker.report.errors.push(invalid.to_string());
            false
        }
    };
    let inp = &checker.inp;
    checker.report.json_bytes = inp.base + inp.pos as u64;
    checker.report.gzip_members = inp.inner.members();
    checker.unpaired_flows(complete);
    let r = &mut checker.report;
    r.phases = checker.phases.sorted();
    r.categories = checker.categories.sorted();
    r.processes = checker.pids.map.len() as u64;
    r.threads = checker.threads.map.len() as u64;
    r.summary_truncated |= checker.phases.truncated
        || checker.categories.truncated
        || checker.pids.truncated
        || checker.threads.truncated;
    if r.gzip_members > 1 {
        r.warnings.push(format!(
            "gzip file of {} members: chrome://tracing, TensorBoard in a browser and \
             zlib.decompress(data, 31) read only the first (`kinetrace compress` rewrites it \
             as one member)",
            r.gzip_members
        ));
    }
    r.valid = r.error_count == 0;
    r.json_valid = complete;
    Ok(checker.report)
}

/// Opens `path` and checks it (see [`check_reader`]); I/O errors name the path.
pub(crate) fn check_path(
    path: &Path,
    options: CheckOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<CheckReport> {
    let file =
        File::open(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    check_reader(BufReader::with_capacity(BUF_SIZE, file), options, progress).map_err(|e| match e {
        Error::Io { context, source } => Error::Io {
            context: format!("{context} {}", path.display()),
            source,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;
    use std::io::{self, Read};

    fn no_progress() -> impl FnMut(u64) -> Result<()> {
        |_| Ok(())
    }

    fn check(data: &[u8]) -> CheckReport {
        check_reader(data, CheckOptions::default(), &mut no_progress()).unwrap()
    }

    /// A reader that hands out one byte per `read`, so every token crosses buffer ends.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    /// Checks `data` whole and one byte at a time; both must agree exactly.
    fn check_both(data: &[u8]) -> CheckReport {
        let whole = check(data);
        let trickled = check_reader(
            BufReader::with_capacity(1, Trickle(data)),
            CheckOptions::default(),
            &mut no_progress(),
        )
        .unwrap();
        assert_eq!(whole, trickled, "input: {}", String::from_utf8_lossy(data));
        whole
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::new(6));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    const GOOD: &str = r#"{
"schemaVersion": 1,
"displayTimeUnit": "ms",
"baseTimeNanoseconds": 1790857026000000000,
"traceEvents": [
{"ph":"M","name":"process_name","ts":10.5,"pid":7,"tid":0,"args":{"name":"python"}},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":7,"tid":7,"ts":10.5,"dur":800.25,"args":{"External id": 1, "shape": [[64, 64], []], "x": null, "y": true, "z": -1.5e-3}},
{"ph":"s","id":3,"pid":7,"tid":7,"ts":11,"cat":"fwdbwd","name":"fwdbwd"},
{"ph":"X","cat":"cpu_op","name":"na\u00efve \"q\" \\ \/ \ud83d\ude00 é ✓ 😀","pid":7,"tid":8,"ts":20,"dur":1},
{"ph":"f","id":3,"pid":7,"tid":8,"ts":900,"cat":"fwdbwd","name":"fwdbwd","bp":"e"},
{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":10.5,"dur":1000,"args":{"Op count": 0}},
{"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":1011.5}
],
"traceName": "C:\\dir\\trace.json"
}
"#;

    #[test]
    fn valid_trace_summary() {
        let r = check_both(GOOD.as_bytes());
        assert!(r.valid, "{:?}", r.errors);
        assert!(r.json_valid);
        assert_eq!(r.error_count, 0);
        assert_eq!(r.events, 7);
        assert_eq!(r.json_bytes, GOOD.len() as u64);
        assert_eq!(r.gzip_members, 0);
        assert_eq!(
            r.phases,
            vec![
                ("X".to_string(), 3),
                ("M".into(), 1),
                ("f".into(), 1),
                ("i".into(), 1),
                ("s".into(), 1)
            ]
        );
        assert_eq!(
            r.categories,
            vec![
                ("cpu_op".to_string(), 2),
                ("".into(), 1),
                ("Trace".into(), 1)
            ]
        );
        assert_eq!(r.processes, 3); // 7, "Spans", ""
        assert_eq!(r.threads, 5); // (7,0) (7,7) (7,8) ("Spans", ..) ("", "")
        assert_eq!(r.ts_min, Some(10.5));
        assert_eq!(r.ts_max, Some(1011.5));
        assert_eq!(r.flows_paired, 1);
        assert_eq!(r.flows_unpaired, 0);
        assert_eq!(
            r.top_level_keys,
            vec![
                "schemaVersion",
                "displayTimeUnit",
                "baseTimeNanoseconds",
                "traceEvents",
                "traceName"
            ]
        );
        assert_eq!(r.schema_version, Some(TopValue::Number("1".into())));
        assert_eq!(
            r.base_time_ns,
            Some(TopValue::Number("1790857026000000000".into()))
        );
        assert_eq!(r.display_time_unit, Some(TopValue::Str("ms".into())));
        assert_eq!(
            r.trace_name,
            Some(TopValue::Str(r"C:\dir\trace.json".into()))
        );
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn threads_are_pid_tid_pairs() {
        let doc = br#"{"traceEvents":[
            {"ph":"B","pid":1,"tid":1},{"ph":"B","pid":1,"tid":2},{"ph":"B","pid":2,"tid":1},
            {"ph":"B","pid":"1","tid":1},{"ph":"B","pid":1,"tid":1},{"ph":"B","pid":1}]}"#;
        let r = check_both(doc);
        assert!(r.valid, "{:?}", r.errors);
        assert_eq!(r.processes, 3);
        assert_eq!(r.threads, 4);
        assert_eq!(r.ts_min, None);
    }

    fn first_error(doc: &str) -> String {
        let r = check_both(doc.as_bytes());
        assert!(!r.valid, "accepted: {doc}");
        r.errors[0].clone()
    }

    fn wrap(value: &str) -> String {
        format!(r#"{{"traceEvents":[{{"ph":"C","name":"c","ts":0,"args":{{"v":{value}}}}}]}}"#)
    }

    #[test]
    fn rejects_non_json_numbers() {
        for (value, needle) in [
            ("NaN", "NaN is not valid JSON"),
            ("Infinity", "Infinity is not valid JSON"),
            ("-Infinity", "-Infinity is not valid JSON"),
            ("nan", "invalid literal"),
            ("01", "leading zeros"),
            ("-01", "leading zeros"),
            ("1.", "after the decimal point"),
            (".5", "expected a value"),
            ("1e", "in the exponent"),
            ("1e+", "in the exponent"),
            ("+1", "expected a value"),
            ("-", "expected a digit"),
            ("0x10", "expected ',' or '}'"),
            ("1.5.2", "expected ',' or '}'"),
        ] {
            let e = first_error(&wrap(value));
            assert!(e.contains(needle), "{value}: {e}");
            assert!(e.starts_with("offset "), "{e}");
            assert!(e.contains("(traceEvents[0])"), "{e}");
        }
    }

    #[test]
    fn nan_offset_points_at_it() {
        let doc = wrap("NaN");
        let at = doc.find("NaN").unwrap();
        assert_eq!(
            first_error(&doc),
            format!("offset {at} (traceEvents[0]): NaN is not valid JSON")
        );
    }

    #[test]
    fn rejects_trailing_commas() {
        for doc in [
            r#"{"traceEvents":[{"ph":"B"},]}"#,
            r#"{"traceEvents":[{"ph":"B",}]}"#,
            r#"{"traceEvents":[],}"#,
            &wrap("[1,2,]"),
            &wrap(r#"{"a":1,}"#),
            &wrap("[1,,2]"),
        ] {
            let e = first_error(doc);
            assert!(
                e.contains("trailing comma") || e.contains("expected a value"),
                "{doc}: {e}"
            );
        }
        let e = first_error(r#"{"traceEvents":[{"ph":"B"},{"ph":"B"},]}"#);
        assert_eq!(e, "offset 38 (traceEvents[1]): trailing comma before ']'");
    }

    #[test]
    fn rejects_bad_strings() {
        for (value, needle) in [
            (r#""C:\dir""#, r"invalid escape '\d'"),
            (r#""\x41""#, r"invalid escape '\x'"),
            (r#""\u12""#, "4 hex digits"),
            (r#""\u12G4""#, "4 hex digits"),
            ("\"a\nb\"", "raw control character U+000A"),
            ("\"a\tb\"", "raw control character U+0009"),
            ("\"a\u{0}b\"", "raw control character U+0000"),
            ("'single'", "expected a value"),
            ("\"unterminated", "unterminated string"),
        ] {
            let e = first_error(&wrap(value));
            assert!(e.contains(needle), "{value}: {e}");
        }
        // Lone surrogates are valid JSON text (json.dumps writes them).
        for value in [
            r#""\ud800""#,
            r#""\udc00x""#,
            r#""\ud800\u0041""#,
            r#""\ud800\n""#,
        ] {
            let r = check_both(wrap(value).as_bytes());
            assert!(r.valid, "{value}: {:?}", r.errors);
        }
    }

    #[test]
    fn rejects_bad_utf8() {
        for bad in [
            &b"\xff"[..],
            b"\xc0\xaf",         // overlong '/'
            b"\xe0\x80\xaf",     // overlong
            b"\xed\xa0\x80",     // encoded surrogate
            b"\xf4\x90\x80\x80", // above U+10FFFF
            b"\xc3",             // truncated before the quote
            b"\xe2\x9c",         // truncated
            b"\x80",             // lone continuation
        ] {
            let mut doc = br#"{"traceEvents":[{"ph":"B","name":""#.to_vec();
            doc.extend_from_slice(bad);
            doc.extend_from_slice(br#""}]}"#);
            let r = check_both(&doc);
            assert!(!r.valid, "{bad:?}");
            assert!(r.errors[0].contains("UTF-8"), "{bad:?}: {:?}", r.errors);
            assert!(r.errors[0].starts_with("offset 34 "), "{:?}", r.errors);
        }
        // Outside strings, non-ASCII is just an unexpected byte.
        assert!(first_error("{\"traceEvents\":[]}\u{e9}").contains("extra data"));
        // A byte order mark is refused.
        assert!(first_error("\u{feff}{\"traceEvents\":[]}").contains("byte order mark"));
    }

    #[test]
    fn every_truncation_is_invalid() {
        let doc = GOOD.trim_end().as_bytes();
        for cut in 0..doc.len() {
            let r = check(&doc[..cut]);
            assert!(!r.valid, "accepted a prefix of {cut} bytes");
            assert!(!r.json_valid);
            let last = r.errors.last().unwrap();
            assert!(last.starts_with("offset "), "{last}");
        }
        // One-byte reads give the same messages on a few cuts.
        for cut in [0, 1, 30, 150, 400, doc.len() - 1] {
            check_both(&doc[..cut]);
        }
    }

    #[test]
    fn truncation_names_the_end_and_the_event() {
        let doc = &GOOD.as_bytes()[..GOOD.find("aten::mm").unwrap() + 3];
        let r = check(doc);
        assert_eq!(
            r.errors,
            vec![format!(
                "offset {} (traceEvents[1]): unterminated string (end of file)",
                GOOD.find("aten::mm").unwrap() - 1
            )]
        );
        assert_eq!(r.json_bytes, doc.len() as u64);
    }

    #[test]
    fn structure_errors() {
        for (doc, needle) in [
            ("", "empty file"),
            ("   ", "empty file"),
            ("[]", "the top level is an array"),
            ("3", "the top level is a number"),
            ("{}", "no \"traceEvents\""),
            (
                r#"{"traceEvents":{}}"#,
                "\"traceEvents\" is an object, not an array",
            ),
            (
                r#"{"traceEvents":[]} {}"#,
                "extra data after the top-level value",
            ),
            (r#"{"traceEvents":[] "x":1}"#, "expected ',' or '}'"),
            (
                r#"{"traceEvents":[{"ph":"B"} {"ph":"B"}]}"#,
                "expected ',' or ']' after an event",
            ),
            (
                r#"{"traceEvents":[{"ph":"B" "x":1}]}"#,
                "expected ',' or '}' in an event",
            ),
            (r#"{"traceEvents":[{ph:"B"}]}"#, "expected a string key"),
            (r#"{"traceEvents":[{"ph" "B"}]}"#, "expected ':'"),
            (r#"{"traceEvents":[],"traceEvents":[]}"#, "duplicate key"),
            (r#"{"traceEvents":[1]}"#, "event is a number, not an object"),
            (r#"{"traceEvents":[{}]}"#, "event has no \"ph\""),
            (
                r#"{"traceEvents":[{"ph":1}]}"#,
                "\"ph\" is a number, not a string",
            ),
            (
                r#"{"traceEvents":[{"ph":"X","name":"a","cat":"c","ts":1}]}"#,
                "X event \"a\" has no \"dur\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"X","name":"a","cat":"c","dur":1}]}"#,
                "has no \"ts\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1}]}"#,
                "has no \"cat\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"X","cat":"c","ts":1,"dur":1}]}"#,
                "X event has no \"name\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"X","name":"a","cat":"c","ts":"1","dur":1}]}"#,
                "\"ts\" is a string, not a number",
            ),
            (
                r#"{"traceEvents":[{"ph":"X","name":"a","cat":"c","ts":1,"dur":1e999}]}"#,
                "\"dur\" is out of the range",
            ),
            (
                r#"{"traceEvents":[{"ph":"i","name":"a"}]}"#,
                "i event \"a\" has no \"ts\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"I","ts":1}]}"#,
                "I event has no \"name\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"M","name":"a"}]}"#,
                "has no \"args\"",
            ),
            (
                r#"{"traceEvents":[{"ph":"M","name":"a","args":1}]}"#,
                "not an object",
            ),
            (
                r#"{"traceEvents":[{"ph":"B","pid":[1]}]}"#,
                "\"pid\" is an array",
            ),
            (
                r#"{"traceEvents":[{"ph":"B","cat":1}]}"#,
                "\"cat\" is a number",
            ),
            (
                r#"{"traceEvents":[{"ph":"s","cat":"c"}]}"#,
                "s event has no \"id\"",
            ),
        ] {
            let e = first_error(doc);
            assert!(e.contains(needle), "{doc}: {e}");
        }
    }

    #[test]
    fn trace_errors_are_all_collected_and_capped() {
        let mut doc = String::from(r#"{"traceEvents":["#);
        for i in 0..200 {
            if i > 0 {
                doc.push(',');
            }
            doc.push_str(r#"{"ph":"X","name":"a","cat":"c","ts":1}"#);
        }
        doc.push_str("]}");
        let r = check(doc.as_bytes());
        assert!(!r.valid);
        assert!(r.json_valid);
        assert_eq!(r.error_count, 200);
        assert_eq!(r.errors.len(), 50);
        assert_eq!(r.events, 200);
        assert_eq!(
            r.errors[1],
            "offset 55 (traceEvents[1]): X event \"a\" has no \"dur\""
        );
        let few = check_reader(
            doc.as_bytes(),
            CheckOptions {
                max_errors: 3,
                ..CheckOptions::default()
            },
            &mut no_progress(),
        )
        .unwrap();
        assert_eq!(few.errors.len(), 3);
        assert_eq!(few.error_count, 200);
    }

    #[test]
    fn unpaired_flows() {
        let doc = r#"{"traceEvents":[
{"ph":"s","id":1,"cat":"ac2g","ts":1},
{"ph":"f","id":1,"cat":"ac2g","ts":2,"bp":"e"},
{"ph":"s","id":2,"cat":"ac2g","ts":3},
{"ph":"f","id":2,"cat":"fwdbwd","ts":4},
{"ph":"f","id":"9","cat":"ac2g","ts":5},
{"ph":"s","id":9,"cat":"ac2g","ts":6},
{"ph":"f","id":9,"cat":"ac2g","ts":0},
{"ph":"t","id":2,"cat":"ac2g","ts":3}
]}"#;
        let r = check_both(doc.as_bytes());
        assert!(!r.valid);
        assert!(r.json_valid);
        assert_eq!(r.flows_paired, 2);
        assert_eq!(r.flows_unpaired, 3);
        let at = |needle: &str| doc.find(needle).unwrap();
        assert_eq!(
            r.errors,
            vec![
                format!(
                    "offset {} (traceEvents[2]): flow \"s\" (cat \"ac2g\", id 2) has no matching \"f\"",
                    at(r#"{"ph":"s","id":2"#)
                ),
                format!(
                    "offset {} (traceEvents[3]): flow \"f\" (cat \"fwdbwd\", id 2) has no matching \"s\"",
                    at(r#"{"ph":"f","id":2"#)
                ),
                format!(
                    "offset {} (traceEvents[4]): flow \"f\" (cat \"ac2g\", id \"9\") has no matching \"s\"",
                    at(r#"{"ph":"f","id":"9""#)
                ),
            ]
        );
    }

    #[test]
    fn flows_are_not_reported_after_a_syntax_error() {
        let r = check(br#"{"traceEvents":[{"ph":"s","id":1,"cat":"c","ts":1},"#);
        assert_eq!(r.error_count, 1);
        assert_eq!(r.flows_unpaired, 1);
        assert!(r.errors[0].contains("unexpected end of file"));
    }

    #[test]
    fn depth_limit() {
        let deep = |n: usize| wrap(&format!("{}{}", "[".repeat(n), "]".repeat(n)));
        assert!(check(deep(500).as_bytes()).valid);
        let e = first_error(&deep(600));
        assert!(e.contains("nesting deeper than 512"), "{e}");
        // The skipper is not recursive: a deep document cannot overflow the stack.
        let r = check_reader(
            deep(200_000).as_bytes(),
            CheckOptions {
                max_depth: usize::MAX,
                ..CheckOptions::default()
            },
            &mut no_progress(),
        )
        .unwrap();
        assert!(r.valid);
    }

    /// Accepts exactly what serde_json accepts (serde_json refuses lone surrogates, which
    /// RFC 8259's grammar allows, and nests at most 128 deep: both are kept out).
    #[test]
    fn agrees_with_serde_json() {
        let mut samples: Vec<String> = [
            "0",
            "-0",
            "1.5e10",
            "1E-2",
            "-0.0e+0",
            "123456789012345678901234567890",
            "true",
            "false",
            "null",
            "\"\"",
            "[]",
            "{}",
            "[[]]",
            r#"{"a":{"b":[1,{"c":null}]}}"#,
            r#""\"\\\/\b\f\n\r\t\u0041\u00e9\uD83D\uDE00""#,
            " [ 1 , 2 ] ",
            "\t{\r\n}\n",
            "[1 2]",
            "{\"a\" 1}",
            "{\"a\":}",
            "{1:2}",
            "[",
            "]",
            "{",
            "}",
            "tru",
            "nul",
            "[true,]",
            "\"\\u00\"",
            "1e5.5",
            "--1",
            "1-",
            "[.1]",
            "[1.e1]",
            "\"\u{7f}\"",
            "\"\u{1f}\"",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Mutations of a valid document.
        let base = wrap(r#"{"k":[1.25e-3,-7,"s\u00e9\n",true,null,{"x":[]}]}"#);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"{}[],:\"\\ 0123456789-+.eEtrufalsn\n/u";
        for _ in 0..3000 {
            let mut b = base.clone().into_bytes();
            for _ in 0..1 + rnd() % 3 {
                let i = (rnd() % b.len() as u64) as usize;
                match rnd() % 3 {
                    0 => {
                        b.remove(i);
                    }
                    1 => b.insert(i, alphabet[(rnd() % alphabet.len() as u64) as usize]),
                    _ => b[i] = alphabet[(rnd() % alphabet.len() as u64) as usize],
                }
            }
            if let Ok(s) = String::from_utf8(b) {
                samples.push(s);
            }
        }
        for sample in &samples {
            let ours = check_both(sample.as_bytes()).json_valid;
            let serde = serde_json::from_str::<serde_json::Value>(sample);
            if let Err(e) = &serde {
                if e.to_string().contains("surrogate") || e.to_string().contains("recursion") {
                    continue;
                }
            }
            assert_eq!(ours, serde.is_ok(), "{sample:?}: {serde:?}");
        }
    }

    #[test]
    fn gzip_single_and_multi_member() {
        let doc = GOOD.as_bytes();
        let plain = check(doc);
        let one = check(&gz(doc));
        assert_eq!(one.gzip_members, 1);
        assert!(one.valid && one.warnings.is_empty());
        let cut = GOOD.find("aten::mm").unwrap();
        let mut two = gz(&doc[..cut]);
        two.extend_from_slice(&gz(&doc[cut..]));
        let two = check_both(&two);
        assert!(two.valid, "{:?}", two.errors);
        assert_eq!(two.gzip_members, 2);
        assert_eq!(two.warnings.len(), 1);
        assert!(two.warnings[0].contains("2 members"));
        // Same summary as the plain text, apart from the container.
        let strip = |mut r: CheckReport| {
            r.gzip_members = 0;
            r.warnings.clear();
            r
        };
        assert_eq!(strip(one), plain);
        assert_eq!(strip(two), plain);
        // An empty member in the middle is fine too.
        let mut three = gz(&doc[..cut]);
        three.extend_from_slice(&gz(b""));
        three.extend_from_slice(&gz(&doc[cut..]));
        assert_eq!(check(&three).gzip_members, 3);
        assert!(check(&three).valid);
    }

    #[test]
    fn matches_multi_gz_decoder() {
        let doc = GOOD.as_bytes();
        let mut blob = Vec::new();
        for piece in doc.chunks(97) {
            blob.extend_from_slice(&gz(piece));
        }
        let mut ours = Vec::new();
        let mut src = Source::detect(&blob[..]).unwrap();
        src.read_to_end(&mut ours).unwrap();
        let mut theirs = Vec::new();
        flate2::read::MultiGzDecoder::new(&blob[..])
            .read_to_end(&mut theirs)
            .unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours, doc);
        assert_eq!(src.members() as usize, doc.chunks(97).count());
    }

    #[test]
    fn corrupt_gzip_is_invalid_not_an_error() {
        let blob = gz(GOOD.as_bytes());
        // Truncated: everywhere past the header.
        for cut in [12, blob.len() / 2, blob.len() - 8, blob.len() - 1] {
            let r = check(&blob[..cut]);
            assert!(!r.valid, "cut {cut}");
            let last = r.errors.last().unwrap();
            assert!(
                last.contains("corrupt gzip data") || last.contains("unexpected end of file"),
                "{cut}: {last}"
            );
        }
        // Flipped bit in the data or the CRC.
        let mut bad = blob.clone();
        let n = bad.len();
        bad[n - 6] ^= 1;
        let r = check(&bad);
        assert!(!r.valid);
        assert!(
            r.errors.last().unwrap().contains("corrupt gzip data"),
            "{:?}",
            r.errors
        );
        // Trailing garbage / zero padding after the member.
        let mut trailing = blob.clone();
        trailing.extend_from_slice(b"garbage");
        let r = check(&trailing);
        assert!(r
            .errors
            .last()
            .unwrap()
            .contains("trailing data after gzip member 1"));
        let mut zeros = blob;
        zeros.extend_from_slice(&[0; 16]);
        let r = check(&zeros);
        assert!(r.errors.last().unwrap().contains("zero padding"));
    }

    #[test]
    fn progress_is_called_and_can_stop() {
        let mut doc = String::from(r#"{"traceEvents":["#);
        let event =
            r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1.5,"dur":2},"#;
        while doc.len() < 3 * PROGRESS_EVERY as usize {
            doc.push_str(event);
        }
        doc.push_str(r#"{"ph":"B"}]}"#);
        let mut calls = Vec::new();
        let r = check_reader(doc.as_bytes(), CheckOptions::default(), &mut |n| {
            calls.push(n);
            Ok(())
        })
        .unwrap();
        assert!(r.valid);
        assert!(calls.len() >= 2, "{calls:?}");
        let stopped = check_reader(doc.as_bytes(), CheckOptions::default(), &mut |_| {
            Err(Error::Interrupted)
        });
        assert!(matches!(stopped, Err(Error::Interrupted)));
    }

    use crate::testing::scratch;

    #[test]
    fn check_path_errors_name_the_path() {
        let dir = scratch("paths");
        let missing = dir.join("missing.json");
        match check_path(&missing, CheckOptions::default(), &mut no_progress()) {
            Err(Error::Io { context, source }) => {
                assert!(context.contains("missing.json"), "{context}");
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        match check_path(&dir, CheckOptions::default(), &mut no_progress()) {
            Err(Error::Io { context, source }) => {
                assert!(context.contains("cannot read"), "{context}");
                assert_eq!(source.raw_os_error(), Some(libc::EISDIR));
            }
            other => panic!("{other:?}"),
        }
    }

    /// `cargo test --release check::tests::throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn throughput() {
        let event = r#"{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":1234,"tid":1234,"ts":5172265116409.504,"dur":813.524,"args":{"External id": 123,"Record function id": 0, "Sequence number": 77, "Fwd thread id": 0, "Ev Idx": 123, "Input Dims": [[64, 128], [256, 128], [256]], "Input type": ["float", "float", "float"]}},
{"ph":"s","id":3,"pid":1234,"tid":1234,"ts":5172265116435.193,"cat":"fwdbwd","name":"fwdbwd"},
{"ph":"f","id":3,"pid":1234,"tid":1235,"ts":5172265116435.193,"cat":"fwdbwd","name":"fwdbwd","bp":"e"},
"#;
        let mut doc = String::from("{\"schemaVersion\": 1,\n\"traceEvents\": [\n");
        while doc.len() < 100_000_000 {
            doc.push_str(event);
        }
        doc.push_str("{\"ph\":\"B\"}\n],\n\"traceName\": \"x\"\n}\n");
        let t = std::time::Instant::now();
        let r = check(doc.as_bytes());
        let dt = t.elapsed().as_secs_f64();
        assert!(r.valid, "{:?}", r.errors);
        println!(
            "check: {:.1} MB in {dt:.3} s = {:.0} MB/s ({} events)",
            doc.len() as f64 / 1e6,
            doc.len() as f64 / 1e6 / dt,
            r.events
        );
    }
}
