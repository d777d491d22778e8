//! `kinetrace check`: what viewers will do with a trace file, as *findings* at two levels
//! plus a summary.
//!
//! - An *error* means a viewer cannot load the file: it is not strict JSON (RFC 8259: no
//!   NaN/Infinity, no trailing commas, only the standard escapes, valid UTF-8, no raw
//!   control characters), it ends early (a truncated file), its gzip data is corrupt or
//!   truncated, it is not a trace (neither a top-level object with a `traceEvents` array
//!   nor a top-level array of events), or an element of `traceEvents` is not an object.
//! - A *warning* means it loads but a viewer drops or misplaces something: flow ends without
//!   their other end (no arrow), `X` events Perfetto drops for overlapping on their thread
//!   (the rule of [`crate::tools::overlap`], counted per thread), `X` events with a negative or no
//!   `dur` and events with no `ts` (Perfetto drops them), events without a string `ph`
//!   (ignored), numbers beyond 2^53 in `ts`, `dur`, `pid`, `tid` or `id` (every JSON viewer
//!   reads them rounded), metadata events naming one process or thread twice with different
//!   names (one name is shown), a gzip file of several members (some readers stop after the
//!   first), a top level that is the array of events itself (the JSON Array Format:
//!   chrome://tracing and Perfetto load it, tools that read `traceEvents` find nothing), and
//!   such an array without its closing `]` (the format allows it, and viewers load it).
//!
//! Each finding is counted, with its first examples in file order (offset in the
//! decompressed JSON, index in `traceEvents`). The *summary* counts events per phase and
//! category, processes, threads, the time span and flows.
//!
//! Reading is [`crate::read::events`]'s: streamed, a plain `.json` in parallel chunks. A syntax
//! error ends the reading (there is no reliable way to resynchronise); what was read before
//! it is still reported, except unpaired flows (their other ends may lie beyond). Memory:
//! the reading's chunks in flight, the counting maps (at most [`MAX_DISTINCT`] keys each:
//! phases, categories, processes, threads, open flows, process and thread names), and the
//! overlap rule's buffer and stacks (see [`crate::tools::overlap`]).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::error::{FormatKind, Result};
use crate::json::lexer::{Input, Kind};
use crate::json::object::{member, Duplicates::First};
use crate::json::render::quoted;
use crate::read::events::{
    scan_trace, tagged_text, Event, Form, NotAnEvent, ReadEnd, ReadOptions, Visitor,
};
use crate::read::members::Source;
use crate::tools::overlap::{self, Fed, Overlaps};
use crate::tools::report::{Counted, Place, ReportKind, Tally};

/// Most distinct keys kept in each counting map. Past it, new values are not counted and
/// the summary is marked truncated.
pub(crate) const MAX_DISTINCT: usize = 1 << 20;

/// Most top-level keys listed in the summary.
const MAX_TOP_KEYS: usize = 64;

/// Most threads named in the overlap finding.
const WORST_TRACKS: usize = 5;

/// 2^53: above it, not every integer is a double.
const EXACT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// Settings of [`check_path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckOptions {
    /// Examples kept per finding.
    pub(crate) examples: usize,
    /// How the file is read.
    pub(crate) read: ReadOptions,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            examples: 5,
            read: ReadOptions::default(),
        }
    }
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FindingKind {
    // Errors.
    Syntax,
    Truncated,
    Gzip,
    NotATrace,
    NotAnObject,
    // Warnings.
    UnpairedFlows,
    OverlappingSlices,
    NegativeDurations,
    MissingDurations,
    MissingTimestamps,
    NoPhase,
    ImpreciseNumbers,
    ConflictingNames,
    GzipMembers,
    ArrayForm,
    UnclosedArray,
}

impl FindingKind {
    /// The name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FindingKind::Syntax => "syntax",
            FindingKind::Truncated => "truncated",
            FindingKind::Gzip => "gzip",
            FindingKind::NotATrace => "not_a_trace",
            FindingKind::NotAnObject => "not_an_object",
            FindingKind::UnpairedFlows => "unpaired_flows",
            FindingKind::OverlappingSlices => "overlapping_slices",
            FindingKind::NegativeDurations => "negative_durations",
            FindingKind::MissingDurations => "missing_durations",
            FindingKind::MissingTimestamps => "missing_timestamps",
            FindingKind::NoPhase => "no_phase",
            FindingKind::ImpreciseNumbers => "imprecise_numbers",
            FindingKind::ConflictingNames => "conflicting_names",
            FindingKind::GzipMembers => "gzip_members",
            FindingKind::ArrayForm => "array_form",
            FindingKind::UnclosedArray => "unclosed_array",
        }
    }

    pub(crate) fn is_error(self) -> bool {
        self < FindingKind::UnpairedFlows
    }
}

impl ReportKind for FindingKind {
    /// What `count` of them mean for a viewer.
    fn describe(self, count: u64) -> String {
        // "1 flow event", "1,862 flow events" (grouped as the Python side prints counts).
        let n = |one: &str| {
            if count == 1 {
                format!("1 {one}")
            } else {
                format!("{} {one}s", grouped(count))
            }
        };
        match self {
            FindingKind::Syntax => "not strict JSON: viewers refuse the file".into(),
            FindingKind::Truncated => "the JSON text ends early (a truncated file): viewers \
                refuse it; `kinetrace repair` keeps every complete event"
                .into(),
            FindingKind::Gzip => "the gzip data is corrupt or truncated: viewers refuse the \
                file; `kinetrace repair` keeps what decompresses"
                .into(),
            FindingKind::NotATrace => "not a trace: viewers expect a JSON object with a \
                \"traceEvents\" array, or an array of events"
                .into(),
            FindingKind::NotAnObject => format!(
                "{} of \"traceEvents\" not an object: viewers refuse the file",
                n("element")
            ),
            FindingKind::UnpairedFlows => format!(
                "{} without their other end: viewers draw no arrow for them",
                n("flow event")
            ),
            FindingKind::OverlappingSlices => format!(
                "{} Perfetto drops: each starts inside another slice on its thread and ends \
                 after it (Perfetto's slice_drop_overlapping_complete_event; \
                 `kinetrace repair --untangle` moves them to lanes of their own)",
                n("X event")
            ),
            FindingKind::NegativeDurations => format!(
                "{} with a negative \"dur\": Perfetto drops them",
                n("X event")
            ),
            FindingKind::MissingDurations => format!(
                "{} without a numeric \"dur\": Perfetto drops them",
                n("X event")
            ),
            FindingKind::MissingTimestamps => format!(
                "{} without a numeric \"ts\": Perfetto drops them",
                n("event")
            ),
            FindingKind::NoPhase => format!(
                "{} without a string \"ph\": viewers ignore them",
                n("event")
            ),
            FindingKind::ImpreciseNumbers => format!(
                "{} in ts/dur/pid/tid/id beyond 2^53: every JSON viewer reads them rounded",
                n("number")
            ),
            FindingKind::ConflictingNames => format!(
                "{} naming a process or thread already named otherwise: viewers show one of \
                 the names",
                n("metadata event")
            ),
            FindingKind::GzipMembers => format!(
                "gzip file of {} members: chrome://tracing, TensorBoard in a browser and \
                 zlib.decompress(data, 31) read only the first (`kinetrace compress` or \
                 `kinetrace repair` rewrite it as one member)",
                grouped(count)
            ),
            FindingKind::ArrayForm => "the top level is the array of events itself (the \
                Trace Event Format's JSON Array Format): chrome://tracing and Perfetto load \
                it, but tools that read \"traceEvents\" (HTA, TensorBoard's plugin) find no \
                events (`kinetrace repair` writes it as {\"traceEvents\": [...]})"
                .into(),
            FindingKind::UnclosedArray => "the array of events has no closing ']': the JSON \
                Array Format allows it (a writer that stopped early leaves it off) and \
                chrome://tracing and Perfetto load it, but strict JSON readers refuse it \
                (`kinetrace repair` closes it)"
                .into(),
        }
    }
}

