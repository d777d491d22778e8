//! Cutting a trace file into traces people can open: `kinetrace filter` (one trace of the
//! events a [`FilterSpec`] keeps) and `kinetrace split` (parts, each a contiguous time
//! window of at most a given size). Both read `.json` or gzip of any number of members with
//! the strict lexer of [`crate::json::lexer`] and copy every kept event's text verbatim.
//!
//! An *event* here is one element of `traceEvents`; a *flow end* is an `s`, `t` or `f`
//! event, and a *flow* all the ends sharing a (`cat`, `id`). What a kept trace contains:
//! - every top-level key of the source, in the source's order, with its text unchanged
//!   (plus, in a part of a split, a `kinetrace_part` key first);
//! - the kept events, in the source's order;
//! - a flow only when all its ends are kept (in the same part); the others are dropped and
//!   counted: in `flow_events_unpaired` when the source has no other end of their flow
//!   either, else in `flow_events_cut`;
//! - the metadata (`M`) events of the processes (`pid`) and threads (`pid`, `tid`) that
//!   some kept event is on, written after the others.
//!
//! A flow end *binds* to the non-flow event read just before it, when that event is on the
//! flow end's thread and its span contains the flow's `ts` (torch and Kineto write a flow
//! end right after the activity it belongs to): it is kept when that event is kept, and goes to that event's part, so a
//! flow never leaves its activity behind. An unbound flow end is judged by its own `pid`
//! and `ts`.
//!
//! Both read through [`crate::read::events`] (a plain `.json` in parallel chunks). `filter` reads
//! the input once. `split` reads it twice: the first pass collects the
//! header, the metadata events and a histogram of event bytes over time (at most
//! [`MAX_CELLS`](crate::tools::parts::MAX_CELLS) cells; the cell width doubles as needed, so empty stretches cost nothing),
//! from which it cuts the windows; the second pass writes each event into its part. Parts
//! are written as plain temporary files in the output directory and, for gzip output,
//! compressed one after the other with the parallel encoder; only when every part is
//! complete are they renamed to their final names, so a failure leaves none of them.
//!
//! Memory, whatever the input size: the header (top-level keys other than `traceEvents`)
//! and the metadata events, each capped at [`MAX_KEPT_TEXT`](crate::tools::parts::MAX_KEPT_TEXT); the histogram (at most
//! [`MAX_CELLS`](crate::tools::parts::MAX_CELLS) cells, about 10 MiB); per part a 64 KiB write buffer and the set of its
//! threads; and the open-flow table: the text of flow ends whose other end has not been
//! read yet (per part), which is empty between flows in torch's and Kineto's layout but
//! holds the `ac2g` starts of CPU launches until their kernels are read when CPU activities
//! come first (about 150 bytes per pending flow end), and the keys of the source's flows
//! still lacking an end (about 60 bytes each, [`SourceFlows`](crate::read::filter::SourceFlows)). Reading adds its chunks in
//! flight (see [`crate::read::events`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::output::sink::{Encoding, Sink};
use crate::read::events::{read_trace, Event, Visitor};
use crate::read::filter::{Binder, FilterSpec, Metadata, OpenFlows, Present, SourceFlows};
use crate::tools::parts::{
    finish_parts, keep_text, part_head, renamed, stem, ts_ns, Histogram, PartStats, Plan,
    SinkWrite, Temps, TraceWriter, MAX_PARTS, PART_BUFFER,
};

/// What [`filter`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FilterStats {
    /// Events in the source (all of `traceEvents`).
    pub(crate) events_read: u64,
    /// Events written, metadata included.
    pub(crate) events_written: u64,
    /// Metadata events written.
    pub(crate) metadata_written: u64,
    /// Flow ends dropped because another end of their flow was not kept.
    pub(crate) flow_events_cut: u64,
    /// Flow ends dropped because their flow has no other end in the source at all.
    pub(crate) flow_events_unpaired: u64,
    /// Bytes of JSON read and written (decompressed).
    pub(crate) json_bytes_read: u64,
    pub(crate) json_bytes_written: u64,
}

struct Filtering<'s, W: Write> {
    spec: &'s FilterSpec,
    trace_name: Option<&'s str>,
    path: &'s Path,
    out: TraceWriter<W>,
    binder: Binder,
    flows: OpenFlows,
    source_flows: SourceFlows,
    present: Present,
    metadata: Vec<Metadata>,
    metadata_bytes: usize,
    header_bytes: usize,
    /// Top-level members after `traceEvents`, written once the array is closed.
    trailing: Vec<Box<[u8]>>,
    events_read: u64,
    kept: u64,
}

impl<W: Write> Filtering<'_, W> {
    fn write(&mut self, raw: &[u8]) -> Result<()> {
        self.out
            .event(raw)
            .map_err(|e| Error::io("cannot write the filtered trace", e))
    }
}

impl<W: Write> Visitor for Filtering<'_, W> {
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        keep_text(
            &mut self.header_bytes,
            raw.len(),
            "top-level keys",
            self.path,
        )?;
        let renamed = renamed(key, self.trace_name);
        let raw = renamed.as_deref().unwrap_or(raw);
        if after_events {
            self.trailing.push(raw.into());
            return Ok(());
        }
        self.out
            .member(raw)
            .map_err(|e| Error::io("cannot write the filtered trace", e))
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        if !self.out.in_events && self.events_read == 0 {
            self.out
                .open_events()
                .map_err(|e| Error::io("cannot write the filtered trace", e))?;
        }
        self.events_read += 1;
        if ev.is_metadata() {
            keep_text(
                &mut self.metadata_bytes,
                ev.raw.len(),
                "metadata events",
                self.path,
            )?;
            self.metadata.push(Metadata::of(ev));
            return Ok(());
        }
        if let Some(key) = ev.flow_key {
            self.source_flows.add(key, ev.ph);
            let kept = match self.binder.bound(ev) {
                Some(part) => part.is_some(),
                None => self.spec.keeps_place(ev, None),
            };
            if kept {
                self.present.add(ev);
                if let Some(all) = self.flows.add(key, ev.ph, ev.raw) {
                    for raw in all {
                        self.kept += 1;
                        self.write(&raw)?;
                    }
                }
            }
            return Ok(());
        }
        let kept = self.spec.keeps(ev);
        self.binder.saw(ev, kept.then_some(0));
        if kept {
            self.present.add(ev);
            self.kept += 1;
            self.write(ev.raw)?;
        }
        Ok(())
    }
}

