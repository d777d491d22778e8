//! What `summary` keeps of each event, read in one streaming pass over a trace file by the
//! crate's reader (`crate::events`): the fields each rule set needs, per event, and nothing
//! of the event's text.
//!
//! Memory (see `docs/summary.md`): `exact` keeps one [`GpuRow`] (40 bytes) per GPU activity
//! and one launch time per runtime event with a correlation (16 bytes), names once each;
//! `hta` keeps one [`HtaRow`] (48 bytes) per event with a `dur` and a `cat` (HTA keeps a
//! pandas row of every event), because its last-step filter and its runtime links are only
//! known once the file has been read.

use std::collections::HashMap;

use crate::error::Result;
use crate::json::decimal::ns_of;
use crate::read::events::{Event, Visitor, SLOT_DUR, SLOT_TS};
use crate::read::ranks::distributed_rank;

use crate::read::categories::is_memory_category;
pub(crate) use crate::read::categories::{GPU_CATS, RUNTIME_CATS};

/// What a GPU activity is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Computation = 0,
    Communication = 1,
    Memory = 2,
    /// Only under the `hta` rules: names with "Sync" or "Memcpy" inside.
    Other = 3,
}

impl Kind {
    /// What an activity named `name` is doing, its category naming memory or not.
    pub(crate) fn of(memory_category: bool, name: &[u8]) -> Kind {
        if memory_category || is_memory_name(name) {
            Kind::Memory
        } else if is_communication(name) {
            Kind::Communication
        } else {
            Kind::Computation
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Computation => "COMPUTATION",
            Kind::Communication => "COMMUNICATION",
            Kind::Memory => "MEMORY",
            Kind::Other => "OTHER",
        }
    }
}

/// `nccl...Kernel`: NCCL and RCCL collectives.
pub(crate) fn is_communication(name: &[u8]) -> bool {
    name.starts_with(b"nccl") && contains(&name[4..], b"Kernel")
}

pub(crate) fn is_memory_name(name: &[u8]) -> bool {
    name.starts_with(b"Memcpy") || name.starts_with(b"Memset") || name.starts_with(b"dma")
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// One GPU activity under the `exact` rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuRow {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) stream: i64,
    pub(crate) correlation: i64,
    pub(crate) name: u32,
    pub(crate) kind: Kind,
}

/// One event with a `dur` and a `cat` under the `hta` rules (times in µs as HTA reads them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HtaRow {
    pub(crate) index: u64,
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) stream: i64,
    pub(crate) correlation: i64,
    pub(crate) name: u32,
    /// The category is one of [`GPU_CATS`].
    pub(crate) gpu_cat: bool,
}

/// Which facts a pass keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rules {
    Exact,
    Hta,
}

/// Names kept once each, numbered in the order they are met.
#[derive(Default)]
pub(crate) struct Names {
    ids: HashMap<Vec<u8>, u32>,
    pub(crate) names: Vec<Vec<u8>>,
}

impl Names {
    pub(crate) fn id(&mut self, name: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.to_vec(), id);
        self.names.push(name.to_vec());
        id
    }
}

/// Everything one pass over a file keeps.
pub(crate) struct Collected {
    pub(crate) rules: Rules,
    /// `exact`: whether the GPU activities and launch times are kept (`diff` reads them
    /// from the attribution's records instead, [`Collected::without_gpu`]).
    keep_gpu: bool,
    pub(crate) names: Names,
    pub(crate) gpu: Vec<GpuRow>,
    /// `exact`: correlation -> start (ns) of its first launch.
    pub(crate) launches: HashMap<i64, i64>,
    /// `ProfilerStep#N` CPU slices in file order: (name, start in ns where `ts` is a
    /// number, dur in ns).
    pub(crate) steps: Vec<(String, Option<i64>, i64)>,
    pub(crate) hta_rows: Vec<HtaRow>,
    /// `hta`: some event's `ts` is missing or not an integer (HTA then rounds times).
    pub(crate) float_ts: bool,
    /// `hta`: the first element of `traceEvents` (its index 0) has a row.
    pub(crate) hta_step_names: Vec<String>,
    /// `hta`: the rank of HTA's regex (`"rank":` then whitespace and digits), first match.
    pub(crate) hta_rank: Option<i64>,
    /// `distributedInfo.rank`, when an integer.
    pub(crate) distributed_rank: Option<i64>,
    pub(crate) events: u64,
}

