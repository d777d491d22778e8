//! Which complete (`X`) events Perfetto's JSON importer drops for overlapping on a thread
//! track, and (for `kinetrace repair --untangle`) extra lanes that would show them.
//!
//! A *track* is one thread as Perfetto's JSON importer keys it: (`pid`, `tid`), a number
//! coerced to an unsigned 32-bit integer (a fraction truncated; out of range or negative
//! counts as absent), a string kept as a string; an absent `tid` is the `pid`. A *slice* is
//! an `X`, `B` or `E` event on a track.
//!
//! The rule, as in Perfetto's trace processor (`SliceTracker::MaybeCloseStack` and
//! `StartSlice`, the sorter's JSON order; the importer of 2025 until v57.0: v57.1 spills such
//! events onto overflow tracks instead), step by step:
//! 1. Times in integer ns: a number with a fraction is `llround(v * 1000)` of its double, an
//!    integral one `v * 1000` exactly. Events are taken in the order (ts, key, file order),
//!    the key being lowest for `E`, then `X` by decreasing `dur`, then everything else.
//! 2. Each track has a stack of open slices. Before a slice starts at `ts` (duration `d`, or
//!    none for `B`/`E`), the stack is walked from the top: a slice whose end is before `ts`,
//!    or at `ts` (unless both durations are 0), is popped (Perfetto pops the stack's top
//!    whichever entry it is looking at, and so does this model); a complete slice below an
//!    unfinished `B` that ends before `ts` closes every slice above it; a complete slice
//!    that `[ts, ts + d)` starts inside and ends after makes the new `X` *dropped* (stat
//!    `slice_drop_overlapping_complete_event`), and the walk stops.
//! 3. An `X` with a negative `dur` is dropped before that (`slice_negative_duration`), one
//!    without `dur` or `ts` earlier still; `B` pushes an unfinished slice; `E` closes the
//!    topmost unfinished slice whose `cat` and `name` match where the `E` gives them.
//!
//! Instants on a thread track (`i`/`I` of thread scope) take part in Perfetto's walk too,
//! but never change its outcome for any other event: one at `t` pops exactly what the next
//! event at or after `t` would pop, and is popped by it before anything else is compared
//! (the differential tests' reference keeps them and agrees). So they are left out here.
//!
//! Events come in through [`Overlaps::feed`], the one place a trace event becomes an input
//! of the rule (which events are slices, times in ns, the track key, the `B`/`E` names), for
//! `check`'s finding and `repair --untangle`'s survey alike.
//!
//! Order and memory: events are buffered per track (48 bytes each) and taken in the order
//! above. When more than [`PENDING_CAP`] are buffered, each track's earliest half is taken;
//! an event that sorts before what its track has already taken (far out of order in the
//! file) is taken at once and counted in [`Overlaps::late`]: the counts are then exact only
//! up to those. Kineto and torch write each track nearly in order, so that does not happen
//! with their traces. Per track the stack of open slices is kept (nesting depth), and for
//! `--untangle` one stack per extra lane plus about 30 bytes per moved event.

use std::collections::HashMap;

use crate::read::events::Event;

/// Events buffered over all tracks before the earliest are taken (48 MiB of records).
pub(crate) const PENDING_CAP: usize = 1 << 20;

/// Deepest stack of a track: a slice that would start deeper is dropped
/// (`slice_max_depth_exceeded`; Perfetto's `SliceTracker::kMaxDepth`).
pub(crate) const MAX_DEPTH: usize = 512;

/// What a slice event is for the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `X` with its duration in ns (>= 0).
    Complete(i64),
    /// `B`.
    Begin,
    /// `E`.
    End,
}

/// One slice event as buffered.
#[derive(Debug, Clone, Copy)]
struct Rec {
    ts: i64,
    /// Sort key after `ts` (see the module docs).
    key: i64,
    index: u64,
    offset: u64,
    phase: Phase,
    /// Hashes of `name` and `cat` for matching `E` with `B` (0: absent).
    name: u64,
    cat: u64,
}

impl Rec {
    fn order(&self) -> (i64, i64, u64) {
        (self.ts, self.key, self.index)
    }
}

/// A slice on a track's stack.
#[derive(Debug, Clone, Copy)]
struct Open {
    ts: i64,
    /// `None` while a `B` is unfinished.
    dur: Option<i64>,
    name: u64,
    cat: u64,
    index: u64,
}

