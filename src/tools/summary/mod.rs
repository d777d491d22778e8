//! `summary`: where the GPU time of each rank went (`kinetrace summary`), under two rule
//! sets: `exact` (`exact.rs`, the default) and HolisticTraceAnalysis 0.5.0's (`hta.rs`).
//!
//! Each file is read once, streaming, by the crate's reader (`crate::events`), into what
//! `events.rs` keeps of it; files are read on worker threads, one file each at a time (a
//! single plain `.json` is itself read in parallel chunks); under `exact` each file's
//! figures are made on its reader's thread, what was kept of it dropped there. The calling
//! thread waits in short polls, so Ctrl-C is answered within [`POLL`]. Ranks are found as
//! `merge` finds them (`distributedInfo.rank`, a number in the file name, the order), and
//! two files claiming one rank are refused as `merge` refuses them; under `hta` as HTA
//! finds them (its regex, else 0; a later file replaces an earlier one of the same rank,
//! warned).

pub(crate) mod events;
pub(crate) mod exact;
pub(crate) mod hta;
pub(crate) mod report;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::read::events::{scan_trace, ReadEnd, ReadOptions};
use crate::read::ranks::{assign_ranks, RankFrom};
use crate::read::sources::{Msg, Reader, Sources};

use self::events::{Collected, Rules};
use self::report::{Figures, RankSummary};

/// One file read: what was kept, the JSON bytes read, and a warning if it stopped early.
pub(crate) struct Read {
    pub(crate) collected: Collected,
    json_bytes: u64,
    pub(crate) warning: Option<String>,
}

/// Reads one file; a trace damaged after some events is kept as far as it reads, with a
/// warning naming the file and the offset; one with no event read is refused.
fn read_one(
    path: &Path,
    rules: Rules,
    options: ReadOptions,
    reading: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Read> {
    let mut collected = Collected::new(rules);
    let end = scan_trace(path, &mut collected, reading, options)?;
    Read::of(path, collected, end)
}

impl Read {
    /// What `collected` kept of the read of `path` that ended at `end` (the read may have
    /// fed other visitors too: `diff`'s), warned or refused as [`read_one`] says.
    pub(crate) fn of(path: &Path, collected: Collected, end: ReadEnd) -> Result<Read> {
        let warning = match end.invalid {
            None => None,
            Some(invalid) if collected.events == 0 => {
                return Err(Error::trace_format(path, invalid))
            }
            Some(invalid) => Some(format!(
                "{}: {invalid}; summarised up to there ({} events)",
                path.display(),
                collected.events
            )),
        };
        Ok(Read {
            collected,
            json_bytes: end.json_bytes,
            warning,
        })
    }
}

/// Reads every file on up to `threads` threads (`read::sources`), in the order given;
/// `progress` is called on the calling thread between waits (its error stops the readers).
pub(crate) fn read_all(
    paths: &[PathBuf],
    rules: Rules,
    threads: usize,
    progress: &mut dyn FnMut() -> Result<()>,
) -> Result<Vec<Read>> {
    read_all_into(paths, rules, threads, progress, &|_, read| read)
}

/// [`read_all`], each file's read made into `into(index, read)` on its reader's thread.
fn read_all_into<D: Send>(
    paths: &[PathBuf],
    rules: Rules,
    threads: usize,
    progress: &mut dyn FnMut() -> Result<()>,
    into: &(dyn Fn(usize, Read) -> D + Sync),
) -> Result<Vec<D>> {
    // Nothing is sent but each file's result: no queue to bound.
    let sources = Sources::new(paths, threads, 0);
    let options = sources.read_options;
    let work = |i: usize, reader: &Reader<'_, Msg<(), D>>| {
        read_one(&paths[i], rules, options, &mut reader.reading()).map(|read| into(i, read))
    };
    sources.each(&work, &mut |_| progress())
}

/// One file's summary before its rank is known (`rank` 0, `rank_from` empty): its figures
/// computed and what was kept of its events dropped, with the rank its header claims.
#[derive(Debug, Clone)]
pub(crate) struct Figured {
    pub(crate) summary: RankSummary,
    distributed_rank: Option<i64>,
}

