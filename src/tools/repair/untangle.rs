//! Untangling (`--untangle`): a first read of a loadable trace through the overlap rule
//! with lanes ([`crate::tools::overlap`], fed each event by [`Overlaps::feed`]) and the names
//! of threads, then a second that writes every event, each moved one on its lane, and the
//! lanes' metadata events.

use std::collections::HashMap;
use std::path::Path;

use crate::error::Result;
use crate::json::object::{member, Duplicates::First};
use crate::json::render::quoted;
use crate::json::scan::Scanner;
use crate::output::sink::Sink;
use crate::read::events::{read_trace, tagged_text, Event, Visitor};
use crate::read::members::Source;
use crate::tools::check;
use crate::tools::overlap::{self, Overlaps};
use crate::tools::report::Tally;

use super::{ChangeKind, RepairReport};

/// The first pass of untangling: the overlap rule with lanes, and what lanes are named by.
struct Survey {
    overlaps: Overlaps,
    /// Largest numeric `tid` (or `pid`) per `pid` (type-tagged).
    max_tid: HashMap<Box<[u8]>, u64>,
    /// `thread_name` (raw JSON string) and `thread_sort_index` (raw value) per thread key.
    names: HashMap<Box<[u8]>, Box<[u8]>>,
    sort_indices: HashMap<Box<[u8]>, Box<[u8]>>,
}

/// A type-tagged number as an integer, when it is one.
fn tagged_int(tagged: &[u8]) -> Option<u64> {
    let (b'n', text) = tagged.split_first()? else {
        return None;
    };
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl Visitor for Survey {
    fn header(&mut self, _key: &[u8], _raw: &[u8], _after_events: bool) -> Result<()> {
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        let tid = &ev.thread_key[ev.pid_key.len().min(ev.thread_key.len())..];
        let tid = tid.get(1..).unwrap_or(b"");
        let numbers = [tagged_int(tid), tagged_int(ev.pid_key)];
        if let Some(n) = numbers.into_iter().flatten().max() {
            let full = self.max_tid.len() >= check::MAX_DISTINCT;
            match self.max_tid.get_mut(ev.pid_key) {
                Some(m) => *m = (*m).max(n),
                None if !full => {
                    self.max_tid.insert(ev.pid_key.into(), n);
                }
                None => {}
            }
        }
        self.overlaps.feed(ev);
        if !ev.is_metadata() {
            return Ok(());
        }
        let (map, field) = match ev.name {
            b"thread_name" => (&mut self.names, &b"name"[..]),
            b"thread_sort_index" => (&mut self.sort_indices, &b"sort_index"[..]),
            _ => return Ok(()),
        };
        let value = member(ev.raw, b"args", First).and_then(|a| member(a, field, First));
        if let Some(v) = value {
            if !map.contains_key(ev.thread_key) && map.len() < check::MAX_DISTINCT {
                map.insert(ev.thread_key.into(), v.into());
            }
        }
        Ok(())
    }
}

/// A lane: the thread it relieves, its number, and its `tid`.
struct Lane {
    pid_key: Box<[u8]>,
    tid: u64,
    name: String,
    sort_index: Option<Box<[u8]>>,
}

/// `raw` (an event object, valid JSON) with its `tid` set to `tid`.
fn with_tid(raw: &[u8], tid: u64) -> Vec<u8> {
    let mut digits = Vec::new();
    crate::json::render::push_int(&mut digits, tid);
    let mut s = Scanner::new(raw);
    let span = (|| {
        s.ws()?;
        s.pos += 1;
        if s.ws()? == b'}' {
            return None;
        }
        loop {
            let k = s.key()?;
            s.ws()?;
            let start = s.pos;
            s.value(0)?;
            if &raw[k.start..k.end] == b"tid" {
                return Some((start, s.pos));
            }
            match s.ws()? {
                b',' => s.pos += 1,
                _ => return None,
            }
        }
    })();
    let mut out = Vec::with_capacity(raw.len() + 16);
    match span {
        Some((start, end)) => {
            out.extend_from_slice(&raw[..start]);
            out.extend_from_slice(&digits);
            out.extend_from_slice(&raw[end..]);
        }
        None => {
            let open = raw.iter().position(|&b| b == b'{').unwrap_or(0);
            out.extend_from_slice(&raw[..=open]);
            out.extend_from_slice(b"\"tid\":");
            out.extend_from_slice(&digits);
            let rest = &raw[open + 1..];
            if rest.iter().any(|b| !b.is_ascii_whitespace() && *b != b'}') {
                out.push(b',');
            }
            out.extend_from_slice(rest);
        }
    }
    out
}

/// The second pass of untangling: writes every event, moved ones on their lanes.
struct Untangling<'a> {
    out: Sink,
    moves: &'a HashMap<u64, (u32, u32)>,
    lane_tids: &'a HashMap<(u32, u32), u64>,
    /// The last non-flow event: its thread, span and lane `tid` if moved.
    last: Option<(Vec<u8>, f64, f64, Option<u64>)>,
    members: u64,
    events: u64,
    after: Vec<Box<[u8]>>,
    in_events: bool,
    moved_flows: u64,
    read: u64,
}