/// An `X` event Perfetto drops, and the slice it overlaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// Index of the track (see [`Overlaps::tracks`]).
    pub(crate) track: usize,
    pub(crate) index: u64,
    pub(crate) offset: u64,
    pub(crate) ts: i64,
    pub(crate) dur: i64,
    /// The open slice it starts inside and ends after.
    pub(crate) other_index: u64,
    pub(crate) other_ts: i64,
    pub(crate) other_end: i64,
}

/// One track: its identity as written, and what the rule found on it.
#[derive(Debug)]
pub(crate) struct Track {
    /// `pid` and `tid` as the events write them (type-tagged, `tid` absent: empty).
    pub(crate) pid_key: Box<[u8]>,
    pub(crate) tid_key: Box<[u8]>,
    /// Its key (see [`track_key`]).
    key: Box<[u8]>,
    /// `X` events dropped on it.
    pub(crate) dropped: u64,
    /// Extra lanes its dropped events were moved to (untangling only).
    pub(crate) lanes: usize,
    /// A `B` was on its stack (see [`close_stack`]'s `nested`).
    begins: bool,
    pending: Vec<Rec>,
    stack: Vec<Open>,
    lane_stacks: Vec<Vec<Open>>,
    /// The last order taken.
    taken: Option<(i64, i64, u64)>,
}

/// What an event is to the rule (steps 1 and 3 of the module docs), as [`Overlaps::feed`]
/// tells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fed {
    /// An `X` (`dur` >= 0 ns), `B` or `E` with a `ts`: added to its track.
    Slice,
    /// An `X` without a numeric `dur` (Perfetto drops it).
    NoDuration,
    /// An `X` whose `dur` (µs, as read) is negative in ns (`slice_negative_duration`).
    NegativeDuration(f64),
    /// Not a slice: another phase, or no numeric `ts`.
    Other,
}

/// The rule over every track of a trace (see the module docs).
pub(crate) struct Overlaps {
    pub(crate) tracks: Vec<Track>,
    /// The thread key (`Event::thread_key`) of the last event fed, and its track key.
    fed_thread: Vec<u8>,
    fed_key: Vec<u8>,
    by_key: HashMap<Box<[u8]>, usize>,
    /// The track of the last event (events come in runs on one thread).
    last: Option<usize>,
    pending: usize,
    /// Whether dropped events are moved to extra lanes.
    untangle: bool,
    /// `X` events dropped over all tracks.
    pub(crate) dropped: u64,
    /// Events taken out of order (see the module docs).
    pub(crate) late: u64,
    /// `X` and `B` events dropped for starting deeper than [`MAX_DEPTH`].
    pub(crate) too_deep: u64,
    /// The first dropped events in file order (at most `examples_cap`).
    pub(crate) examples: Vec<Dropped>,
    examples_cap: usize,
    /// Event index -> (track, lane from 1) of each moved event.
    pub(crate) moves: HashMap<u64, (u32, u32)>,
}

/// An integer time in ns from a time in µs as Perfetto's JSON importer converts it.
fn to_ns(us: f64) -> i64 {
    if us == us.trunc() {
        (us as i64).saturating_mul(1000)
    } else {
        // f64::round is llround's rounding (half away from zero); `as` saturates.
        (us * 1000.0).round() as i64
    }
}

/// Perfetto's track identity of a `pid` or `tid` (type-tagged text): a number coerced to
/// `u32` (`None` when it is not one), a string as is.
fn coerce(tagged: &[u8], out: &mut Vec<u8>) -> bool {
    match tagged.split_first() {
        Some((b's', text)) => {
            out.push(b's');
            out.extend_from_slice(text);
            true
        }
        Some((_, text)) => {
            let value = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
                .map(f64::trunc)
                .filter(|v| (0.0..=f64::from(u32::MAX)).contains(v));
            match value {
                Some(v) => {
                    out.push(b'n');
                    out.extend_from_slice(&(v as u32).to_le_bytes());
                    true
                }
                None => false,
            }
        }
        None => false,
    }
}