/// `n` with a comma every three digits: `1,862`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// One thread's share of the overlap finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TrackCount {
    /// `pid` and `tid` as JSON text (`tid` empty when absent).
    pub(crate) pid: String,
    pub(crate) tid: String,
    /// The thread's name from its metadata, if any.
    pub(crate) name: Option<String>,
    pub(crate) dropped: u64,
}

/// What the overlap finding says more: the worst threads and a caveat on the count (empty
/// for every other finding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tracks {
    /// The threads with most dropped events, most first.
    pub(crate) tracks: Vec<TrackCount>,
    /// Threads with dropped events in all.
    pub(crate) track_count: u64,
    /// A caveat on the count.
    pub(crate) note: Option<String>,
}

/// A kind of problem, counted, with its first examples in file order (each at an offset).
pub(crate) type Finding = Counted<FindingKind, Tracks>;

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

/// The summary: what the trace holds (as far as it could be read).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Summary {
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
    /// Distinct `pid` values, and distinct (`pid`, `tid`) pairs.
    pub(crate) processes: u64,
    pub(crate) threads: u64,
    /// Smallest `ts`, largest `ts + dur` (or `ts`), in µs.
    pub(crate) ts_min: Option<f64>,
    pub(crate) ts_max: Option<f64>,
    /// `s`/`f` pairs matched by (`cat`, `id`), and flow ends left without their other end.
    pub(crate) flows_paired: u64,
    pub(crate) flows_unpaired: u64,
    /// Some counting map reached [`MAX_DISTINCT`]: counts are lower bounds.
    pub(crate) summary_truncated: bool,
}

/// What `check` found.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CheckReport {
    /// The whole file was read (no error stopped the reading).
    pub(crate) complete: bool,
    /// Errors (the file does not load), most important first.
    pub(crate) errors: Vec<Finding>,
    /// Warnings (it loads, but a viewer drops or misplaces something).
    pub(crate) warnings: Vec<Finding>,
    pub(crate) summary: Summary,
    /// The form of the top level (as far as it was read).
    pub(crate) form: Form,
}

impl CheckReport {
    /// No error: viewers load the file.
    pub(crate) fn valid(&self) -> bool {
        self.errors.is_empty()
    }

    /// The finding of `kind`, if any.
    #[cfg(test)]
    pub(crate) fn finding(&self, kind: FindingKind) -> Option<&Finding> {
        self.errors
            .iter()
            .chain(&self.warnings)
            .find(|f| f.kind == kind)
    }
}

/// Counts per distinct byte string, capped at [`MAX_DISTINCT`] keys; the first few kept in a
/// short list, as a trace has few phases and categories.
#[derive(Default)]
struct Counter {
    few: Vec<(Box<[u8]>, u64)>,
    map: HashMap<Box<[u8]>, u64>,
    truncated: bool,
}

impl Counter {
    const FEW: usize = 16;

    #[inline]
    fn add(&mut self, key: &[u8]) {
        if let Some(slot) = self.few.iter_mut().find(|(k, _)| **k == *key) {
            slot.1 += 1;
        } else if self.few.len() < Self::FEW {
            self.few.push((key.into(), 1));
        } else if let Some(n) = self.map.get_mut(key) {
            *n += 1;
        } else if self.map.len() < MAX_DISTINCT {
            self.map.insert(key.into(), 1);
        } else {
            self.truncated = true;
        }
    }

