//! Which events a filtered trace keeps, and the bookkeeping `split`, `filter` and `merge`
//! share while they choose: flow ends bound to the event they belong to ([`Binder`]), flows
//! waiting for their other ends ([`OpenFlows`], [`SourceFlows`]), and the processes and
//! threads whose metadata events a kept trace needs ([`Present`], [`Metadata`]). What a kept
//! trace contains is told in [`crate::tools::split`].

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::read::events::Event;

/// Which events a filtered trace keeps. Empty lists and `None` keep everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FilterSpec {
    /// Keep only events whose `cat` is one of these (events without `cat` are kept).
    pub(crate) include_cats: Vec<String>,
    /// Drop events whose `cat` is one of these.
    pub(crate) exclude_cats: Vec<String>,
    /// Drop events with a `dur` (µs) below this.
    pub(crate) min_dur_us: Option<f64>,
    /// Keep only events that overlap [start, end) in µs (instants: start <= ts < end).
    pub(crate) window_us: Option<(f64, f64)>,
    /// Keep only events whose `pid` is one of these (a number's text, or a string's value).
    pub(crate) pids: Vec<String>,
}

impl FilterSpec {
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(d) = self.min_dur_us {
            if !d.is_finite() || d < 0.0 {
                return Err(Error::InvalidArgument(format!(
                    "min_dur_us must be a finite number >= 0, got {d}"
                )));
            }
        }
        if let Some((s, e)) = self.window_us {
            if !(s.is_finite() && e.is_finite() && s < e) {
                return Err(Error::InvalidArgument(format!(
                    "the window must be START:END with finite START < END, got {s}:{e}"
                )));
            }
        }
        Ok(())
    }

    /// The criteria in words: `cat one of "kernel"; dur >= 5 us`.
    pub(crate) fn describe(&self) -> String {
        let quoted = |items: &[String]| {
            items
                .iter()
                .map(|c| crate::json::render::quoted(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.include_cats.is_empty() {
            parts.push(format!("cat one of {}", quoted(&self.include_cats)));
        }
        if !self.exclude_cats.is_empty() {
            parts.push(format!("cat none of {}", quoted(&self.exclude_cats)));
        }
        if let Some(d) = self.min_dur_us {
            parts.push(format!("dur >= {d} us"));
        }
        if let Some((start, end)) = self.window_us {
            parts.push(format!("a span overlapping [{start}, {end}) us"));
        }
        if !self.pids.is_empty() {
            parts.push(format!("pid one of {}", self.pids.join(", ")));
        }
        parts.join("; ")
    }

    pub(crate) fn is_everything(&self) -> bool {
        *self == FilterSpec::default()
    }

    /// Whether a non-flow, non-metadata event is kept.
    pub(crate) fn keeps(&self, ev: &Event<'_>) -> bool {
        if let Some(cat) = ev.cat {
            if !self.include_cats.is_empty() && !self.include_cats.iter().any(|c| c == cat) {
                return false;
            }
            if self.exclude_cats.iter().any(|c| c == cat) {
                return false;
            }
        }
        if let (Some(min), Some(dur)) = (self.min_dur_us, ev.dur) {
            if dur < min {
                return false;
            }
        }
        self.keeps_place(ev, ev.dur)
    }

    /// The `pid` and window tests alone (an event lasting `dur`).
    pub(crate) fn keeps_place(&self, ev: &Event<'_>, dur: Option<f64>) -> bool {
        if !self.pids.is_empty() && !self.pids.iter().any(|p| p.as_bytes() == ev.pid_text()) {
            return false;
        }
        if let Some((start, end)) = self.window_us {
            let Some(ts) = ev.ts else { return false };
            if ts >= end {
                return false;
            }
            match dur {
                Some(d) if d > 0.0 => ts + d > start,
                _ => ts >= start,
            }
        } else {
            true
        }
    }
}

/// The last non-flow event read on a thread, for binding flow ends.
pub(crate) struct LastOnThread {
    pub(crate) thread: Vec<u8>,
    pub(crate) ts: f64,
    pub(crate) end: f64,
    /// Where it went: `None` when dropped, else its part (or, while surveying, its time
    /// in ns).
    pub(crate) part: Option<i64>,
}

/// Binds flow ends to the event they belong to (see the module docs).
#[derive(Default)]
pub(crate) struct Binder {
    pub(crate) last: Option<LastOnThread>,
}

impl Binder {
    /// Notes where a non-flow event went.
    pub(crate) fn saw(&mut self, ev: &Event<'_>, part: Option<i64>) {
        let Some(ts) = ev.ts else {
            self.last = None;
            return;
        };
        let end = ts + ev.dur.unwrap_or(0.0).max(0.0);
        match &mut self.last {
            Some(l) => {
                l.thread.clear();
                l.thread.extend_from_slice(ev.thread_key);
                l.ts = ts;
                l.end = end;
                l.part = part;
            }
            None => {
                self.last = Some(LastOnThread {
                    thread: ev.thread_key.to_vec(),
                    ts,
                    end,
                    part,
                })
            }
        }
    }

    /// Where the event a flow end binds to went: `Some(part)` (`None` inside when it was
    /// dropped), or `None` when the flow end binds to nothing.
    pub(crate) fn bound(&self, ev: &Event<'_>) -> Option<Option<i64>> {
        let l = self.last.as_ref()?;
        let ts = ev.ts?;
        (l.thread == ev.thread_key && l.ts <= ts && ts <= l.end).then_some(l.part)
    }
}

/// Flow ends of one output waiting for their other ends.
#[derive(Default)]
pub(crate) struct OpenFlows {
    pub(crate) map: HashMap<Box<[u8]>, PendingFlow>,
}

#[derive(Default)]
pub(crate) struct PendingFlow {
    pub(crate) events: Vec<Box<[u8]>>,
    pub(crate) starts: u32,
    pub(crate) finishes: u32,
}

impl OpenFlows {
    /// Adds a flow end; returns the events of the flow once it is complete.
    pub(crate) fn add(&mut self, key: &[u8], ph: &[u8], raw: &[u8]) -> Option<Vec<Box<[u8]>>> {
        let p = match self.map.get_mut(key) {
            Some(p) => p,
            None => self.map.entry(key.into()).or_default(),
        };
        p.events.push(raw.into());
        match ph {
            b"s" => p.starts += 1,
            b"f" => p.finishes += 1,
            _ => {}
        }
        if p.starts > 0 && p.finishes > 0 {
            self.map.remove(key).map(|p| p.events)
        } else {
            None
        }
    }

    /// Flow ends left without their other end.
    pub(crate) fn left(&self) -> u64 {
        self.map.values().map(|p| p.events.len() as u64).sum()
    }

    /// Flow ends left without their other end: (those whose flow has no other end in the
    /// whole source either, the others).
    pub(crate) fn left_by_source(&self, source: &SourceFlows) -> (u64, u64) {
        let mut counts = (0, 0);
        for (key, p) in &self.map {
            let n = p.events.len() as u64;
            if source.open.contains_key(key) {
                counts.0 += n;
            } else {
                counts.1 += n;
            }
        }
        counts
    }
}

/// The flows of the whole source still lacking an end (`s` or `f`) as it is read: once it
/// is all read, the flows that no window edge or criterion cut, but the source itself left
/// unpaired (GPU traces have many: Kineto drops activities past its buffers, or before the
/// window it records).
#[derive(Default)]
pub(crate) struct SourceFlows {
    /// (starts, finishes) of each flow with one kind of end only so far.
    pub(crate) open: HashMap<Box<[u8]>, (bool, bool)>,
}

impl SourceFlows {
    pub(crate) fn add(&mut self, key: &[u8], ph: &[u8]) {
        let (s, f) = (ph == b"s", ph == b"f");
        match self.open.get_mut(key) {
            Some(ends) => {
                ends.0 |= s;
                ends.1 |= f;
                if ends.0 && ends.1 {
                    self.open.remove(key);
                }
            }
            None if !(s && f) => {
                self.open.insert(key.into(), (s, f));
            }
            None => {}
        }
    }
}

/// The processes and threads kept events are on, and the metadata events to choose from.
#[derive(Default)]
pub(crate) struct Present {
    pub(crate) pids: HashSet<Box<[u8]>>,
    pub(crate) threads: HashSet<Box<[u8]>>,
    pub(crate) last_thread: Vec<u8>,
}

impl Present {
    pub(crate) fn add(&mut self, ev: &Event<'_>) {
        if self.last_thread == ev.thread_key {
            return;
        }
        self.last_thread.clear();
        self.last_thread.extend_from_slice(ev.thread_key);
        if !self.threads.contains(ev.thread_key) {
            self.threads.insert(ev.thread_key.into());
        }
        if !self.pids.contains(ev.pid_key) {
            self.pids.insert(ev.pid_key.into());
        }
    }

    pub(crate) fn wants(&self, m: &Metadata) -> bool {
        if m.thread_level {
            self.threads.contains(m.thread_key.as_ref())
        } else {
            self.pids.contains(m.pid_key.as_ref())
        }
    }
}

/// A metadata event kept for the end of an output.
pub(crate) struct Metadata {
    pub(crate) raw: Box<[u8]>,
    pub(crate) pid_key: Box<[u8]>,
    pub(crate) thread_key: Box<[u8]>,
    pub(crate) thread_level: bool,
}

impl Metadata {
    pub(crate) fn of(ev: &Event<'_>) -> Self {
        Metadata {
            raw: ev.raw.into(),
            pid_key: ev.pid_key.into(),
            thread_key: ev.thread_key.into(),
            thread_level: ev.is_thread_metadata(),
        }
    }
}