impl Collected {
    pub(crate) fn new(rules: Rules) -> Self {
        Collected {
            rules,
            keep_gpu: true,
            names: Names::default(),
            gpu: Vec::new(),
            launches: HashMap::new(),
            steps: Vec::new(),
            hta_rows: Vec::new(),
            float_ts: false,
            hta_step_names: Vec::new(),
            hta_rank: None,
            distributed_rank: None,
            events: 0,
        }
    }

    /// A pass under the `exact` rules that keeps the steps, the rank and the count of
    /// events only: the figures are made from records another visitor of the same read
    /// keeps (`exact::Activities`).
    pub(crate) fn without_gpu() -> Self {
        Collected {
            keep_gpu: false,
            ..Collected::new(Rules::Exact)
        }
    }

    fn exact_event(&mut self, ev: &Event<'_>, cat: &str) {
        if !self.keep_gpu {
            return;
        }
        let is_gpu = GPU_CATS.contains(&cat);
        if is_gpu && ev.ph == b"X" {
            let (Some(start), Some(dur)) = (
                ns_of(ev.value_text(SLOT_TS)),
                ns_of(ev.value_text(SLOT_DUR)),
            ) else {
                return;
            };
            let (stream, correlation) = ev.arg_texts().stream_and_correlation();
            let kind = Kind::of(is_memory_category(cat), ev.name);
            let name = self.names.id(ev.name);
            self.gpu.push(GpuRow {
                start,
                end: start.saturating_add(dur),
                stream,
                correlation,
                name,
                kind,
            });
        } else if RUNTIME_CATS.contains(&cat) {
            let correlation = ev.arg_texts().summary_correlation();
            if correlation != -1 {
                if let Some(start) = ns_of(ev.value_text(SLOT_TS)) {
                    self.launches.entry(correlation).or_insert(start);
                }
            }
        }
    }

    fn hta_event(&mut self, ev: &Event<'_>) {
        let ts_text = ev.value_text(SLOT_TS);
        match ts_text {
            Some(t) if t.iter().all(|b| b.is_ascii_digit() || *b == b'-') => {}
            _ => self.float_ts = true,
        }
        if self.hta_rank.is_none() {
            self.hta_rank = hta_rank_in(ev.raw);
        }
        for text in [Some(ev.name), ev.cat.map(str::as_bytes)]
            .into_iter()
            .flatten()
        {
            if contains(text, b"ProfilerStep") {
                let s = String::from_utf8_lossy(text).into_owned();
                if !self.hta_step_names.contains(&s) {
                    self.hta_step_names.push(s);
                }
            }
        }
        let (Some(cat), Some(ts), Some(dur)) = (ev.cat, ev.ts, ev.dur) else {
            return;
        };
        if cat == "Trace" {
            return;
        }
        let (stream, correlation) = ev.arg_texts().stream_and_correlation();
        let name = self.names.id(ev.name);
        self.hta_rows.push(HtaRow {
            index: ev.index,
            ts,
            dur,
            stream,
            correlation,
            name,
            gpu_cat: GPU_CATS.contains(&cat),
        });
    }
}