/// Writes to `dst` the trace at `src` with only the events `spec` keeps (see the module
/// docs for what a kept trace contains). The output is atomic ([`crate::output::sink`]); it is an
/// error, and nothing is written, when no event is kept. `trace_name` replaces the value
/// of a `traceName` key (an export filtered from a temporary file names its destination).
pub(crate) fn filter(
    src: &Path,
    dst: &Path,
    spec: &FilterSpec,
    encoding: Encoding,
    trace_name: Option<&str>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<FilterStats> {
    spec.validate()?;
    let sink = Sink::create(dst, encoding)?;
    let mut state = Filtering {
        spec,
        trace_name,
        path: src,
        out: TraceWriter::new(SinkWrite(sink)),
        binder: Binder::default(),
        flows: OpenFlows::default(),
        source_flows: SourceFlows::default(),
        present: Present::default(),
        metadata: Vec::new(),
        metadata_bytes: 0,
        header_bytes: 0,
        trailing: Vec::new(),
        events_read: 0,
        kept: 0,
    };
    let json_bytes_read = read_trace(src, &mut state, progress)?;
    if state.kept == 0 {
        if spec.is_everything() {
            return Err(Error::not_a_trace(src, "the trace has no events to keep"));
        }
        return Err(Error::InvalidArgument(format!(
            "{}: the filter selects no events (none has {})",
            src.display(),
            spec.describe()
        )));
    }
    let mut metadata_written = 0;
    let wio = |e| Error::io("cannot write the filtered trace", e);
    if !state.out.in_events {
        state.out.open_events().map_err(wio)?;
    }
    for m in std::mem::take(&mut state.metadata) {
        if state.present.wants(&m) {
            metadata_written += 1;
            state.out.event(&m.raw).map_err(wio)?;
        }
    }
    state.out.close_events().map_err(wio)?;
    for raw in std::mem::take(&mut state.trailing) {
        state.out.member(&raw).map_err(wio)?;
    }
    state.out.end().map_err(wio)?;
    let events_written = state.out.events;
    let json_bytes_written = state.out.bytes;
    let (flow_events_unpaired, flow_events_cut) = state.flows.left_by_source(&state.source_flows);
    state.out.out.0.finish()?;
    Ok(FilterStats {
        events_read: state.events_read,
        events_written,
        metadata_written,
        flow_events_cut,
        flow_events_unpaired,
        json_bytes_read,
        json_bytes_written,
    })
}

/// The first pass of a split.
struct Survey<'s> {
    path: &'s Path,
    trace_name: Option<&'s str>,
    before: Vec<Box<[u8]>>,
    after: Vec<Box<[u8]>>,
    header_bytes: usize,
    metadata: Vec<Metadata>,
    metadata_bytes: usize,
    histogram: Histogram,
    /// Bytes of events without a `ts` (they go to the first part).
    untimed_bytes: u64,
    binder: Binder,
    flows: SourceFlows,
    events: u64,
}

impl Visitor for Survey<'_> {
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        keep_text(
            &mut self.header_bytes,
            raw.len(),
            "top-level keys",
            self.path,
        )?;
        let renamed = renamed(key, self.trace_name);
        let raw = renamed.as_deref().unwrap_or(raw);
        if after_events {
            self.after.push(raw.into());
        } else {
            self.before.push(raw.into());
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.events += 1;
        if ev.is_metadata() {
            keep_text(
                &mut self.metadata_bytes,
                ev.raw.len() + 2,
                "metadata events",
                self.path,
            )?;
            self.metadata.push(Metadata::of(ev));
            return Ok(());
        }
        if let Some(key) = ev.flow_key {
            self.flows.add(key, ev.ph);
        }
        let at = if ev.is_flow() {
            match self.binder.bound(ev) {
                Some(at) => at,
                None => ev.ts.map(ts_ns),
            }
        } else {
            let at = ev.ts.map(ts_ns);
            self.binder.saw(ev, at);
            at
        };
        let bytes = ev.raw.len() as u64 + 2;
        match at {
            Some(at) => self.histogram.add(at, bytes),
            None => self.untimed_bytes += bytes,
        }
        Ok(())
    }
}

/// What [`split`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SplitStats {
    pub(crate) parts: Vec<PartStats>,
    /// Events in the source (all of `traceEvents`).
    pub(crate) events_read: u64,
    /// Flow ends dropped because their flow crosses a window edge.
    pub(crate) flow_events_cut: u64,
    /// Flow ends dropped because their flow has no other end in the source at all.
    pub(crate) flow_events_unpaired: u64,
    /// Bytes of JSON read (decompressed, one pass).
    pub(crate) json_bytes_read: u64,
    /// Parts over the size asked for (when more than that falls in one histogram cell).
    pub(crate) oversized_parts: u64,
}

/// The second pass of a split.
struct Parting<'s> {
    plan: &'s Plan,
    outs: Vec<PartOut>,
    binder: Binder,
}

struct PartOut {
    w: TraceWriter<BufWriter<File>>,
    flows: OpenFlows,
    present: Present,
    temp: PathBuf,
}