impl Untangling<'_> {
    fn member(&mut self, raw: &[u8]) -> Result<()> {
        self.out
            .write_all(if self.members == 0 { b"{\n" } else { b",\n" })?;
        self.members += 1;
        self.out.write_all(raw)
    }

    fn open_events(&mut self) -> Result<()> {
        if !self.in_events {
            self.member(b"\"traceEvents\": [")?;
            self.in_events = true;
        }
        Ok(())
    }

    fn event_text(&mut self, raw: &[u8]) -> Result<()> {
        self.out
            .write_all(if self.events == 0 { b"\n" } else { b",\n" })?;
        self.events += 1;
        self.out.write_all(raw)
    }
}

impl Visitor for Untangling<'_> {
    fn header(&mut self, _key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        if after_events {
            self.after.push(raw.into());
            Ok(())
        } else {
            self.member(raw)
        }
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.open_events()?;
        self.read += 1;
        let mut lane = None;
        if ev.is_flow() {
            if let (Some((thread, ts, end, moved)), Some(t)) = (&self.last, ev.ts) {
                if *thread == ev.thread_key && *ts <= t && t <= *end {
                    lane = *moved;
                    self.moved_flows += u64::from(moved.is_some());
                }
            }
        } else {
            lane = self
                .moves
                .get(&ev.index)
                .and_then(|key| self.lane_tids.get(key))
                .copied();
            self.last = ev.ts.map(|ts| {
                let end = ts + ev.dur.unwrap_or(0.0).max(0.0);
                (ev.thread_key.to_vec(), ts, end, lane)
            });
        }
        match lane {
            Some(tid) => {
                let text = with_tid(ev.raw, tid);
                self.event_text(&text)
            }
            None => self.event_text(ev.raw),
        }
    }
}

/// The lanes of the tracks with dropped slices, in the order of tracks, numbered above each
/// process's largest tid; the tid of each (track, lane).
fn plan_lanes(survey: &Survey) -> (Vec<Lane>, HashMap<(u32, u32), u64>) {
    let mut next_tid: HashMap<Box<[u8]>, u64> = HashMap::new();
    let mut lanes = Vec::new();
    let mut lane_tids = HashMap::new();
    for (t, track) in survey.overlaps.tracks.iter().enumerate() {
        if track.lanes == 0 {
            continue;
        }
        let mut thread_key = track.pid_key.to_vec();
        thread_key.push(0);
        thread_key.extend_from_slice(&track.tid_key);
        let base_name = match survey.names.get(thread_key.as_slice()) {
            Some(raw) => json_string_text(raw),
            None => format!("thread {}", display_tagged(&track.tid_key)),
        };
        let next = next_tid.entry(track.pid_key.clone()).or_insert_with(|| {
            survey
                .max_tid
                .get(&track.pid_key)
                .map_or(1, |m| m.saturating_add(1))
        });
        for k in 1..=track.lanes {
            let tid = *next;
            *next += 1;
            lane_tids.insert((t as u32, k as u32), tid);
            lanes.push(Lane {
                pid_key: track.pid_key.clone(),
                tid,
                name: format!("{} (overlap {k})", base_name.trim_end()),
                sort_index: survey.sort_indices.get(thread_key.as_slice()).cloned(),
            });
        }
    }
    (lanes, lane_tids)
}