impl Read {
    /// The figures of the read of `path` (under the `hta` rules, `filter` and `round` as
    /// `hta::figures` takes them; the `exact` rules take neither).
    pub(crate) fn figured(self, path: &Path, filter: bool, round: bool) -> Figured {
        let c = &self.collected;
        let figures = match c.rules {
            Rules::Exact => exact::figures(c),
            Rules::Hta => hta::figures(c, filter, round && c.float_ts),
        };
        self.figured_as(path, figures)
    }

    /// The summary of the read of `path` with `figures` made elsewhere (`diff` makes them
    /// of the attribution's records, which the same read filled).
    pub(crate) fn figured_as(self, path: &Path, figures: Figures) -> Figured {
        let c = &self.collected;
        let summary = RankSummary {
            source: path.to_path_buf(),
            rank: 0,
            rank_from: "",
            figures,
            steps: c
                .steps
                .iter()
                .map(|(n, _, d)| (n.clone(), report::us(*d)))
                .collect(),
            events: c.events,
            json_bytes: self.json_bytes,
            warnings: self.warning.into_iter().collect(),
        };
        Figured {
            summary,
            distributed_rank: self.collected.distributed_rank,
        }
    }
}

/// The summaries of `figured`, the files at `paths` (one rank each) read under the `exact`
/// rules (by [`summarize`], or by `diff` with their operators), ranked as `merge` ranks
/// them (`read/ranks.rs`), in rank order.
pub(crate) fn ranked(paths: &[PathBuf], figured: Vec<Figured>) -> Result<Vec<RankSummary>> {
    let distributed: Vec<Option<i64>> = figured.iter().map(|f| f.distributed_rank).collect();
    let ranks = assign_ranks(paths, &distributed, "summarise them separately")?;
    let mut out: Vec<RankSummary> = figured
        .into_iter()
        .zip(ranks)
        .map(|(f, (rank, rank_from))| RankSummary {
            rank,
            rank_from,
            ..f.summary
        })
        .collect();
    out.sort_by_key(|o| o.rank);
    Ok(out)
}

/// Summarises the traces at `paths` (one rank each) under `rules`, reading on up to
/// `threads` threads. Ranks come back in rank order.
pub(crate) fn summarize(
    paths: &[PathBuf],
    rules: Rules,
    threads: usize,
    progress: &mut dyn FnMut() -> Result<()>,
) -> Result<Vec<RankSummary>> {
    if rules == Rules::Exact {
        // Each file's figures on its reader's thread, its records dropped there.
        let into = |i: usize, read: Read| read.figured(&paths[i], false, false);
        let figured = read_all_into(paths, rules, threads, progress, &into)?;
        return ranked(paths, figured);
    }
    let reads = read_all(paths, rules, threads, progress)?;
    let (ranks, replaced) = hta_ranks(paths, &reads);
    // HTA's filter decision is over every name of the whole set.
    let mut step_names: Vec<&String> = reads
        .iter()
        .flat_map(|r| &r.collected.hta_step_names)
        .collect();
    step_names.sort();
    step_names.dedup();
    let filter = step_names.len() >= 2;
    let round = std::env::var("HTA_DISABLE_NS_ROUNDING").as_deref() != Ok("1");
    let mut out: Vec<RankSummary> = Vec::with_capacity(reads.len());
    for (i, read) in reads.into_iter().enumerate() {
        let (rank, rank_from) = ranks[i];
        if rank_from == REPLACED {
            continue;
        }
        let mut summary = read.figured(&paths[i], filter, round).summary;
        summary.rank = rank;
        summary.rank_from = rank_from;
        summary.warnings.extend(
            replaced
                .iter()
                .filter(|(r, _)| *r == rank)
                .map(|(_, w)| w.clone()),
        );
        out.push(summary);
    }
    out.sort_by_key(|o| o.rank);
    Ok(out)
}

/// Where the rank of a file HTA drops came from: [`summarize`] skips it.
pub(crate) const REPLACED: &str = "replaced";