/// HTA's rank regex on some text: `"rank":`, at least one whitespace, digits.
pub(crate) fn hta_rank_in(text: &[u8]) -> Option<i64> {
    let key = b"\"rank\":";
    let mut from = 0;
    while let Some(i) = text[from..].windows(key.len()).position(|w| w == key) {
        let rest = &text[from + i + key.len()..];
        let ws = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let digits = rest[ws..].iter().take_while(|b| b.is_ascii_digit()).count();
        if ws > 0 && digits > 0 {
            return std::str::from_utf8(&rest[ws..ws + digits])
                .ok()?
                .parse()
                .ok();
        }
        from += i + key.len();
    }
    None
}

impl Visitor for Collected {
    fn header(&mut self, key: &[u8], raw: &[u8], _after_events: bool) -> Result<()> {
        if self.rules == Rules::Hta && self.hta_rank.is_none() {
            self.hta_rank = hta_rank_in(raw);
        }
        if key == b"distributedInfo" {
            self.distributed_rank = distributed_rank(raw);
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.events += 1;
        if ev.ph == b"X"
            && ev.name.starts_with(b"ProfilerStep#")
            && ev.cat != Some("gpu_user_annotation")
        {
            if let Some(dur) = ns_of(ev.value_text(SLOT_DUR)) {
                let name = String::from_utf8_lossy(ev.name).into_owned();
                self.steps.push((name, ns_of(ev.value_text(SLOT_TS)), dur));
            }
        }
        match self.rules {
            Rules::Exact => {
                if let Some(cat) = ev.cat {
                    self.exact_event(ev, cat);
                }
            }
            Rules::Hta => self.hta_event(ev),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::decimal::whole_number;
    use crate::json::object::{member, Duplicates};
    use crate::read::events::{read_trace_with, ReadOptions};

    /// An integer argument as the text has it, -1 where missing or not a whole number.
    fn int_arg(value: Option<&[u8]>) -> i64 {
        value.and_then(whole_number).unwrap_or(-1)
    }

    /// Per event (stream, correlation) as read, and as two lookups of the text find them.
    struct Seen(Vec<((i64, i64), (i64, i64))>);

    impl Visitor for Seen {
        fn header(&mut self, _: &[u8], _: &[u8], _: bool) -> Result<()> {
            Ok(())
        }
        fn event(&mut self, ev: &Event<'_>) -> Result<()> {
            let looked_up = match member(ev.raw, b"args", Duplicates::Last) {
                Some(args) if args.first() == Some(&b'{') => (
                    int_arg(member(args, b"stream", Duplicates::Last)),
                    int_arg(member(args, b"correlation", Duplicates::Last)),
                ),
                _ => (-1, -1),
            };
            self.0
                .push((ev.arg_texts().stream_and_correlation(), looked_up));
            Ok(())
        }
    }

    #[test]
    fn stream_and_correlation_are_the_last_of_each() {
        let text = r#"{"traceEvents": [
 {"ph": "X", "args": {"stream": 7, "correlation": 1}},
 {"ph": "X", "args": {"stream": 7, "x": [{"stream": 2}], "stream": 9, "correlation": 1.5}},
 {"ph": "X", "args": {"correlation": 3}, "args": {"stream": 4}},
 {"ph": "X", "args": "stream"},
 {"ph": "X", "args": {}},
 {"ph": "X"},
 {"p\u0068": "X", "args": {"stream": 5, "correlation": 6, "stream": 8}}
]}"#;
        let dir = crate::testing::scratch("summary-args");
        let path = dir.join("t.json");
        std::fs::write(&path, text).unwrap();
        let mut seen = Seen(Vec::new());
        read_trace_with(&path, &mut seen, &mut |_| Ok(()), ReadOptions::default()).unwrap();
        let got: Vec<(i64, i64)> = seen.0.iter().map(|s| s.0).collect();
        let want = [
            (7, 1),
            (9, -1),
            (4, -1),
            (-1, -1),
            (-1, -1),
            (-1, -1),
            (8, 6),
        ];
        assert_eq!(got, want);
        assert!(seen.0.iter().all(|(got, looked_up)| got == looked_up));
    }
}