    fn sorted(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .few
            .iter()
            .map(|(k, n)| (k, *n))
            .chain(self.map.iter().map(|(k, &n)| (k, n)))
            .map(|(k, n)| (String::from_utf8_lossy(k).into_owned(), n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

/// Distinct byte strings, capped at [`MAX_DISTINCT`], skipping a repeat of the last one.
#[derive(Default)]
struct Distinct {
    set: HashSet<Box<[u8]>>,
    last: Vec<u8>,
    truncated: bool,
}

impl Distinct {
    #[inline]
    fn add(&mut self, key: &[u8]) {
        if self.last == key {
            return;
        }
        self.last.clear();
        self.last.extend_from_slice(key);
        if !self.set.contains(key) {
            if self.set.len() < MAX_DISTINCT {
                self.set.insert(key.into());
            } else {
                self.truncated = true;
            }
        }
    }
}

/// A flow end without its other end yet.
struct OpenFlow {
    /// Starts minus finishes seen.
    balance: i64,
    /// Where the first unmatched one is.
    offset: u64,
    index: u64,
}

/// The first name a metadata event gave a process or thread.
struct Named {
    name: Box<[u8]>,
    offset: u64,
    index: u64,
}

/// A type-tagged `pid`/`tid` as JSON text, empty where absent (names of threads in reports).
fn show_tagged(tagged: &[u8]) -> String {
    tagged_text(tagged).unwrap_or_default()
}

/// A name for messages: `X event "aten::mm"`.
fn describe(ev: &Event<'_>) -> String {
    let ph = String::from_utf8_lossy(ev.ph);
    if ev.name.is_empty() {
        return format!("{ph} event");
    }
    let mut name = String::from_utf8_lossy(ev.name).into_owned();
    if name.chars().count() > 60 {
        name = name.chars().take(57).collect::<String>() + "...";
    }
    format!("{ph} event {}", quoted(&name))
}

/// A time in ns as µs for messages.
fn us(ns: i64) -> String {
    let mut out = Vec::new();
    crate::json::render::push_micros(&mut out, i128::from(ns));
    String::from_utf8_lossy(&out).into_owned()
}

/// The check's visitor over the events.
struct Checker {
    summary: Summary,
    phases: Counter,
    categories: Counter,
    pids: Distinct,
    threads: Distinct,
    flows: HashMap<Box<[u8]>, OpenFlow>,
    flows_untracked: u64,
    overlaps: Overlaps,
    names: HashMap<Box<[u8]>, Named>,
    names_truncated: bool,
    tallies: Tally<FindingKind>,
}

impl Checker {
    fn new(examples: usize) -> Self {
        Checker {
            summary: Summary::default(),
            phases: Counter::default(),
            categories: Counter::default(),
            pids: Distinct::default(),
            threads: Distinct::default(),
            flows: HashMap::new(),
            flows_untracked: 0,
            overlaps: Overlaps::new(examples, false),
            names: HashMap::new(),
            names_truncated: false,
            tallies: Tally::new(examples),
        }
    }

    fn tally(
        &mut self,
        kind: FindingKind,
        offset: u64,
        index: Option<u64>,
        message: impl FnOnce() -> String,
    ) {
        self.tallies.add(kind, 1, offset, index, message);
    }

    /// A number beyond 2^53 in field `field`.
    fn imprecise(&mut self, ev: &Event<'_>, field: &str, text: &[u8]) {
        let field = field.to_string();
        let text = String::from_utf8_lossy(text).into_owned();
        self.tally(
            FindingKind::ImpreciseNumbers,
            ev.offset,
            Some(ev.index),
            || format!("\"{field}\" {text} is beyond 2^53: viewers read it rounded"),
        );
    }

    /// Checks a `pid`/`tid`/`id` number (type-tagged) for precision.
    #[inline]
    fn check_id(&mut self, ev: &Event<'_>, field: &str, tagged: &[u8]) {
        // 2^53 has 16 digits: shorter numbers are exact.
        if tagged.len() < 17 || tagged[0] != b'n' {
            return;
        }
        let text = &tagged[1..];
        let beyond = match std::str::from_utf8(text) {
            // An integer exactly (its double would round it down to 2^53).
            Ok(t) if !t.contains(['.', 'e', 'E']) => t
                .parse::<i128>()
                .map_or(true, |n| n.unsigned_abs() > 1 << 53),
            Ok(t) => t.parse::<f64>().is_ok_and(|v| v.abs() > EXACT_LIMIT),
            Err(_) => false,
        };
        if beyond {
            self.imprecise(ev, field, text);
        }
    }

    fn metadata(&mut self, ev: &Event<'_>) {
        let thread = match ev.name {
            b"process_name" => false,
            b"thread_name" => true,
            _ => return,
        };
        let Some(name) =
            member(ev.raw, b"args", First).and_then(|args| member(args, b"name", First))
        else {
            return;
        };
        let mut key = Vec::with_capacity(ev.thread_key.len() + 1);
        key.push(u8::from(thread));
        key.extend_from_slice(if thread { ev.thread_key } else { ev.pid_key });
        match self.names.get(key.as_slice()) {
            Some(first) if *first.name != *name => {
                let what = if thread {
                    let tid = &ev.thread_key[ev.pid_key.len() + 1..];
                    format!(
                        "thread_name of pid {} tid {}",
                        show_tagged(ev.pid_key),
                        show_tagged(tid)
                    )
                } else {
                    format!("process_name of pid {}", show_tagged(ev.pid_key))
                };
                let (this, other) = (
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(&first.name).into_owned(),
                );
                let (at, index) = (first.offset, first.index);
                self.tally(
                    FindingKind::ConflictingNames,
                    ev.offset,
                    Some(ev.index),
                    || {
                        format!(
                            "{what} is {this} here, {other} at offset {at} (traceEvents[{index}])"
                        )
                    },
                );
            }
            Some(_) => {}
            None if self.names.len() < MAX_DISTINCT => {
                self.names.insert(
                    key.into(),
                    Named {
                        name: name.into(),
                        offset: ev.offset,
                        index: ev.index,
                    },
                );
            }
            None => self.names_truncated = true,
        }
    }

    /// One end of a flow: pairs it with an open one of the other kind, or opens it.
    fn flow(&mut self, is_start: bool, key: &[u8], ev: &Event<'_>) {
        let step = if is_start { 1 } else { -1 };
        if let Some(open) = self.flows.get_mut(key) {
            if open.balance.signum() != step {
                self.summary.flows_paired += 1;
            }
            open.balance += step;
            if open.balance == 0 {
                self.flows.remove(key);
            }
        } else if self.flows.len() < MAX_DISTINCT {
            self.flows.insert(
                key.into(),
                OpenFlow {
                    balance: step,
                    offset: ev.offset,
                    index: ev.index,
                },
            );
        } else {
            self.flows_untracked += 1;
            self.summary.summary_truncated = true;
        }
    }

    /// The unpaired flows (in file order), once every event is read.
    fn unpaired_flows(&mut self, complete: bool) {
        let mut open: Vec<(Box<[u8]>, OpenFlow)> =
            std::mem::take(&mut self.flows).into_iter().collect();
        self.summary.flows_unpaired = self.flows_untracked
            + open
                .iter()
                .map(|(_, o)| o.balance.unsigned_abs())
                .sum::<u64>();
        if !complete {
            return;
        }
        open.sort_by_key(|(_, o)| o.offset);
        for (key, o) in &open {
            let (cat, id) = split_flow_key(key);
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
            let n = o.balance.unsigned_abs();
            let kind = FindingKind::UnpairedFlows;
            self.tallies.add(kind, n, o.offset, Some(o.index), || {
                format!("flow \"{have}\" (cat {cat}, id {id}) has no \"{missing}\"{extra}")
            });
        }
        if self.flows_untracked > 0 {
            let untracked = self.flows_untracked;
            self.tallies.count(FindingKind::UnpairedFlows, untracked);
        }
    }
}

/// (`cat` as JSON, `id` as written) of a flow key (see [`crate::read::events`]).
fn split_flow_key(key: &[u8]) -> (String, String) {
    let len = u32::from_le_bytes(key[..4].try_into().expect("4 bytes")) as usize;
    let cat = &key[4..4 + len];
    let id = &key[4 + len..];
    let mut cat_json = Vec::new();
    crate::json::render::push_json_string(&mut cat_json, cat);
    (
        String::from_utf8_lossy(&cat_json).into_owned(),
        show_tagged(id),
    )
}

impl Visitor for Checker {
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        let name = String::from_utf8_lossy(key).into_owned();
        let keys = &mut self.summary.top_level_keys;
        if after_events && !keys.iter().any(|k| k == "traceEvents") && keys.len() < MAX_TOP_KEYS {
            keys.push("traceEvents".into());
        }
        if keys.len() < MAX_TOP_KEYS {
            keys.push(name);
        }
        let slot = match key {
            b"schemaVersion" => &mut self.summary.schema_version,
            b"traceName" => &mut self.summary.trace_name,
            b"baseTimeNanoseconds" => &mut self.summary.base_time_ns,
            b"displayTimeUnit" => &mut self.summary.display_time_unit,
            _ => return Ok(()),
        };
        *slot = top_value(raw);
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.summary.events += 1;
        self.phases.add(ev.ph);
        let ph = ev.ph;
        let is_x = ph == b"X";
        if is_x || ph == b"i" || ph == b"I" {
            self.categories.add(ev.cat.unwrap_or("").as_bytes());
        }
        if !ev.pid_key.is_empty() {
            self.pids.add(ev.pid_key);
            if ev.thread_key.len() > ev.pid_key.len() + 1 {
                self.threads.add(ev.thread_key);
                self.check_id(ev, "tid", &ev.thread_key[ev.pid_key.len() + 1..]);
            }
            self.check_id(ev, "pid", ev.pid_key);
        }
        match ev.ts {
            Some(ts) => {
                let end = ts + ev.dur.unwrap_or(0.0).max(0.0);
                let s = &mut self.summary;
                s.ts_min = Some(s.ts_min.map_or(ts, |m| m.min(ts)));
                s.ts_max = Some(s.ts_max.map_or(end, |m| m.max(end)));
                if ts.abs() > EXACT_LIMIT {
                    self.imprecise(ev, "ts", ts.to_string().as_bytes());
                }
            }
            None if ph != b"M" => {
                self.tally(
                    FindingKind::MissingTimestamps,
                    ev.offset,
                    Some(ev.index),
                    || format!("{} has no numeric \"ts\"", describe(ev)),
                );
            }
            None => {}
        }
        if let Some(dur) = ev.dur {
            if dur.abs() > EXACT_LIMIT {
                self.imprecise(ev, "dur", dur.to_string().as_bytes());
            }
        }
        if is_x {
            match self.overlaps.feed(ev) {
                Fed::NoDuration => self.tally(
                    FindingKind::MissingDurations,
                    ev.offset,
                    Some(ev.index),
                    || format!("{} has no numeric \"dur\"", describe(ev)),
                ),
                Fed::NegativeDuration(dur) => self.tally(
                    FindingKind::NegativeDurations,
                    ev.offset,
                    Some(ev.index),
                    || format!("{} has \"dur\" {dur}", describe(ev)),
                ),
                Fed::Slice | Fed::Other => {}
            }
        } else if let Some(key) = ev.flow_key {
            let id = &key[4 + u32::from_le_bytes(key[..4].try_into().expect("4 bytes")) as usize..];
            self.check_id(ev, "id", id);
            match ph {
                b"s" => self.flow(true, key, ev),
                b"f" => self.flow(false, key, ev),
                _ => {}
            }
        } else if ph == b"M" {
            self.metadata(ev);
        } else {
            // `B` and `E` (the rule tells which events are its slices).
            self.overlaps.feed(ev);
        }
        Ok(())
    }

    fn lenient(&self) -> bool {
        true
    }

    fn not_an_event(&mut self, offset: u64, index: u64, what: NotAnEvent) -> Result<()> {
        self.summary.events += 1;
        match what {
            NotAnEvent::NotObject(k) => {
                self.tally(FindingKind::NotAnObject, offset, Some(index), || {
                    format!("the event is {}, not an object", k.describe())
                })
            }
            NotAnEvent::NoPhase(k) => self.tally(FindingKind::NoPhase, offset, Some(index), || {
                if k == Kind::Missing {
                    "the event has no \"ph\"".to_string()
                } else {
                    format!("\"ph\" is {}, not a string", k.describe())
                }
            }),
        }
        Ok(())
    }
}

/// The value of a `"key": value` top-level member, for the summary.
fn top_value(raw: &[u8]) -> Option<TopValue> {
    let mut no_progress = |_| Ok(());
    let source = Source::detect(raw).ok()?;
    let mut inp = Input::new(source, &mut no_progress, 512);
    let b = inp.skip_ws().ok()??;
    let mut key = Vec::new();
    inp.key(b, &mut key).ok()?;
    let mut text = Vec::new();
    let kind = inp.value(1, Some(&mut text)).ok()?;
    let text = String::from_utf8_lossy(&text).into_owned();
    Some(match kind {
        Kind::Num => TopValue::Number(text),
        Kind::Str => TopValue::Str(text),
        Kind::Bool => TopValue::Bool(text == "true"),
        Kind::Null => TopValue::Null,
        Kind::Object => TopValue::Container("object"),
        Kind::Array | Kind::Missing => TopValue::Container("array"),
    })
}

/// The finding of the fault a reading stopped at, by the fault's kind (`structure_errors` and
/// `every_truncation_is_an_error` pin them).
fn error_kind(kind: FormatKind) -> FindingKind {
    match kind {
        FormatKind::Gzip => FindingKind::Gzip,
        FormatKind::Truncated => FindingKind::Truncated,
        FormatKind::NotATrace => FindingKind::NotATrace,
        // A limit of the reading (nesting, one member's size) reads as text it refuses.
        FormatKind::Syntax | FormatKind::TooLarge => FindingKind::Syntax,
    }
}

/// Checks the trace at `path` (see the module docs). `progress` is called with the bytes
/// read about every few MB; an error from it stops the check and is returned.
///
/// An invalid trace is not an error: the report says so. Errors are I/O failures (naming
/// the file) and what `progress` returns.
pub(crate) fn check_path(
    path: &Path,
    options: CheckOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<CheckReport> {
    let mut c = Checker::new(options.examples);
    let end = scan_trace(path, &mut c, progress, options.read)?;
    let complete = end.invalid.is_none();
    c.overlaps.finish();
    c.unpaired_flows(complete);
    array_findings(&mut c.tallies, path, &end);
    if complete
        && end.form == Form::Object
        && !c.summary.top_level_keys.iter().any(|k| k == "traceEvents")
        && c.summary.top_level_keys.len() < MAX_TOP_KEYS
    {
        c.summary.top_level_keys.push("traceEvents".into());
    }
    let mut findings: Vec<Finding> = Vec::new();
    if let Some(invalid) = &end.invalid {
        let kind = error_kind(invalid.kind);
        findings.push(Finding {
            kind,
            count: 1,
            message: kind.describe(1),
            examples: vec![Place {
                offset: Some(invalid.offset),
                index: invalid.event,
                message: invalid.message.clone(),
            }],
            extra: Tracks::default(),
        });
    }
    if end.gzip_members > 1 {
        // A fact of the whole file: counted (the members), at no one place.
        let members = u64::from(end.gzip_members);
        c.tallies.count(FindingKind::GzipMembers, members);
    }
    findings.extend(overlap_finding(&c));
    let tallies = std::mem::replace(&mut c.tallies, Tally::new(0));
    findings.extend(tallies.into_list::<Tracks>());
    findings.sort_by_key(|f| f.kind);
    let (errors, warnings) = findings.into_iter().partition(|f| f.kind.is_error());
    let mut s = c.summary;
    s.json_bytes = end.json_bytes;
    s.gzip_members = end.gzip_members;
    s.phases = c.phases.sorted();
    s.categories = c.categories.sorted();
    s.processes = c.pids.set.len() as u64;
    s.threads = c.threads.set.len() as u64;
    s.summary_truncated |= c.phases.truncated
        || c.categories.truncated
        || c.pids.truncated
        || c.threads.truncated
        || c.names_truncated;
    Ok(CheckReport {
        complete,
        errors,
        warnings,
        summary: s,
        form: end.form,
    })
}

/// The warnings of the JSON Array Format (see the module docs), each at one place and
/// naming the file: the top level's `[`, and the end of a text that leaves it open.
fn array_findings(tallies: &mut Tally<FindingKind>, path: &Path, end: &ReadEnd) {
    let Form::Array { at, closed } = end.form else {
        return;
    };
    let file = path.display();
    tallies.add(FindingKind::ArrayForm, 1, at, None, || {
        format!("{file} is a JSON array of events, not an object with \"traceEvents\"")
    });
    if !closed && end.invalid.is_none() {
        tallies.add(FindingKind::UnclosedArray, 1, end.json_bytes, None, || {
            format!("{file} ends without the ']' closing its array of events")
        });
    }
}

/// The finding of the slices Perfetto drops for overlapping: the worst tracks, examples,
/// and whether the count is approximate; `None` when no slice is dropped.
fn overlap_finding(c: &Checker) -> Option<Finding> {
    let overlaps = &c.overlaps;
    if overlaps.dropped == 0 {
        return None;
    }
    let mut worst: Vec<&overlap::Track> =
        overlaps.tracks.iter().filter(|t| t.dropped > 0).collect();
    let track_count = worst.len() as u64;
    worst.sort_by_key(|t| std::cmp::Reverse(t.dropped));
    let tracks = worst
        .iter()
        .take(WORST_TRACKS)
        .map(|t| {
            let mut key = vec![1u8];
            key.extend_from_slice(&t.pid_key);
            key.push(0);
            key.extend_from_slice(&t.tid_key);
            TrackCount {
                pid: show_tagged(&t.pid_key),
                tid: show_tagged(&t.tid_key),
                name: c
                    .names
                    .get(key.as_slice())
                    .map(|n| String::from_utf8_lossy(&n.name).into_owned()),
                dropped: t.dropped,
            }
        })
        .collect();
    let examples = overlaps
        .examples
        .iter()
        .map(|d| {
            let t = &overlaps.tracks[d.track];
            Place {
                offset: Some(d.offset),
                index: Some(d.index),
                message: format!(
                    "X event at ts {} us (dur {} us) on pid {} tid {} starts inside \
                     traceEvents[{}] (ts {} .. {} us) and ends after it",
                    us(d.ts),
                    us(d.dur),
                    show_tagged(&t.pid_key),
                    show_tagged(&t.tid_key),
                    d.other_index,
                    us(d.other_ts),
                    us(d.other_end),
                ),
            }
        })
        .collect();
    let note = (overlaps.late > 0).then(|| {
        format!(
            "{} slice events came too far out of order to be placed exactly: the count \
             is approximate",
            overlaps.late
        )
    });
    Some(Finding {
        kind: FindingKind::OverlappingSlices,
        count: overlaps.dropped,
        message: FindingKind::OverlappingSlices.describe(overlaps.dropped),
        examples,
        extra: Tracks {
            tracks,
            track_count,
            note,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// The lexer's strict check of `reader` (plain, or gzip of any number of members).
    fn strict_json_error<R: std::io::BufRead>(reader: R) -> Result<Option<String>> {
        let source = Source::detect(reader).map_err(|e| Error::io("cannot read", e))?;
        crate::json::lexer::strict_json_error(source)
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        let texts: Vec<String> = [0, 7, 999, 1000, 1862, 999_999, 1_234_567]
            .iter()
            .map(|&n| grouped(n))
            .collect();
        assert_eq!(
            texts,
            ["0", "7", "999", "1,000", "1,862", "999,999", "1,234,567"]
        );
        assert!(FindingKind::UnpairedFlows
            .describe(1862)
            .starts_with("1,862 flow events"));
    }
    use crate::testing::scratch;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn options(threads: usize, chunk: usize) -> CheckOptions {
        CheckOptions {
            examples: 5,
            read: ReadOptions { threads, chunk },
        }
    }

    /// Checks `data` read by one thread and in parallel chunks of a few sizes: the reports
    /// must agree exactly.
    fn check(data: &[u8]) -> CheckReport {
        let dir = scratch("check");
        let path = dir.join("t.json");
        std::fs::write(&path, data).unwrap();
        let one = check_path(&path, options(1, 1 << 20), &mut |_| Ok(())).unwrap();
        for chunk in [64, 333] {
            let many = check_path(&path, options(3, chunk), &mut |_| Ok(())).unwrap();
            assert_eq!(
                many,
                one,
                "chunk {chunk}: {}",
                String::from_utf8_lossy(data)
            );
        }
        // Every finding is at a place in the file (Python's `offset` is always an int).
        let mut places = one
            .errors
            .iter()
            .chain(&one.warnings)
            .flat_map(|f| &f.examples);
        assert!(places.all(|p| p.offset.is_some()), "{one:?}");
        one
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::new(6));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn kinds(fs: &[Finding]) -> Vec<&'static str> {
        fs.iter().map(|f| f.kind.name()).collect()
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
        let r = check(GOOD.as_bytes());
        assert!(r.valid() && r.complete, "{:?}", r.errors);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let s = &r.summary;
        assert_eq!(s.events, 7);
        assert_eq!(s.json_bytes, GOOD.len() as u64);
        assert_eq!(s.gzip_members, 0);
        assert_eq!(
            s.phases,
            vec![
                ("X".to_string(), 3),
                ("M".into(), 1),
                ("f".into(), 1),
                ("i".into(), 1),
                ("s".into(), 1)
            ]
        );
        assert_eq!(
            s.categories,
            vec![
                ("cpu_op".to_string(), 2),
                ("".into(), 1),
                ("Trace".into(), 1)
            ]
        );
        assert_eq!((s.processes, s.threads), (3, 5));
        assert_eq!((s.ts_min, s.ts_max), (Some(10.5), Some(1011.5)));
        assert_eq!((s.flows_paired, s.flows_unpaired), (1, 0));
        assert_eq!(
            s.top_level_keys,
            vec![
                "schemaVersion",
                "displayTimeUnit",
                "baseTimeNanoseconds",
                "traceEvents",
                "traceName"
            ]
        );
        assert_eq!(s.schema_version, Some(TopValue::Number("1".into())));
        assert_eq!(
            s.base_time_ns,
            Some(TopValue::Number("1790857026000000000".into()))
        );
        assert_eq!(s.display_time_unit, Some(TopValue::Str("ms".into())));
        assert_eq!(
            s.trace_name,
            Some(TopValue::Str(r"C:\dir\trace.json".into()))
        );
    }

    fn wrap(value: &str) -> String {
        format!(r#"{{"traceEvents":[{{"ph":"C","name":"c","ts":0,"args":{{"v":{value}}}}}]}}"#)
    }

    /// The one error of `doc`: its kind and message.
    fn error(doc: &str) -> (&'static str, Place) {
        let r = check(doc.as_bytes());
        assert_eq!(r.errors.len(), 1, "{doc}: {:?}", r.errors);
        assert!(!r.valid());
        let f = &r.errors[0];
        (f.kind.name(), f.examples[0].clone())
    }

    #[test]
    fn syntax_errors_stop_the_reading() {
        for (value, needle) in [
            ("NaN", "NaN is not valid JSON"),
            ("-Infinity", "-Infinity is not valid JSON"),
            ("01", "leading zeros"),
            ("[1,2,]", "trailing comma"),
            (r#""C:\dir""#, r"invalid escape '\d'"),
            ("\"a\tb\"", "raw control character U+0009"),
        ] {
            let doc = wrap(value);
            let (kind, e) = error(&doc);
            assert_eq!(kind, "syntax", "{value}");
            assert!(e.message.contains(needle), "{value}: {e:?}");
            assert_eq!(e.index, Some(0));
        }
        let doc = wrap("NaN");
        let (_, e) = error(&doc);
        assert_eq!(e.offset, Some(doc.find("NaN").unwrap() as u64));
        let mut bad = br#"{"traceEvents":[{"ph":"B","name":""#.to_vec();
        bad.extend_from_slice(b"\xff\"}]}");
        let r = check(&bad);
        assert_eq!(kinds(&r.errors), ["syntax"]);
        assert!(r.errors[0].examples[0].message.contains("UTF-8"));
    }

    #[test]
    fn structure_errors() {
        for (doc, kind, needle) in [
            ("", "not_a_trace", "empty file"),
            ("\"x\"", "not_a_trace", "neither a JSON object nor an array"),
            ("{}", "not_a_trace", "no \"traceEvents\""),
            (r#"{"traceEvents":{}}"#, "not_a_trace", "not an array"),
            (
                r#"{"traceEvents":[],"traceEvents":[]}"#,
                "not_a_trace",
                "duplicate",
            ),
            (r#"{"traceEvents":[]} {}"#, "syntax", "extra data"),
            (
                r#"{"traceEvents":[{"ph":"B"} {"ph":"B"}]}"#,
                "syntax",
                "after an event",
            ),
        ] {
            let (k, e) = error(doc);
            assert_eq!(k, kind, "{doc}");
            assert!(e.message.contains(needle), "{doc}: {e:?}");
        }
    }

    /// `GOOD`'s events as the JSON Array Format, then `tail`.
    fn good_array(tail: &str) -> String {
        let start = GOOD.find('[').unwrap();
        let end = GOOD.rfind("\n]").unwrap();
        format!("{}{tail}", &GOOD[start..end])
    }

    #[test]
    fn the_array_form_loads_with_warnings_naming_the_file() {
        let object = check(GOOD.as_bytes());
        for (tail, warnings) in [
            ("\n]\n", &["array_form"][..]),
            ("\n", &["array_form", "unclosed_array"]),
            (",\n", &["array_form", "unclosed_array"]),
        ] {
            let text = good_array(tail);
            let r = check(text.as_bytes());
            assert!(r.valid() && r.complete, "{tail:?}: {:?}", r.errors);
            assert_eq!(kinds(&r.warnings), warnings, "{tail:?}");
            let closed = warnings.len() == 1;
            assert_eq!(r.form, Form::Array { at: 0, closed });
            // The same events as the object form, and no top-level key.
            let mut expected = object.summary.clone();
            expected.json_bytes = text.len() as u64;
            expected.top_level_keys.clear();
            expected.schema_version = None;
            expected.trace_name = None;
            expected.base_time_ns = None;
            expected.display_time_unit = None;
            assert_eq!(r.summary, expected, "{tail:?}");
            // The file's path, then what it is.
            let file = std::env::temp_dir().display().to_string();
            let array = &r.warnings[0];
            assert_eq!(array.count, 1);
            assert_eq!(array.examples[0].offset, Some(0));
            let said = &array.examples[0].message;
            assert!(said.starts_with(&file) && said.contains("check/t.json is a JSON array"));
            assert!(
                array.message.contains("JSON Array Format"),
                "{}",
                array.message
            );
            if !closed {
                let open = &r.warnings[1].examples[0];
                assert_eq!(open.offset, Some(text.len() as u64));
                assert!(open.message.starts_with(&file), "{}", open.message);
                assert!(open.message.contains("without the ']'"), "{}", open.message);
            }
        }
        for (text, closed) in [("[]", true), (" [", false)] {
            let r = check(text.as_bytes());
            assert!(r.valid() && r.summary.events == 0, "{text:?}");
            assert_eq!(r.warnings.len(), if closed { 1 } else { 2 }, "{text:?}");
            assert!(r.summary.top_level_keys.is_empty());
        }
        // Damage in the array form is still an error, with its place.
        let (kind, e) = error(&good_array("\n]").replace("800.25", "NaN"));
        assert_eq!((kind, e.index), ("syntax", Some(1)));
        let (kind, e) = error(&good_array(",\n{\"ph\":\"X\","));
        assert_eq!((kind, e.index), ("truncated", Some(7)));
    }

    #[test]
    fn elements_that_are_not_objects_are_all_counted() {
        let r =
            check(br#"{"traceEvents":[1,{"ph":"X","ts":0,"dur":1,"name":"a","cat":"c"},[],"x"]}"#);
        assert!(r.complete);
        assert_eq!(kinds(&r.errors), ["not_an_object"]);
        assert_eq!(r.errors[0].count, 3);
        assert_eq!(r.errors[0].examples[1].index, Some(2));
        assert_eq!(
            r.errors[0].examples[0].message,
            "the event is a number, not an object"
        );
        assert_eq!(r.summary.events, 4);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let doc = GOOD.trim_end().as_bytes();
        for cut in 0..doc.len() {
            let r = check(&doc[..cut]);
            assert!(
                !r.valid() && !r.complete,
                "accepted a prefix of {cut} bytes"
            );
            let kind = r.errors[0].kind;
            assert!(
                matches!(kind, FindingKind::Truncated | FindingKind::NotATrace),
                "{cut}: {:?}",
                r.errors
            );
            assert!(r
                .warnings
                .iter()
                .all(|w| w.kind != FindingKind::UnpairedFlows));
        }
        let cut = GOOD.find("aten::mm").unwrap() + 3;
        let (kind, e) = error(&GOOD[..cut]);
        assert_eq!(kind, "truncated");
        assert_eq!(e.index, Some(1));
        assert_eq!(e.message, "unterminated string (end of file)");
    }

    #[test]
    fn gzip_members_and_damage() {
        let doc = GOOD.as_bytes();
        let one = check(&gz(doc));
        assert!(one.valid() && one.warnings.is_empty());
        assert_eq!(one.summary.gzip_members, 1);
        let cut = GOOD.find("aten::mm").unwrap();
        let mut two = gz(&doc[..cut]);
        two.extend_from_slice(&gz(&doc[cut..]));
        let two = check(&two);
        assert!(two.valid());
        assert_eq!(kinds(&two.warnings), ["gzip_members"]);
        assert_eq!(two.warnings[0].count, 2);
        assert!(two.warnings[0].message.contains("2 members"));
        let blob = gz(doc);
        for cut in [12, blob.len() / 2, blob.len() - 8, blob.len() - 1] {
            let r = check(&blob[..cut]);
            assert!(!r.valid(), "cut {cut}");
            assert!(
                matches!(r.errors[0].kind, FindingKind::Gzip | FindingKind::Truncated),
                "{cut}: {:?}",
                r.errors
            );
        }
        let mut bad = blob.clone();
        let n = bad.len();
        bad[n - 6] ^= 1; // the CRC
        assert_eq!(kinds(&check(&bad).errors), ["gzip"]);
        let mut trailing = blob;
        trailing.extend_from_slice(b"garbage");
        let r = check(&trailing);
        assert_eq!(kinds(&r.errors), ["gzip"]);
        assert!(r.errors[0].examples[0].message.contains("trailing data"));
    }

    #[test]
    fn unpaired_flows_are_warnings() {
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
        let r = check(doc.as_bytes());
        assert!(r.valid());
        assert_eq!((r.summary.flows_paired, r.summary.flows_unpaired), (2, 3));
        let f = r.finding(FindingKind::UnpairedFlows).unwrap();
        assert_eq!(f.count, 3);
        let at = |needle: &str| doc.find(needle).unwrap() as u64;
        let got: Vec<(u64, Option<u64>, &str)> = f
            .examples
            .iter()
            .map(|e| (e.offset.unwrap(), e.index, e.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    at(r#"{"ph":"s","id":2"#),
                    Some(2),
                    r#"flow "s" (cat "ac2g", id 2) has no "f""#
                ),
                (
                    at(r#"{"ph":"f","id":2"#),
                    Some(3),
                    r#"flow "f" (cat "fwdbwd", id 2) has no "s""#
                ),
                (
                    at(r#"{"ph":"f","id":"9""#),
                    Some(4),
                    r#"flow "f" (cat "ac2g", id "9") has no "s""#
                ),
            ]
        );
    }

    #[test]
    fn durations_timestamps_and_phases() {
        let doc = r#"{"traceEvents":[
{"ph":"X","name":"a","ts":1,"dur":-1},
{"ph":"X","name":"b","ts":1},
{"ph":"X","name":"c","ts":1,"dur":"2"},
{"ph":"X","name":"d","dur":2},
{"ph":"i","name":"e"},
{"ph":"M","name":"process_name","pid":1,"args":{"name":"p"}},
{"name":"f","ts":1},
{"ph":7,"ts":1},
{"ph":"X","name":"g","ts":1,"dur":-0.0004}
]}"#;
        let r = check(doc.as_bytes());
        assert!(r.valid(), "{:?}", r.errors);
        let count = |k| r.finding(k).map_or(0, |f| f.count);
        assert_eq!(count(FindingKind::NegativeDurations), 1);
        assert_eq!(count(FindingKind::MissingDurations), 2);
        assert_eq!(count(FindingKind::MissingTimestamps), 2);
        assert_eq!(count(FindingKind::NoPhase), 2);
        let f = r.finding(FindingKind::NoPhase).unwrap();
        assert_eq!(f.examples[0].message, "the event has no \"ph\"");
        assert_eq!(f.examples[1].message, "\"ph\" is a number, not a string");
        let f = r.finding(FindingKind::MissingDurations).unwrap();
        assert_eq!(
            f.examples[0].message,
            "X event \"b\" has no numeric \"dur\""
        );
        assert_eq!(r.summary.events, 9);
    }

    #[test]
    fn numbers_beyond_2_53() {
        let doc = r#"{"traceEvents":[
{"ph":"X","name":"a","ts":1e16,"dur":1,"pid":9007199254740993,"tid":1},
{"ph":"s","cat":"c","id":12345678901234567890,"ts":1,"pid":1,"tid":9007199254740992},
{"ph":"f","cat":"c","id":12345678901234567890,"ts":1,"pid":1,"tid":2}
]}"#;
        let r = check(doc.as_bytes());
        let f = r.finding(FindingKind::ImpreciseNumbers).unwrap();
        assert_eq!(f.count, 4, "{f:?}");
        assert!(f
            .examples
            .iter()
            .any(|e| e.message.contains("\"pid\" 9007199254740993")));
        assert!(f
            .examples
            .iter()
            .all(|e| !e.message.contains("9007199254740992 ")));
    }

    #[test]
    fn conflicting_names() {
        let doc = r#"{"traceEvents":[
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"a"}},
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"a"}},
{"ph":"M","name":"thread_name","pid":1,"tid":3,"args":{"name":"b"}},
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"c"}},
{"ph":"M","name":"process_name","pid":1,"args":{"name":"p"}},
{"ph":"M","name":"process_name","pid":"1","args":{"name":"q"}},
{"ph":"M","name":"process_name","pid":1,"args":{"name":"q"}}
]}"#;
        let r = check(doc.as_bytes());
        let f = r.finding(FindingKind::ConflictingNames).unwrap();
        assert_eq!(f.count, 2);
        assert_eq!(
            f.examples[0].message,
            format!(
                r#"thread_name of pid 1 tid 2 is "c" here, "a" at offset {} (traceEvents[0])"#,
                doc.find("{\"ph\"").unwrap()
            )
        );
        assert!(f.examples[1]
            .message
            .starts_with(r#"process_name of pid 1 is "q" here, "p""#));
    }

    #[test]
    fn overlapping_slices_per_thread() {
        let doc = r#"{"traceEvents":[
{"ph":"M","name":"thread_name","pid":0,"tid":7,"args":{"name":"stream 7 "}},
{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":3,"dur":3.776},
{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":5,"dur":2},
{"ph":"X","cat":"kernel","name":"k3","pid":0,"tid":7,"ts":5.5,"dur":2},
{"ph":"X","cat":"kernel","name":"k4","pid":0,"tid":8,"ts":5.5,"dur":2},
{"ph":"X","cat":"cpu_op","name":"outer","pid":1,"tid":1,"ts":0,"dur":10},
{"ph":"X","cat":"cpu_op","name":"inner","pid":1,"tid":1,"ts":2,"dur":8},
{"ph":"X","cat":"cpu_op","name":"cross","pid":1,"tid":1,"ts":9,"dur":2}
]}"#;
        let r = check(doc.as_bytes());
        assert!(r.valid());
        let f = r.finding(FindingKind::OverlappingSlices).unwrap();
        assert_eq!(f.count, 3);
        assert_eq!(f.extra.track_count, 2);
        assert_eq!(
            f.extra.tracks[0],
            TrackCount {
                pid: "0".into(),
                tid: "7".into(),
                name: Some("\"stream 7 \"".into()),
                dropped: 2
            }
        );
        assert_eq!(f.examples[0].index, Some(2));
        assert_eq!(
            f.examples[0].message,
            "X event at ts 5.000 us (dur 2.000 us) on pid 0 tid 7 starts inside \
             traceEvents[1] (ts 3.000 .. 6.776 us) and ends after it"
        );
        assert_eq!(f.examples[2].index, Some(7));
    }

    #[test]
    fn strict_json_of_any_reader() {
        assert_eq!(strict_json_error(&b"{\"a\": [1, 2]}"[..]).unwrap(), None);
        let e = strict_json_error(&b"{\"a\": NaN}"[..]).unwrap().unwrap();
        assert_eq!(e, "offset 6: NaN is not valid JSON");
        assert!(strict_json_error(&b"[1] 2"[..])
            .unwrap()
            .unwrap()
            .contains("extra data"));
        assert!(strict_json_error(&gz(b"[1")[..])
            .unwrap()
            .unwrap()
            .contains("end of file"));
    }

    #[test]
    fn progress_can_stop_the_check() {
        let mut doc = String::from(r#"{"traceEvents":["#);
        let event =
            r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1.5,"dur":2},"#;
        while doc.len() < 12 << 20 {
            doc.push_str(event);
        }
        doc.push_str(r#"{"ph":"B"}]}"#);
        let dir = scratch("progress");
        let path = dir.join("t.json");
        std::fs::write(&path, &doc).unwrap();
        let mut calls = 0;
        let r = check_path(&path, CheckOptions::default(), &mut |_| {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert!(r.valid() && calls >= 2);
        let stopped = check_path(&path, CheckOptions::default(), &mut |_| {
            Err(Error::Interrupted)
        });
        assert!(matches!(stopped, Err(Error::Interrupted)));
    }

    #[test]
    fn unreadable_paths_are_errors_naming_them() {
        let dir = scratch("paths");
        match check_path(
            &dir.join("missing.json"),
            CheckOptions::default(),
            &mut |_| Ok(()),
        ) {
            Err(Error::Io { context, .. }) => assert!(context.contains("missing.json")),
            other => panic!("{other:?}"),
        }
        assert!(check_path(&dir, CheckOptions::default(), &mut |_| Ok(())).is_err());
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
        while doc.len() < 200_000_000 {
            doc.push_str(event);
        }
        doc.push_str("{\"ph\":\"B\"}\n],\n\"traceName\": \"x\"\n}\n");
        let dir = scratch("throughput");
        let path = dir.join("t.json");
        std::fs::write(&path, &doc).unwrap();
        let mb = doc.len() as f64 / 1e6;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            scan_trace(
                &path,
                &mut crate::read::events::Unvisited,
                &mut |_| Ok(()),
                ReadOptions::default(),
            )
            .unwrap();
            let floor = t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let r = check_path(&path, CheckOptions::default(), &mut |_| Ok(())).unwrap();
            let dt = t.elapsed().as_secs_f64();
            assert!(r.valid(), "{:?}", r.errors);
            println!(
                "check: {mb:.1} MB in {dt:.3} s = {:.0} MB/s; reading alone {:.0} MB/s",
                mb / dt,
                mb / floor
            );
        }
    }
}