/// The changes of an untangling: the examples of moved slices (where each went), and the
/// counts of slices moved and lanes added.
fn note_moves(
    changes: &mut Tally<ChangeKind>,
    examples: &[overlap::Dropped],
    moves: &HashMap<u64, (u32, u32)>,
    lane_tids: &HashMap<(u32, u32), u64>,
    lanes: &[Lane],
) {
    let mut examples_moved: Vec<&overlap::Dropped> = examples.iter().collect();
    examples_moved.sort_by_key(|d| d.offset);
    for d in examples_moved {
        let tid = moves
            .get(&d.index)
            .and_then(|key| lane_tids.get(key))
            .copied()
            .unwrap_or(0);
        changes.place(
            ChangeKind::MovedSlices,
            Some(d.offset),
            Some(d.index),
            || {
                format!(
                    "moved to tid {tid}: it starts inside traceEvents[{}]",
                    d.other_index
                )
            },
        );
    }
    if !moves.is_empty() {
        changes.count(ChangeKind::MovedSlices, moves.len() as u64);
        changes.count(ChangeKind::AddedLanes, lanes.len() as u64);
        for lane in lanes {
            changes.place(ChangeKind::AddedLanes, None, None, || {
                format!(
                    "pid {} tid {}: {}",
                    display_tagged(&lane.pid_key),
                    lane.tid,
                    quoted(&lane.name)
                )
            });
        }
    }
}

/// A lane's `thread_name` event, and its `thread_sort_index` event when its thread has one.
fn lane_events(lane: &Lane) -> Vec<Vec<u8>> {
    let mut events = Vec::new();
    let mut m = Vec::new();
    let pid = display_tagged(&lane.pid_key);
    m.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":");
    m.extend_from_slice(pid.as_bytes());
    m.extend_from_slice(b",\"tid\":");
    crate::json::render::push_int(&mut m, lane.tid);
    m.extend_from_slice(b",\"args\":{\"name\":");
    crate::json::render::push_json_string(&mut m, lane.name.as_bytes());
    m.extend_from_slice(b"}}");
    events.push(m);
    if let Some(index) = &lane.sort_index {
        let mut m = Vec::new();
        m.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":");
        m.extend_from_slice(pid.as_bytes());
        m.extend_from_slice(b",\"tid\":");
        crate::json::render::push_int(&mut m, lane.tid);
        m.extend_from_slice(b",\"args\":{\"sort_index\":");
        m.extend_from_slice(index);
        m.extend_from_slice(b"}}");
        events.push(m);
    }
    events
}

/// Rewrites the loadable trace `src` into `out` with the events Perfetto drops for
/// overlapping moved to lanes (see the module docs).
pub(super) fn untangle(
    src: &Path,
    out: Sink,
    changes: &mut Tally<ChangeKind>,
    examples: usize,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<RepairReport> {
    let mut survey = Survey {
        overlaps: Overlaps::new(examples, true),
        max_tid: HashMap::new(),
        names: HashMap::new(),
        sort_indices: HashMap::new(),
    };
    read_trace(src, &mut survey, progress)?;
    survey.overlaps.finish();
    let (lanes, lane_tids) = plan_lanes(&survey);
    let moves = std::mem::take(&mut survey.overlaps.moves);
    note_moves(
        changes,
        &survey.overlaps.examples,
        &moves,
        &lane_tids,
        &lanes,
    );
    let mut w = Untangling {
        out,
        moves: &moves,
        lane_tids: &lane_tids,
        last: None,
        members: 0,
        events: 0,
        after: Vec::new(),
        in_events: false,
        moved_flows: 0,
        read: 0,
    };
    let read = read_trace(src, &mut w, progress)?;
    w.open_events()?;
    for lane in &lanes {
        for event in lane_events(lane) {
            w.event_text(&event)?;
        }
    }
    w.out.write_all(b"\n]")?;
    for raw in std::mem::take(&mut w.after) {
        w.member(&raw)?;
    }
    w.out.write_all(b"\n}\n")?;
    let events_written = w.events;
    let w_read = w.read;
    let stats = w.out.finish()?;
    Ok(RepairReport {
        changes: Vec::new(),
        json_bytes_read: read,
        json_bytes_written: stats.uncompressed_bytes,
        events_read: w_read,
        events_written,
    })
}

/// A type-tagged `pid`/`tid` as JSON text, `null` where absent.
fn display_tagged(tagged: &[u8]) -> String {
    tagged_text(tagged).unwrap_or_else(|| "null".into())
}

/// The text of a JSON string (its raw text, quotes included), decoded.
fn json_string_text(raw: &[u8]) -> String {
    let mut no_progress = |_| Ok(());
    let decoded = (|| {
        let source = Source::detect(raw).ok()?;
        let mut inp = crate::json::lexer::Input::new(source, &mut no_progress, 8);
        let mut out = Vec::new();
        (inp.value(0, Some(&mut out)).ok()? == crate::json::lexer::Kind::Str).then_some(out)
    })();
    match decoded {
        Some(text) => String::from_utf8_lossy(&text).into_owned(),
        None => String::from_utf8_lossy(raw).into_owned(),
    }
}
