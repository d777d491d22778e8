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
//!
//! ## Files
//! One per pass or concern: `probe.rs` pass 1 (each source's base, the plain and gzip
//! tails), `steps.rs` pass 2 (step alignment), `survey.rs` pass 3 (the histogram of parts),
//! `write.rs` pass 4 on the calling thread (the outputs, blocks appended, parts put in
//! place), `rewrite.rs` a reader's rewriting of one source's events (passes 3 and 4),
//! `ids.rs` the pid and flow/async-id maps, `names.rs` the merged processes' names and
//! order, `ranks.rs` each source's rank and label, `record.rs` the `kinetrace_merge`
//! record and the totals, `tests.rs` whole merges; every pass runs on the reader threads of
//! [`crate::read::sources`]. This file: the entry point, its options and stats, and the
//! timeline.
//!
//! [`BLOCK`]: rewrite::BLOCK
//! [`MAX_PROCESSES`]: ids::MAX_PROCESSES
//! [`MAX_STEPS`]: steps::MAX_STEPS
//! [`MAX_KEPT_TEXT`]: crate::tools::parts::MAX_KEPT_TEXT
//! [`MAX_CELLS`]: crate::tools::parts::MAX_CELLS

mod ids;
mod names;
mod probe;
mod ranks;
mod record;
mod rewrite;
mod steps;
mod survey;
mod write;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::output::sink::Encoding;
use crate::read::filter::FilterSpec;
use crate::read::sources::Sources;

use self::names::name_processes;
use self::probe::{pass_bases, Base};
use self::ranks::rank_sources;
use self::record::{add_source_totals, common_time_unit, merge_record, warn_of_apart_spans};
use self::rewrite::SourceCtx;
use self::steps::pass_steps;
use self::survey::pass_survey;
use self::write::{pass_write, Outputs};

/// Bytes of blocks waiting for the writer, per reader.
const QUEUE_BYTES_PER_READER: usize = 4 << 20;

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

/// A top-level member of a source: its key and its text (`"key": value`).
type Member = (Box<[u8]>, Box<[u8]>);

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

/// The error of a merge that keeps nothing.
fn nothing_kept(spec: &FilterSpec) -> Error {
    Error::InvalidArgument(if spec.is_everything() {
        "the sources have no events to merge".into()
    } else {
        "the filter selects no events in any source".into()
    })
}

#[cfg(test)]
mod tests;