/// The track key of an event with `pid_key` and `tid_key` (type-tagged, empty when
/// absent), written into `out`.
fn track_key(pid_key: &[u8], tid_key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    if !coerce(pid_key, out) {
        out.push(b'n');
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    let pid_len = out.len();
    out.push(0);
    if !coerce(tid_key, out) {
        // No tid: the pid's value.
        out.extend_from_within(..pid_len);
    }
}

/// The slice `ev` is to the rule, its `ts` in ns and its phase, or what else it is.
fn slice_of(ev: &Event<'_>) -> Result<(i64, Phase), Fed> {
    let phase = match ev.ph {
        b"X" => {
            let Some(dur) = ev.dur else {
                return Err(Fed::NoDuration);
            };
            let d = to_ns(dur);
            if d < 0 {
                return Err(Fed::NegativeDuration(dur));
            }
            Phase::Complete(d)
        }
        b"B" => Phase::Begin,
        b"E" => Phase::End,
        _ => return Err(Fed::Other),
    };
    ev.ts.map(|ts| (to_ns(ts), phase)).ok_or(Fed::Other)
}

/// A 64-bit hash of a name or category (0 for none), for matching `E` with `B`.
fn name_hash(text: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    if text.is_empty() {
        return 0;
    }
    BuildHasherDefault::<DefaultHasher>::default().hash_one(text) | 1
}

/// What the stack walk decided for a new slice.
enum Walk {
    Start,
    /// Dropped: it overlaps this open slice.
    Drop(Open),
}

/// Perfetto's walk of a track's stack before a slice starts at `ts` lasting `dur` (`None`
/// for `B`/`E`): see the module docs. `nested`: the stack never held a `B`, so each slice
/// ends no later than the one below it, and the walk can stop at the first slice that
/// neither ends by `ts` nor overlaps (nothing below it can).
fn close_stack(stack: &mut Vec<Open>, ts: i64, dur: Option<i64>, nested: bool) -> Walk {
    let mut unfinished_above = false;
    let mut i = stack.len();
    while i > 0 {
        i -= 1;
        let Some(open) = stack.get(i).copied() else {
            continue;
        };
        let Some(open_dur) = open.dur else {
            unfinished_above = true;
            continue;
        };
        let end = open.ts.saturating_add(open_dur);
        if unfinished_above {
            if ts <= end {
                continue;
            }
            // A B/E pair crossing this slice's end: everything from it up is closed there.
            stack.truncate(i);
            unfinished_above = false;
            continue;
        }
        let ends_same = end == ts && !(open_dur == 0 && dur == Some(0));
        if end < ts || ends_same {
            // Perfetto pops the top, which need not be the entry it looked at.
            stack.pop();
            continue;
        }
        if let Some(d) = dur {
            if ts < end && ts.saturating_add(d) > end {
                return Walk::Drop(open);
            }
        }
        if nested {
            break;
        }
    }
    Walk::Start
}

impl Overlaps {
    /// A rule over no events yet, keeping `examples_cap` examples; `untangle` moves each
    /// dropped event to the first extra lane of its track where it fits.
    pub(crate) fn new(examples_cap: usize, untangle: bool) -> Self {
        Overlaps {
            tracks: Vec::new(),
            fed_thread: Vec::new(),
            fed_key: Vec::new(),
            by_key: HashMap::new(),
            last: None,
            pending: 0,
            untangle,
            dropped: 0,
            late: 0,
            too_deep: 0,
            examples: Vec::new(),
            examples_cap,
            moves: HashMap::new(),
        }
    }

    /// Adds `ev` to its track when it is a slice; says what it is to the rule.
    pub(crate) fn feed(&mut self, ev: &Event<'_>) -> Fed {
        let (ts, phase) = match slice_of(ev) {
            Ok(slice) => slice,
            Err(other) => return other,
        };
        // `thread_key` is `pid_key`, a 0, then the type-tagged `tid` (empty when absent).
        let tid = &ev.thread_key[ev.pid_key.len() + 1..];
        if self.fed_thread != ev.thread_key {
            self.fed_thread.clear();
            self.fed_thread.extend_from_slice(ev.thread_key);
            track_key(ev.pid_key, tid, &mut self.fed_key);
        }
        let (name, cat) = match phase {
            Phase::Complete(_) => (0, 0),
            Phase::Begin if ev.name.is_empty() => (name_hash(b"[No name]"), 0),
            _ => (
                name_hash(ev.name),
                name_hash(ev.cat.unwrap_or("").as_bytes()),
            ),
        };
        // Taken out for the call (no copy), as `add` borrows all of `self`.
        let key = std::mem::take(&mut self.fed_key);
        self.add(
            &key, ev.pid_key, tid, ts, phase, name, cat, ev.index, ev.offset,
        );
        self.fed_key = key;
        Fed::Slice
    }

    /// Adds a slice event on the track `key` (see [`track_key`]; `pid_key`/`tid_key` as
    /// written, kept for reports) at `ts` ns.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        key: &[u8],
        pid_key: &[u8],
        tid_key: &[u8],
        ts: i64,
        phase: Phase,
        name: u64,
        cat: u64,
        index: u64,
        offset: u64,
    ) {
        let track = match self.last {
            Some(t) if *self.tracks[t].key == *key => t,
            _ => {
                let t = match self.by_key.get(key) {
                    Some(&t) => t,
                    None => {
                        let t = self.tracks.len();
                        self.tracks.push(Track {
                            pid_key: pid_key.into(),
                            tid_key: tid_key.into(),
                            key: key.into(),
                            dropped: 0,
                            lanes: 0,
                            begins: false,
                            pending: Vec::new(),
                            stack: Vec::new(),
                            lane_stacks: Vec::new(),
                            taken: None,
                        });
                        self.by_key.insert(key.into(), t);
                        t
                    }
                };
                self.last = Some(t);
                t
            }
        };
        let key = match phase {
            Phase::End => i64::MIN,
            Phase::Complete(d) => i64::MAX - d,
            Phase::Begin => i64::MAX,
        };
        let rec = Rec {
            ts,
            key,
            index,
            offset,
            phase,
            name,
            cat,
        };
        let tr = &mut self.tracks[track];
        if tr.taken.is_some_and(|taken| rec.order() < taken) {
            self.late += 1;
            self.take(track, rec);
            return;
        }
        tr.pending.push(rec);
        self.pending += 1;
        if self.pending > PENDING_CAP {
            for t in 0..self.tracks.len() {
                let n = self.tracks[t].pending.len().div_ceil(2);
                self.take_earliest(t, n);
            }
        }
    }

    /// Takes the `n` earliest buffered events of track `t`.
    fn take_earliest(&mut self, t: usize, n: usize) {
        let mut pending = std::mem::take(&mut self.tracks[t].pending);
        pending.sort_unstable_by_key(Rec::order);
        for rec in pending.drain(..n.min(pending.len())) {
            self.pending -= 1;
            self.take(t, rec);
        }
        self.tracks[t].pending = pending;
    }

    /// Takes every buffered event: call once all events are added.
    pub(crate) fn finish(&mut self) {
        for t in 0..self.tracks.len() {
            let n = self.tracks[t].pending.len();
            self.take_earliest(t, n);
        }
        self.examples.sort_unstable_by_key(|d| d.offset);
    }

    /// Applies the rule to one event of track `t`, in order.
    fn take(&mut self, t: usize, rec: Rec) {
        let tr = &mut self.tracks[t];
        if tr.taken.is_none_or(|taken| taken < rec.order()) {
            tr.taken = Some(rec.order());
        }
        let nested = !tr.begins;
        match rec.phase {
            Phase::Complete(dur) => match close_stack(&mut tr.stack, rec.ts, Some(dur), nested) {
                Walk::Start if tr.stack.len() >= MAX_DEPTH => self.too_deep += 1,
                Walk::Start => tr.stack.push(Open {
                    ts: rec.ts,
                    dur: Some(dur),
                    name: rec.name,
                    cat: rec.cat,
                    index: rec.index,
                }),
                Walk::Drop(other) => {
                    tr.dropped += 1;
                    self.dropped += 1;
                    let dropped = Dropped {
                        track: t,
                        index: rec.index,
                        offset: rec.offset,
                        ts: rec.ts,
                        dur,
                        other_index: other.index,
                        other_ts: other.ts,
                        other_end: other.ts.saturating_add(other.dur.unwrap_or(0)),
                    };
                    self.note_example(dropped);
                    if self.untangle {
                        self.move_to_lane(t, rec, dur);
                    }
                }
            },
            Phase::Begin => {
                close_stack(&mut tr.stack, rec.ts, None, nested);
                if tr.stack.len() >= MAX_DEPTH {
                    self.too_deep += 1;
                    return;
                }
                tr.begins = true;
                tr.stack.push(Open {
                    ts: rec.ts,
                    dur: None,
                    name: rec.name,
                    cat: rec.cat,
                    index: rec.index,
                });
            }
            Phase::End => {
                if tr.stack.is_empty() {
                    return;
                }
                close_stack(&mut tr.stack, rec.ts, None, nested);
                let matching = tr.stack.iter().rposition(|o| {
                    o.dur.is_none()
                        && (rec.cat == 0 || (o.cat != 0 && o.cat == rec.cat))
                        && (rec.name == 0 || o.name == 0 || o.name == rec.name)
                });
                if let Some(i) = matching {
                    tr.stack[i].dur = Some(rec.ts - tr.stack[i].ts);
                    if i + 1 == tr.stack.len() {
                        tr.stack.pop();
                    }
                }
            }
        }
    }

    /// Keeps `d` among the first examples in file order.
    fn note_example(&mut self, d: Dropped) {
        if self.examples.len() < self.examples_cap {
            self.examples.push(d);
        } else if let Some(last) = self.examples.iter_mut().max_by_key(|e| e.offset) {
            if d.offset < last.offset {
                *last = d;
            }
        }
    }

    /// Moves a dropped `X` to the first extra lane of track `t` where it does not overlap.
    fn move_to_lane(&mut self, t: usize, rec: Rec, dur: i64) {
        let tr = &mut self.tracks[t];
        let mut lane = 0;
        loop {
            if lane == tr.lane_stacks.len() {
                tr.lane_stacks.push(Vec::new());
                tr.lanes = tr.lane_stacks.len();
            }
            let stack = &mut tr.lane_stacks[lane];
            let fits = matches!(close_stack(stack, rec.ts, Some(dur), true), Walk::Start);
            if fits && stack.len() < MAX_DEPTH {
                stack.push(Open {
                    ts: rec.ts,
                    dur: Some(dur),
                    name: 0,
                    cat: 0,
                    index: rec.index,
                });
                break;
            }
            lane += 1;
        }
        self.moves.insert(rec.index, (t as u32, lane as u32 + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (ts µs, dur µs) of X events on one track, in file order: the indices dropped.
    fn dropped(events: &[(f64, f64)]) -> Vec<u64> {
        let mut o = Overlaps::new(100, false);
        let mut key = Vec::new();
        track_key(b"n1", b"n2", &mut key);
        for (i, &(ts, dur)) in events.iter().enumerate() {
            o.add(
                &key,
                b"n1",
                b"n2",
                to_ns(ts),
                Phase::Complete(to_ns(dur)),
                0,
                0,
                i as u64,
                i as u64,
            );
        }
        o.finish();
        o.examples.iter().map(|d| d.index).collect()
    }

    #[test]
    fn nested_and_disjoint_slices_stay() {
        assert!(dropped(&[(0.0, 10.0), (1.0, 2.0), (3.0, 7.0), (10.0, 5.0)]).is_empty());
        // Sharing an end, or a start, nests.
        assert!(dropped(&[(0.0, 10.0), (5.0, 5.0), (0.0, 3.0)]).is_empty());
    }

    #[test]
    fn a_slice_crossing_an_end_is_dropped() {
        assert_eq!(dropped(&[(0.0, 10.0), (5.0, 10.0)]), vec![1]);
        // Perfetto's issue 4280: kernels overlapping by a fraction.
        assert_eq!(dropped(&[(3.0, 3.776), (5.0, 2.0)]), vec![1]);
        // The later-starting one is dropped, whatever the file order.
        assert_eq!(dropped(&[(5.0, 10.0), (0.0, 10.0)]), vec![0]);
        // At one ts, the longer one comes first: the shorter nests.
        assert!(dropped(&[(0.0, 1.0), (0.0, 10.0)]).is_empty());
    }

    #[test]
    fn a_dropped_slice_is_not_on_the_stack() {
        // B is dropped, so C (inside B's span, not A's) only has to nest in nothing.
        assert_eq!(dropped(&[(0.0, 10.0), (5.0, 10.0), (12.0, 1.0)]), vec![1]);
    }

    /// An event on thread (1, 2) as the reader gives it.
    fn event(ph: &'static [u8], ts: Option<f64>, dur: Option<f64>, index: u64) -> Event<'static> {
        Event {
            raw: b"{}",
            ph,
            cat: None,
            name: b"",
            pid_key: b"n1",
            thread_key: b"n1\0n2",
            ts,
            dur,
            flow_key: None,
            offset: index,
            index,
            values: [(0, 0); 8],
            args_span: crate::read::events::ARGS_NONE,
            arg_texts: Default::default(),
        }
    }

    #[test]
    fn the_feed_tells_slices_from_the_rest() {
        let mut o = Overlaps::new(10, false);
        let fed: Vec<Fed> = [
            event(b"X", Some(0.0), Some(10.0), 0),
            // Rounds to 0 ns: a slice, as in Perfetto.
            event(b"X", Some(1.0), Some(-0.0004), 1),
            event(b"X", Some(1.0), Some(-0.0006), 2),
            event(b"X", None, None, 3),
            event(b"X", None, Some(1.0), 4),
            event(b"B", None, None, 5),
            event(b"i", Some(1.0), None, 6),
            // Starts inside the first and ends after it: dropped.
            event(b"X", Some(5.0), Some(10.0), 7),
        ]
        .iter()
        .map(|ev| o.feed(ev))
        .collect();
        assert_eq!(
            fed,
            [
                Fed::Slice,
                Fed::Slice,
                Fed::NegativeDuration(-0.0006),
                Fed::NoDuration,
                Fed::Other,
                Fed::Other,
                Fed::Other,
                Fed::Slice,
            ]
        );
        o.finish();
        assert_eq!(o.tracks.len(), 1);
        assert_eq!(o.examples.iter().map(|d| d.index).collect::<Vec<_>>(), [7]);
    }

    #[test]
    fn times_convert_as_perfetto_does() {
        assert_eq!(to_ns(1.0), 1000);
        assert_eq!(to_ns(3.776), 3776);
        assert_eq!(to_ns(5172265116409.504), 5172265116409504);
        assert_eq!(to_ns(-0.0005), -1);
        assert_eq!(to_ns(0.0004), 0);
    }

    #[test]
    fn track_keys_coerce_numbers() {
        let key = |p: &[u8], t: &[u8]| {
            let mut k = Vec::new();
            track_key(p, t, &mut k);
            k
        };
        assert_eq!(key(b"n7", b"n7.9"), key(b"n7.0", b"n7"));
        assert_ne!(key(b"n7", b"s7"), key(b"n7", b"n7"));
        assert_eq!(key(b"n7", b""), key(b"n7", b"n7"));
        assert_eq!(key(b"n-1", b"n3"), key(b"n0", b"n3"));
    }

    #[test]
    fn untangling_moves_to_the_first_lane_that_fits() {
        let mut o = Overlaps::new(10, true);
        let mut key = Vec::new();
        track_key(b"n0", b"n7", &mut key);
        for (i, (ts, dur)) in [(0, 10), (5, 10), (6, 10), (20, 1)].into_iter().enumerate() {
            o.add(
                &key,
                b"n0",
                b"n7",
                ts,
                Phase::Complete(dur),
                0,
                0,
                i as u64,
                0,
            );
        }
        o.finish();
        assert_eq!(o.dropped, 2);
        assert_eq!(o.moves.get(&1), Some(&(0, 1)));
        assert_eq!(o.moves.get(&2), Some(&(0, 2)));
        assert_eq!(o.tracks[0].lanes, 2);
    }

    #[test]
    fn far_out_of_order_events_are_counted_late() {
        let mut o = Overlaps::new(10, false);
        let mut key = Vec::new();
        track_key(b"n0", b"n1", &mut key);
        let n = PENDING_CAP as i64 + 10;
        for i in 0..n {
            o.add(
                &key,
                b"n0",
                b"n1",
                10 + i * 10,
                Phase::Complete(5),
                0,
                0,
                i as u64,
                0,
            );
        }
        o.add(&key, b"n0", b"n1", 0, Phase::Complete(5), 0, 0, n as u64, 0);
        o.finish();
        assert_eq!(o.late, 1);
        assert_eq!(o.dropped, 0);
    }
}
