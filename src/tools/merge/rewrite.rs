//! Passes 3 and 4 of a merge, on a reader thread: one source's events rewritten into the
//! merged trace's text (pid, `ts`, flow and async ids), filtered and cut into parts as
//! `split` does, then counted for the survey or gathered into blocks for the writer.

use std::path::Path;

use crate::error::{Error, FormatKind, Result, TraceFormat};
use crate::json::decimal::Decimal;
use crate::json::object::{member, string_body, Duplicates::Last};
use crate::json::render::push_int;
use crate::read::events::{Event, Visitor, SLOT_ID, SLOT_PID, SLOT_TS};
use crate::read::filter::{Binder, FilterSpec, OpenFlows, Present};
use crate::tools::parts::{keep_text, Histogram, Plan};

use super::ids::{push_id, Process, Processes, ID_PHASES, PID_STRIDE};
use super::probe::Base;
use super::Member;
use crate::read::sources::{Msg, Reader};

/// Bytes of events a reader gathers before handing them to the writer.
pub(super) const BLOCK: usize = 1 << 20;

/// What a reader needs to know about its source.
pub(super) struct SourceCtx<'a> {
    pub(super) path: &'a Path,
    /// 0-based position, and the number of sources.
    pub(super) index: usize,
    pub(super) sources: usize,
    pub(super) base: Base,
    /// Added to every `ts` (ns), and the same in µs for filter decisions.
    pub(super) offset_ns: i128,
    pub(super) offset_us: f64,
    pub(super) spec: &'a FilterSpec,
    /// Filter and flow rules apply (a filter or parts).
    pub(super) cutting: bool,
    pub(super) plan: Option<&'a Plan>,
    pub(super) parts: usize,
}

/// A metadata event kept for the end (when filtering): its merged text and whose it is.
struct KeptMeta {
    text: Box<[u8]>,
    pid_key: Box<[u8]>,
    thread_key: Box<[u8]>,
    thread_level: bool,
}

/// Where a reader's events go: blocks for the writer, or the survey's histogram.
pub(super) enum ReaderOut<'c, 'q> {
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
pub(super) struct Block {
    pub(super) part: usize,
    pub(super) text: Vec<u8>,
    pub(super) events: u64,
}

/// What a reader reports when its source is read.
#[derive(Default)]
pub(super) struct SourceDone {
    pub(super) header: Vec<Member>,
    pub(super) processes: Vec<Process>,
    /// Per process, the outputs it has events in.
    pub(super) present: Vec<Vec<bool>>,
    pub(super) events_read: u64,
    pub(super) events_written: u64,
    pub(super) flow_events_cut: u64,
    pub(super) json_bytes_read: u64,
    /// First `ts` and last end of its events (ns, merged clock).
    pub(super) span: Option<(i128, i128)>,
    /// Survey only.
    pub(super) histogram: Option<(Histogram, u64)>,
    pub(super) metadata_bytes: usize,
}

/// Reads one source, rewriting its events into the merged trace's text.
pub(super) struct Rewriting<'c, 'q> {
    ctx: &'c SourceCtx<'c>,
    out: ReaderOut<'c, 'q>,
    processes: Processes,
    pub(super) header: Vec<Member>,
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
    pub(super) fn new(ctx: &'c SourceCtx<'c>, out: ReaderOut<'c, 'q>) -> Self {
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
    pub(super) fn finish(mut self, json_bytes_read: u64) -> Result<SourceDone> {
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
            args_span: ev.args_span,
            arg_texts: ev.arg_texts.clone(),
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