impl Visitor for Parting<'_> {
    fn header(&mut self, _key: &[u8], _raw: &[u8], _after_events: bool) -> Result<()> {
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        if ev.is_metadata() {
            return Ok(());
        }
        if let Some(key) = ev.flow_key {
            let part = match self.binder.bound(ev) {
                Some(Some(p)) => p as usize,
                _ => self.plan.part_of(ev.ts),
            };
            let out = &mut self.outs[part];
            out.present.add(ev);
            if let Some(all) = out.flows.add(key, ev.ph, ev.raw) {
                for raw in all {
                    out.w.event(&raw).map_err(|e| part_error(out, e))?;
                }
            }
            return Ok(());
        }
        let part = self.plan.part_of(ev.ts);
        self.binder.saw(ev, Some(part as i64));
        let out = &mut self.outs[part];
        out.present.add(ev);
        out.w.event(ev.raw).map_err(|e| part_error(out, e))
    }
}

fn part_error(out: &PartOut, e: std::io::Error) -> Error {
    Error::io(format!("cannot write {}", out.temp.display()), e)
}

/// How a split is done.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SplitOptions {
    /// Most bytes of JSON per part.
    pub(crate) max_bytes: u64,
    /// Where the parts go (the source's directory when `None`).
    pub(crate) out_dir: Option<PathBuf>,
    /// Gzip output (level, threads), or plain JSON; `None`: like the source.
    pub(crate) gzip: Option<Option<(u32, usize)>>,
    /// Level and threads for gzip output when `gzip` is `None` and the source is gzip.
    pub(crate) default_gzip: (u32, usize),
    /// The stem of the part names (default: the source's name without its suffix).
    pub(crate) stem: Option<String>,
    /// What the part names end with (default `.json`, or `.json.gz` for gzip parts).
    pub(crate) suffix: Option<String>,
    /// Replaces the value of a `traceName` key.
    pub(crate) trace_name: Option<String>,
}

/// Splits the trace at `src` into parts by time window, each at most `max_bytes` of JSON
/// (see the module docs). Reads the input twice; the parts appear all together at the end,
/// or none of them.
pub(crate) fn split(
    src: &Path,
    options: &SplitOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<SplitStats> {
    if options.max_bytes == 0 {
        return Err(Error::InvalidArgument(
            "the part size must be more than 0".into(),
        ));
    }
    let target = Target::of(src, options)?;
    // Pass 1: header, metadata, histogram.
    let mut survey = Survey {
        path: src,
        trace_name: options.trace_name.as_deref(),
        before: Vec::new(),
        after: Vec::new(),
        header_bytes: 0,
        metadata: Vec::new(),
        metadata_bytes: 0,
        histogram: Histogram::default(),
        untimed_bytes: 0,
        binder: Binder::default(),
        flows: SourceFlows::default(),
        events: 0,
    };
    let json_bytes_read = read_trace(src, &mut survey, progress)?;
    let plan = plan_parts(
        src,
        &mut survey,
        &target,
        options.max_bytes,
        json_bytes_read,
    )?;
    // Pass 2: every event into its part's temporary file.
    let finals = target.finals(plan.firsts.len());
    let mut temps = Temps::default();
    let outs = open_parts(&plan, &finals, &target, &survey, &mut temps)?;
    let mut parting = Parting {
        plan: &plan,
        outs,
        binder: Binder::default(),
    };
    read_trace(src, &mut parting, progress)?;
    let mut stats = SplitStats {
        events_read: survey.events,
        json_bytes_read,
        ..SplitStats::default()
    };
    let plain_temps = close_parts(parting.outs, &plan, &finals, &survey, options, &mut stats)?;
    finish_parts(&plain_temps, &finals, target.gzip, &mut temps, &mut || {
        progress(json_bytes_read)
    })?;
    Ok(stats)
}

/// Where a split's parts go and what they are called.
struct Target {
    /// The source's file name (each part names it).
    name: String,
    stem: String,
    suffix: String,
    dir: PathBuf,
    /// Gzip parts (level, threads), or plain JSON.
    gzip: Option<(u32, usize)>,
}

impl Target {
    fn of(src: &Path, options: &SplitOptions) -> Result<Target> {
        let name = src
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".into());
        let stem = options
            .stem
            .clone()
            .unwrap_or_else(|| stem(&name).to_string());
        let dir = match &options.out_dir {
            Some(d) => d.clone(),
            None => src
                .parent()
                .map(Path::to_path_buf)
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| PathBuf::from(".")),
        };
        let src_is_gzip = {
            let mut head = [0u8; 2];
            let mut f = File::open(src)
                .map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
            let n = std::io::Read::read(&mut f, &mut head)
                .map_err(|e| Error::io(format!("cannot read {}", src.display()), e))?;
            n >= 1 && head[0] == crate::read::members::GZIP_MAGIC[0]
        };
        let gzip = match options.gzip {
            Some(g) => g,
            None => src_is_gzip.then_some(options.default_gzip),
        };
        if let Some((level, threads)) = gzip {
            Encoding::Gzip { level, threads }.validate()?;
        }
        let suffix = options
            .suffix
            .clone()
            .unwrap_or_else(|| if gzip.is_some() { ".json.gz" } else { ".json" }.to_string());
        Ok(Target {
            name,
            stem,
            suffix,
            dir,
            gzip,
        })
    }

    /// The final names of `count` parts.
    fn finals(&self, count: usize) -> Vec<PathBuf> {
        let (stem, suffix) = (&self.stem, &self.suffix);
        (1..=count)
            .map(|i| {
                self.dir
                    .join(format!("{stem}.part-{i:03}-of-{count:03}{suffix}"))
            })
            .collect()
    }
}