/// Ranks as HTA 0.5.0 gives them: its regex, else 0. A file later in the list wins a rank;
/// the earlier ones are marked [`REPLACED`], and a warning (rank, text) says so.
pub(crate) fn hta_ranks(paths: &[PathBuf], reads: &[Read]) -> (Vec<RankFrom>, Vec<(i64, String)>) {
    let ranks: Vec<RankFrom> = reads
        .iter()
        .map(|r| match r.collected.hta_rank {
            Some(rank) => (rank, "HTA's rank regex"),
            None => (0, "HTA's default"),
        })
        .collect();
    let mut warnings = Vec::new();
    for (i, &(rank, _)) in ranks.iter().enumerate() {
        if let Some(j) = (i + 1..ranks.len()).find(|&j| ranks[j].0 == rank) {
            warnings.push((
                rank,
                format!(
                    "{} and {} have the same rank {rank}: {} is used (as HTA does)",
                    paths[i].display(),
                    paths[j].display(),
                    paths[j].display()
                ),
            ));
        }
    }
    let mut out = ranks.clone();
    for i in 0..ranks.len() {
        if (i + 1..ranks.len()).any(|j| ranks[j].0 == ranks[i].0) {
            out[i].1 = REPLACED;
        }
    }
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_progress() -> impl FnMut() -> Result<()> {
        || Ok(())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Two kernels on stream 7 (the second launched after the first ends), a memcpy that
    /// overlaps the second, and a step; times with decimals HTA would round.
    const TRACE: &str = r#"{"distributedInfo": {"rank": 2}, "traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 0.5, "dur": 100.25},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 50, "dur": 1, "args": {"correlation": 2}},
 {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.5, "dur": 20.25, "args": {"stream": 7, "correlation": 1}},
 {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 60.125, "dur": 0.5, "args": {"stream": 7, "correlation": 2}},
 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8, "ts": 60.375, "dur": 1, "args": {"stream": 8, "correlation": 3}}
]}"#;

    #[test]
    fn exact_figures_are_the_traces_own_times() {
        let scratch = crate::testing::scratch("summary");
        let dir: &Path = &scratch;
        let path = write(dir, "t.json", TRACE);
        let out = summarize(&[path], Rules::Exact, 2, &mut no_progress()).unwrap();
        let r = &out[0];
        assert_eq!((r.rank, r.rank_from), (2, "distributedInfo"));
        let t = r.figures.temporal_breakdown;
        // span 10.5 .. 61.375; busy 20.25 + (60.125 .. 61.375) = 21.5; compute 20.75.
        assert_eq!(
            (
                t.kernel_time_us,
                t.idle_time_us,
                t.compute_time_us,
                t.non_compute_time_us
            ),
            (50.875, 29.375, 20.75, 0.75)
        );
        assert_eq!(
            r.figures.kernel_types,
            vec![
                ("COMPUTATION".to_string(), 20.5),
                ("MEMORY".to_string(), 0.75),
                ("COMPUTATION overlapping MEMORY".to_string(), 0.25)
            ]
        );
        let gemm = &r.figures.kernels[0];
        assert_eq!(
            (gemm.count, gemm.times.sum_us, gemm.times.mean_us),
            (2, 20.75, 10.375)
        );
        // The second gemm was launched (50) after the first ended (30.75): host wait.
        assert_eq!(r.figures.idle_time[0].1.host_wait_us, 29.375);
        assert_eq!(r.steps, vec![("ProfilerStep#4".to_string(), 100.25)]);
    }

    #[test]
    fn hta_rounds_and_files_of_one_rank_are_refused_or_replaced() {
        let scratch = crate::testing::scratch("summary-hta");
        let dir: &Path = &scratch;
        let a = write(dir, "a.json", TRACE);
        let b = write(dir, "b.json", TRACE);
        let out = summarize(std::slice::from_ref(&a), Rules::Hta, 1, &mut no_progress()).unwrap();
        // ceil(10.5) = 11, floor(30.75) = 30: 19 µs; ceil(60.125) = 61, floor(60.625) = 60:
        // the short gemm lasts -1 µs under HTA.
        let gemm = &out[0]
            .figures
            .kernels
            .iter()
            .find(|k| k.name == "gemm")
            .unwrap();
        assert_eq!(
            (gemm.times.min_us, gemm.times.max_us, gemm.times.sum_us),
            (-1.0, 19.0, 18.0)
        );
        let both = [a, b];
        let err = summarize(&both, Rules::Exact, 2, &mut no_progress()).unwrap_err();
        assert!(err.to_string().contains("are both rank 2"), "{err}");
        let out = summarize(&both, Rules::Hta, 2, &mut no_progress()).unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0].source.ends_with("b.json"));
        assert!(out[0].warnings[0].contains("have the same rank 2"));
    }
}