/// The windows of the parts, from the survey's histogram (emptied), with room in each part
/// for the keys and metadata events every part repeats.
fn plan_parts(
    src: &Path,
    survey: &mut Survey<'_>,
    target: &Target,
    max_bytes: u64,
    json_bytes_read: u64,
) -> Result<Plan> {
    if survey.histogram.cells.is_empty() && survey.untimed_bytes == 0 {
        return Err(Error::not_a_trace(src, "the trace has no events to split"));
    }
    let overhead = (survey.header_bytes
        + survey.metadata_bytes
        + 2 * survey.before.len()
        + 2 * survey.after.len()
        + 512
        + target.stem.len() * 2) as u64;
    if overhead >= max_bytes {
        return Err(Error::InvalidArgument(format!(
            "{}: a part of at most {} bytes cannot hold the trace's top-level keys and \
             metadata events ({overhead} bytes): choose a larger size",
            src.display(),
            max_bytes
        )));
    }
    let plan = Plan::cut(
        &mut survey.histogram,
        survey.untimed_bytes,
        max_bytes - overhead,
    );
    if plan.firsts.len() > MAX_PARTS {
        return Err(Error::InvalidArgument(format!(
            "{}: {} MB of JSON in parts of at most {:.3} MB makes more than {MAX_PARTS} parts: \
             choose a larger size",
            src.display(),
            json_bytes_read / 1_000_000,
            max_bytes as f64 / 1e6,
        )));
    }
    Ok(plan)
}

/// Each part's temporary file (noted in `temps`), opened with its `kinetrace_part` key, the
/// source's keys before `traceEvents`, and the array's start.
fn open_parts(
    plan: &Plan,
    finals: &[PathBuf],
    target: &Target,
    survey: &Survey<'_>,
    temps: &mut Temps,
) -> Result<Vec<PartOut>> {
    let mut outs = Vec::with_capacity(finals.len());
    for (i, fin) in finals.iter().enumerate() {
        let (file, temp) =
            crate::output::temps::create(&target.dir, fin.file_name().expect("a file name"))
                .map_err(|e| {
                    Error::io(
                        format!("cannot create a temporary file for {}", fin.display()),
                        e,
                    )
                })?;
        temps.paths.push(temp.clone());
        let mut out = PartOut {
            w: TraceWriter::new(BufWriter::with_capacity(PART_BUFFER, file)),
            flows: OpenFlows::default(),
            present: Present::default(),
            temp,
        };
        let (start, end) = plan.window_us(i);
        debug_assert!(start < end || finals.len() == 1);
        let head = part_head(plan, i, &target.name);
        let werr = |out: &PartOut, e| part_error(out, e);
        out.w.member(&head).map_err(|e| werr(&out, e))?;
        for raw in &survey.before {
            out.w.member(raw).map_err(|e| werr(&out, e))?;
        }
        out.w.open_events().map_err(|e| werr(&out, e))?;
        outs.push(out);
    }
    Ok(outs)
}

/// Ends every part (its metadata events, the keys after `traceEvents`), flushed; their
/// stats in `stats`; the temporary files, in order.
fn close_parts(
    outs: Vec<PartOut>,
    plan: &Plan,
    finals: &[PathBuf],
    survey: &Survey<'_>,
    options: &SplitOptions,
    stats: &mut SplitStats,
) -> Result<Vec<PathBuf>> {
    let mut plain_temps = Vec::new();
    for (i, mut out) in outs.into_iter().enumerate() {
        let (unpaired, cut) = out.flows.left_by_source(&survey.flows);
        stats.flow_events_unpaired += unpaired;
        stats.flow_events_cut += cut;
        let werr = |out: &PartOut, e| part_error(out, e);
        for m in &survey.metadata {
            if out.present.wants(m) {
                out.w.event(&m.raw).map_err(|e| werr(&out, e))?;
            }
        }
        out.w.close_events().map_err(|e| werr(&out, e))?;
        for raw in &survey.after {
            out.w.member(raw).map_err(|e| werr(&out, e))?;
        }
        out.w.end().map_err(|e| werr(&out, e))?;
        out.w.out.flush().map_err(|e| werr(&out, e))?;
        let (start_us, end_us) = plan.window_us(i);
        if out.w.bytes > options.max_bytes {
            stats.oversized_parts += 1;
        }
        stats.parts.push(PartStats {
            path: finals[i].clone(),
            start_us,
            end_us,
            events: out.w.events,
            json_bytes: out.w.bytes,
        });
        plain_temps.push(out.temp);
    }
    Ok(plain_temps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::lexer::BUF_SIZE;
    use crate::testing::{entries, scratch};
    use serde_json::Value;
    use std::collections::{BTreeMap, HashSet};
    use std::fs;
    use std::io::Read;

    fn no_progress() -> impl FnMut(u64) -> Result<()> {
        |_| Ok(())
    }

    /// A GPU-shaped trace: CPU ops with launches on pid 10, kernels on pid 0 (streams 7 and
    /// 8), ac2g flows from launch to kernel written kernels-last (as Kineto's activity order
    /// does), fwdbwd flows, an instant, M events first, keys before and after the events.
    /// One event per line; returns the text and the event lines.
    fn gpu_trace(steps: usize) -> (String, Vec<String>) {
        let mut ev = Vec::new();
        let mut meta = vec![
            r#"{"ph":"M","name":"process_name","ts":0.000,"pid":10,"tid":0,"args":{"name":"python"}}"#.to_string(),
            r#"{"ph":"M","name":"process_name","ts":0.000,"pid":0,"tid":0,"args":{"name":"GPU 0"}}"#.into(),
            r#"{"ph":"M","name":"process_sort_index","ts":0.000,"pid":0,"tid":0,"args":{"sort_index":5000000}}"#.into(),
            r#"{"ph":"M","name":"thread_name","ts":0.000,"pid":10,"tid":10,"args":{"name":"thread 10"}}"#.into(),
            r#"{"ph":"M","name":"thread_name","ts":0.000,"pid":0,"tid":7,"args":{"name":"stream 7 "}}"#.into(),
            r#"{"ph":"M","name":"thread_name","ts":0.000,"pid":0,"tid":8,"args":{"name":"stream 8 "}}"#.into(),
            r#"{"ph":"M","name":"thread_name","ts":0.000,"pid":99,"tid":1,"args":{"name":"idle"}}"#.into(),
        ];
        let mut kernels = Vec::new();
        for i in 0..steps {
            let t = 1000 + i as u64 * 50;
            ev.push(format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"aten::mm \"q\" é","pid":10,"tid":10,"ts":{t}.250,"dur":30.000,"args":{{"External id": {i}}}}}"#
            ));
            if i % 3 == 0 {
                ev.push(format!(
                    r#"{{"ph":"s","id":{i},"pid":10,"tid":10,"ts":{t}.250,"cat":"fwdbwd","name":"fwdbwd"}}"#
                ));
                ev.push(format!(
                    r#"{{"ph":"X","cat":"cpu_op","name":"backward","pid":10,"tid":10,"ts":{}.250,"dur":1.000}}"#,
                    t + 40
                ));
                ev.push(format!(
                    r#"{{"ph":"f","id":{i},"pid":10,"tid":10,"ts":{}.250,"cat":"fwdbwd","name":"fwdbwd","bp":"e"}}"#,
                    t + 40
                ));
            }
            ev.push(format!(
                r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":10,"ts":{}.000,"dur":5.000,"args":{{"correlation": {i}}}}}"#,
                t + 10
            ));
            ev.push(format!(
                r#"{{"ph":"s","id":{},"pid":10,"tid":10,"ts":{}.000,"cat":"ac2g","name":"ac2g"}}"#,
                100000 + i,
                t + 10
            ));
            let stream = 7 + i % 2;
            kernels.push(format!(
                r#"{{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":{stream},"ts":{}.500,"dur":20.000,"args":{{"External id": {i}}}}}"#,
                t + 30
            ));
            kernels.push(format!(
                r#"{{"ph":"f","id":{},"pid":0,"tid":{stream},"ts":{}.500,"cat":"ac2g","name":"ac2g","bp":"e"}}"#,
                100000 + i,
                t + 30
            ));
            if i % 10 == 0 {
                ev.push(format!(
                    r#"{{"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":10,"tid":10,"ts":{t}.900}}"#
                ));
            }
        }
        ev.extend(kernels);
        ev.push(
            r#"{"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":999999.000}"#
                .into(),
        );
        let mut all = meta.clone();
        all.append(&mut ev);
        meta.clear();
        let text = format!(
            "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{{\"id\": 0, \"name\": \"H100\"}}],\n  \"baseTimeNanoseconds\": 1790857026000000000,\n  \"traceEvents\": [\n{}\n],\n  \"traceName\": \"C:\\\\dir\\\\t.json\"\n}}\n",
            all.join(",\n")
        );
        (text, all)
    }

    fn parse(path: &Path) -> (Value, Vec<u8>) {
        let data = fs::read(path).unwrap();
        let text = if data.starts_with(&[0x1f, 0x8b]) {
            let mut d = flate2::read::GzDecoder::new(&data[..]);
            let mut out = Vec::new();
            d.read_to_end(&mut out).unwrap();
            out
        } else {
            data
        };
        (serde_json::from_slice(&text).unwrap(), text)
    }

    fn key(v: &Value) -> String {
        serde_json::to_string(v).unwrap()
    }

    fn counts<'a>(it: impl Iterator<Item = &'a Value>) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for v in it {
            *m.entry(key(v)).or_insert(0) += 1;
        }
        m
    }

    /// Every (cat, id) flow in `events` has both ends.
    fn flows_paired(events: &[Value]) {
        let mut open: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for e in events {
            let ph = e["ph"].as_str().unwrap();
            if ph == "s" || ph == "f" {
                let k = format!("{}/{}", e["cat"], e["id"]);
                let entry = open.entry(k).or_default();
                if ph == "s" {
                    entry.0 += 1
                } else {
                    entry.1 += 1
                }
            }
        }
        for (k, (s, f)) in open {
            assert_eq!(s, f, "flow {k}");
        }
    }

    fn options(max_bytes: u64) -> SplitOptions {
        SplitOptions {
            max_bytes,
            out_dir: None,
            gzip: None,
            default_gzip: (6, 2),
            stem: None,
            suffix: None,
            trace_name: None,
        }
    }

    /// Flow ends the source itself leaves unpaired are told apart from those a window edge
    /// or a criterion cuts.
    #[test]
    fn unpaired_flows_are_not_counted_as_cut() {
        let dir = scratch("unpaired");
        let (text, lines) = gpu_trace(3000);
        // Drop every 5th flow finish: its start has no other end in the source any more.
        let mut orphans = 0u64;
        let mut seen_f = 0;
        let kept: Vec<&String> = lines
            .iter()
            .filter(|l| {
                if l.contains(r#""ph":"f""#) {
                    seen_f += 1;
                    if seen_f % 5 == 0 {
                        orphans += 1;
                        return false;
                    }
                }
                true
            })
            .collect();
        assert!(orphans > 10);
        let body: Vec<&str> = kept.iter().map(|l| l.as_str()).collect();
        let start = text.find("\n{").unwrap() + 1;
        let end = text.rfind("\n],").unwrap();
        let damaged = format!("{}{}{}", &text[..start], body.join(",\n"), &text[end..]);
        let src = dir.join("t.json");
        fs::write(&src, &damaged).unwrap();
        // All of it: only the orphans go, counted as unpaired.
        let dst = dir.join("all.json");
        let stats = filter(
            &src,
            &dst,
            &FilterSpec::default(),
            Encoding::Plain,
            None,
            &mut no_progress(),
        )
        .unwrap();
        assert_eq!(
            (stats.flow_events_unpaired, stats.flow_events_cut),
            (orphans, 0)
        );
        // No CPU events: the kernels' ac2g ends lose their CPU ends (cut); the orphans,
        // all on CPU events, go with them (not counted).
        let spec = FilterSpec {
            exclude_cats: vec!["cpu_op".into(), "cuda_runtime".into()],
            ..FilterSpec::default()
        };
        let stats = filter(&src, &dst, &spec, Encoding::Plain, None, &mut no_progress()).unwrap();
        assert_eq!(stats.flow_events_unpaired, 0);
        assert!(stats.flow_events_cut > 0);
        // Split: the orphans are unpaired wherever they land, the rest cut at edges.
        let stats = split(&src, &options(150_000), &mut no_progress()).unwrap();
        assert!(stats.parts.len() > 2);
        assert_eq!(stats.flow_events_unpaired, orphans);
        for p in &stats.parts {
            fs::remove_file(&p.path).unwrap();
        }
    }

    // Long because one split of one synthetic trace, whose parts are read back and checked
    // together (every event once, windows, flows, metadata).
    #[allow(clippy::too_many_lines)]
    #[test]
    fn split_parts_cover_the_source() {
        let dir = scratch("split");
        let (text, lines) = gpu_trace(3000);
        assert!(text.len() > 3 * BUF_SIZE, "events must cross buffer ends");
        for gz in [false, true] {
            let src = dir.join(if gz { "t.json.gz" } else { "t.json" });
            if gz {
                // Two members.
                let cut = text.len() / 2;
                let mut blob = Vec::new();
                for piece in [&text.as_bytes()[..cut], &text.as_bytes()[cut..]] {
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
                    e.write_all(piece).unwrap();
                    blob.extend(e.finish().unwrap());
                }
                fs::write(&src, blob).unwrap();
            } else {
                fs::write(&src, &text).unwrap();
            }
            let max = 150_000u64;
            let stats = split(&src, &options(max), &mut no_progress()).unwrap();
            let n = stats.parts.len();
            assert!(n >= text.len() / max as usize, "{n} parts");
            assert_eq!(stats.events_read, lines.len() as u64);
            assert_eq!(stats.oversized_parts, 0);
            let source: Value = serde_json::from_str(&text).unwrap();
            let src_events = source["traceEvents"].as_array().unwrap();
            let mut union = Vec::new();
            let mut prev_end = f64::NEG_INFINITY;
            for (i, p) in stats.parts.iter().enumerate() {
                let ext = if gz { "json.gz" } else { "json" };
                assert_eq!(
                    p.path.file_name().unwrap().to_string_lossy(),
                    format!("t.part-{:03}-of-{n:03}.{ext}", i + 1)
                );
                let (v, raw) = parse(&p.path);
                assert!(raw.len() as u64 <= max, "part {i}: {} bytes", raw.len());
                assert_eq!(raw.len() as u64, p.json_bytes);
                // Every top-level key, in order, after kinetrace_part.
                let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
                assert!(keys.contains(&"kinetrace_part".to_string()));
                for k in [
                    "schemaVersion",
                    "deviceProperties",
                    "baseTimeNanoseconds",
                    "traceName",
                ] {
                    assert_eq!(v[k], source[k], "{k}");
                }
                let part = &v["kinetrace_part"];
                assert_eq!(part["index"], i + 1);
                assert_eq!(part["count"], n);
                let (s, end) = (
                    part["start_us"].as_f64().unwrap(),
                    part["end_us"].as_f64().unwrap(),
                );
                assert!(s < end && s >= prev_end, "{s} {end} {prev_end}");
                prev_end = end;
                let events = v["traceEvents"].as_array().unwrap();
                flows_paired(events);
                // Metadata for exactly the processes and threads present.
                let mut pids = HashSet::new();
                let mut threads = HashSet::new();
                for e in events.iter().filter(|e| e["ph"] != "M") {
                    pids.insert(key(&e["pid"]));
                    threads.insert((key(&e["pid"]), key(&e["tid"])));
                    let ts = e["ts"].as_f64().unwrap();
                    if e["ph"] == "X" {
                        assert!(ts >= s && ts < end, "{ts} outside {s}..{end}");
                    }
                }
                for m in events.iter().filter(|e| e["ph"] == "M") {
                    let name = m["name"].as_str().unwrap();
                    if name.starts_with("thread_") {
                        assert!(threads.contains(&(key(&m["pid"]), key(&m["tid"]))));
                    } else {
                        assert!(pids.contains(&key(&m["pid"])));
                    }
                }
                let want_threads = src_events
                    .iter()
                    .filter(|m| m["ph"] == "M" && m["name"] == "thread_name")
                    .filter(|m| threads.contains(&(key(&m["pid"]), key(&m["tid"]))))
                    .count();
                let got_threads = events
                    .iter()
                    .filter(|m| m["ph"] == "M" && m["name"] == "thread_name")
                    .count();
                assert_eq!(want_threads, got_threads);
                // Kept events are the source's text.
                let text_events: Vec<&str> = std::str::from_utf8(&raw)
                    .unwrap()
                    .lines()
                    .filter(|l| l.starts_with("{\"ph\""))
                    .map(|l| l.trim_end_matches(','))
                    .collect();
                for t in text_events {
                    assert!(lines.iter().any(|l| l == t) || t.is_empty(), "{t}");
                }
                union.extend(events.iter().filter(|e| e["ph"] != "M").cloned());
            }
            // Union of parts == the source's events, less the flows cut at an edge.
            let mut want = counts(src_events.iter().filter(|e| e["ph"] != "M"));
            let got = counts(union.iter());
            let mut cut = 0;
            for (k, n) in &got {
                let w = want.get_mut(k).unwrap_or_else(|| panic!("extra {k}"));
                assert!(*w >= *n);
                *w -= n;
            }
            for (k, n) in &want {
                if *n > 0 {
                    assert!(
                        k.contains("\"ph\":\"s\"") || k.contains("\"ph\":\"f\""),
                        "lost {k}"
                    );
                    cut += n;
                }
            }
            assert_eq!(cut as u64, stats.flow_events_cut);
            assert!(cut > 0, "some flows should straddle an edge");
            for p in &stats.parts {
                fs::remove_file(&p.path).unwrap();
            }
            assert_eq!(
                entries(&dir),
                vec![src.file_name().unwrap().to_string_lossy()]
            );
            fs::remove_file(&src).unwrap();
        }
    }

    #[test]
    fn one_part_is_the_whole_trace() {
        let dir = scratch("split-one");
        let (text, _) = gpu_trace(50);
        let src = dir.join("t.json");
        fs::write(&src, &text).unwrap();
        let mut o = options(1 << 30);
        o.out_dir = Some(dir.join("out"));
        fs::create_dir(dir.join("out")).unwrap();
        let stats = split(&src, &o, &mut no_progress()).unwrap();
        assert_eq!(stats.parts.len(), 1);
        assert_eq!(stats.flow_events_cut, 0);
        let (v, _) = parse(&stats.parts[0].path);
        let source: Value = serde_json::from_str(&text).unwrap();
        let mut src_events = source["traceEvents"].as_array().unwrap().clone();
        // pid 99's thread name has no events: left out.
        src_events.retain(|e| e["pid"] != 99);
        assert_eq!(
            counts(v["traceEvents"].as_array().unwrap().iter()),
            counts(src_events.iter())
        );
    }

    // Long because a table of filters over one trace, each with what it must keep.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn filter_keeps_what_matches() {
        let dir = scratch("filter");
        let (text, lines) = gpu_trace(400);
        let src = dir.join("t.json");
        fs::write(&src, &text).unwrap();
        let source: Value = serde_json::from_str(&text).unwrap();
        let src_events = source["traceEvents"].as_array().unwrap();
        let dst = dir.join("f.json");
        let run = |spec: &FilterSpec| -> (FilterStats, Vec<Value>) {
            let stats =
                filter(&src, &dst, spec, Encoding::Plain, None, &mut no_progress()).unwrap();
            let (v, raw) = parse(&dst);
            assert_eq!(raw.len() as u64, stats.json_bytes_written);
            for k in [
                "schemaVersion",
                "deviceProperties",
                "baseTimeNanoseconds",
                "traceName",
            ] {
                assert_eq!(v[k], source[k], "{k}");
            }
            for l in std::str::from_utf8(&raw).unwrap().lines() {
                let l = l.trim_end_matches(',');
                if l.starts_with("{\"ph\"") {
                    assert!(lines.iter().any(|x| x == l), "{l}");
                }
            }
            let events = v["traceEvents"].as_array().unwrap().clone();
            flows_paired(&events);
            assert_eq!(stats.events_written, events.len() as u64);
            (stats, events)
        };
        // Everything (but the idle thread's metadata).
        let (stats, events) = run(&FilterSpec::default());
        assert_eq!(stats.events_read, src_events.len() as u64);
        assert_eq!(events.len(), src_events.len() - 1);
        assert_eq!(stats.flow_events_cut, 0);
        // No kernels: no ac2g flows, no GPU metadata.
        let spec = FilterSpec {
            exclude_cats: vec!["kernel".into()],
            ..FilterSpec::default()
        };
        let (stats, events) = run(&spec);
        assert!(events
            .iter()
            .all(|e| e["cat"] != "kernel" && e["cat"] != "ac2g"));
        assert!(events.iter().all(|e| e["pid"] != 0));
        assert!(events.iter().any(|e| e["cat"] == "fwdbwd"));
        assert_eq!(stats.flow_events_cut, 400);
        // Only kernels: the flows go too (their CPU ends are gone), GPU metadata stays.
        let spec = FilterSpec {
            include_cats: vec!["kernel".into()],
            ..FilterSpec::default()
        };
        let (_, events) = run(&spec);
        assert_eq!(events.iter().filter(|e| e["cat"] == "kernel").count(), 400);
        assert!(events
            .iter()
            .all(|e| e["ph"] == "M" || e["cat"] == "kernel" || e["name"] == "Record Window End"));
        assert!(events
            .iter()
            .any(|e| e["name"] == "thread_name" && e["tid"] == 8));
        assert!(!events
            .iter()
            .any(|e| e["name"] == "thread_name" && e["tid"] == 10));
        // A window, a pid and a duration.
        let spec = FilterSpec {
            window_us: Some((2000.0, 3000.0)),
            pids: vec!["10".into()],
            min_dur_us: Some(2.0),
            ..FilterSpec::default()
        };
        let (_, events) = run(&spec);
        for e in events.iter().filter(|e| e["ph"] == "X") {
            let ts = e["ts"].as_f64().unwrap();
            let end = ts + e["dur"].as_f64().unwrap();
            assert!(end > 2000.0 && ts < 3000.0 && e["pid"] == 10);
            assert!(e["dur"].as_f64().unwrap() >= 2.0);
        }
        // The backward ops are too short: their fwdbwd flows go with them.
        assert!(!events
            .iter()
            .any(|e| e["name"] == "backward" || e["cat"] == "fwdbwd"));
        // The kernels are on pid 0: their launch flows go too.
        assert!(!events.iter().any(|e| e["cat"] == "ac2g"));
        assert!(events.iter().any(|e| e["name"] == "cudaLaunchKernel"));
        // Gzip output, then nothing selected: an error, and the old output stays.
        filter(
            &src,
            &dst,
            &FilterSpec::default(),
            Encoding::Gzip {
                level: 1,
                threads: 2,
            },
            None,
            &mut no_progress(),
        )
        .unwrap();
        let before = fs::read(&dst).unwrap();
        let spec = FilterSpec {
            window_us: Some((1e12, 2e12)),
            ..FilterSpec::default()
        };
        let err = filter(&src, &dst, &spec, Encoding::Plain, None, &mut no_progress()).unwrap_err();
        assert!(err.to_string().contains("selects no events"), "{err}");
        assert!(!err.to_string().contains("FilterSpec"), "{err}");
        assert_eq!(fs::read(&dst).unwrap(), before);
        assert_eq!(entries(&dir), vec!["f.json", "t.json"]);
    }

    // Long because a table of bad inputs, each a few lines: its error and an empty
    // output directory.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn bad_input_is_a_clear_error_and_leaves_nothing() {
        let dir = scratch("split-bad");
        let (text, _) = gpu_trace(2000);
        let out = dir.join("out");
        fs::create_dir(&out).unwrap();
        let mut o = options(100_000);
        o.out_dir = Some(out.clone());
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "trunc.json",
                text.as_bytes()[..text.len() / 2].to_vec(),
                "end of file",
            ),
            (
                "nan.json",
                text.replacen("\"dur\":30.000", "\"dur\":NaN", 1)
                    .into_bytes(),
                "NaN is not valid JSON",
            ),
            ("scalar.json", b"7".to_vec(), "not a trace"),
            (
                "noevents.json",
                b"{\"a\": 1}".to_vec(),
                "no \"traceEvents\"",
            ),
            ("empty.json", Vec::new(), "empty file"),
            (
                "trunc.json.gz",
                {
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
                    e.write_all(text.as_bytes()).unwrap();
                    let b = e.finish().unwrap();
                    b[..b.len() / 2].to_vec()
                },
                "corrupt gzip data",
            ),
        ];
        for (name, data, want) in cases {
            let src = dir.join(name);
            fs::write(&src, &data).unwrap();
            let err = split(&src, &o, &mut no_progress()).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(name) && msg.contains(want), "{name}: {msg}");
            let Error::TraceFormat(found) = &err else {
                panic!("{name}: {err:?}");
            };
            assert!(found.path.ends_with(name), "{name}: {found:?}");
            if name != "empty.json" {
                assert!(found.offset.is_some() && msg.contains("offset "), "{msg}");
            }
            let err = filter(
                &src,
                &out.join("f.json"),
                &FilterSpec::default(),
                Encoding::Plain,
                None,
                &mut no_progress(),
            )
            .unwrap_err();
            assert!(err.to_string().contains(want), "{name}: {err}");
            assert!(entries(&out).is_empty(), "{name}: {:?}", entries(&out));
        }
        let src = dir.join("good.json");
        fs::write(&src, &text).unwrap();
        // A size of 0, or too small for the header.
        assert!(matches!(
            split(&src, &options(0), &mut no_progress()),
            Err(Error::InvalidArgument(_))
        ));
        let err = split(&src, &options(100), &mut no_progress()).unwrap_err();
        assert!(err.to_string().contains("choose a larger size"), "{err}");
        // Too many parts.
        let err = split(&src, &options(1500), &mut no_progress()).unwrap_err();
        assert!(err.to_string().contains("more than 999 parts"), "{err}");
        // An out dir that does not exist; interrupted halfway.
        let mut o2 = o.clone();
        o2.out_dir = Some(dir.join("missing"));
        match split(&src, &o2, &mut no_progress()) {
            Err(Error::Io { context, source }) => {
                assert!(context.contains("missing"), "{context}");
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        let mut calls = 0;
        let big = dir.join("big.json");
        fs::write(&big, gpu_trace(60_000).0).unwrap();
        let r = split(&big, &o, &mut |_| {
            calls += 1;
            if calls > 3 {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
        assert!(entries(&out).is_empty(), "{:?}", entries(&out));
        // Bad filter settings.
        for spec in [
            FilterSpec {
                min_dur_us: Some(-1.0),
                ..FilterSpec::default()
            },
            FilterSpec {
                window_us: Some((5.0, 5.0)),
                ..FilterSpec::default()
            },
        ] {
            assert!(matches!(
                filter(
                    &src,
                    &out.join("f.json"),
                    &spec,
                    Encoding::Plain,
                    None,
                    &mut no_progress()
                ),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(entries(&out).is_empty());
    }

    /// `cargo test --release split::tests::throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn throughput() {
        let dir = scratch("split-speed");
        let (mut text, _) = gpu_trace(10);
        let (unit, _) = gpu_trace(20_000);
        let body =
            &unit[unit.find("\"traceEvents\": [\n").unwrap() + 17..unit.find("\n],").unwrap()];
        let mut events = String::new();
        while events.len() < 300_000_000 {
            events.push_str(body);
            events.push_str(",\n");
        }
        let at = text.find("\"traceEvents\": [\n").unwrap() + 17;
        text.insert_str(at, &events);
        let src = dir.join("big.json");
        fs::write(&src, &text).unwrap();
        drop(events);
        let mb = text.len() as f64 / 1e6;
        drop(text);
        let t = std::time::Instant::now();
        let s = split(&src, &options(100_000_000), &mut no_progress()).unwrap();
        let dt = t.elapsed().as_secs_f64();
        println!(
            "split: {mb:.0} MB in {dt:.2} s = {:.0} MB/s of JSON per pass ({} parts)",
            2.0 * mb / dt,
            s.parts.len()
        );
        let t = std::time::Instant::now();
        let spec = FilterSpec {
            exclude_cats: vec!["cpu_op".into()],
            ..FilterSpec::default()
        };
        filter(
            &src,
            &dir.join("f.json"),
            &spec,
            Encoding::Plain,
            None,
            &mut no_progress(),
        )
        .unwrap();
        let dt = t.elapsed().as_secs_f64();
        println!("filter: {mb:.0} MB in {dt:.2} s = {:.0} MB/s", mb / dt);
    }
}
