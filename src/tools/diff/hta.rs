//! One side of HolisticTraceAnalysis 0.5.0's `TraceDiff.compare_traces`: the count and
//! total `dur` of every event name of one rank in one iteration (`docs/diff.md` states the
//! rules). The files are read as `summary --rules hta` reads them (`summary::events`), so
//! the rows, the ranks and HTA's rounding of times are the same as there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::tools::summary::events::{Collected, HtaRow, Rules};
use crate::tools::summary::{hta_ranks, read_all, REPLACED};

/// Per name: (name, count, total dur in HTA's µs).
pub(crate) type NameTotals = Vec<(String, u64, f64)>;

/// One side: the rank and iteration compared, those there were to choose from, the totals.
pub(crate) struct Side {
    pub(crate) source: PathBuf,
    pub(crate) rank: i64,
    pub(crate) ranks: Vec<i64>,
    pub(crate) iteration: i64,
    pub(crate) iterations: Vec<i64>,
    pub(crate) ops: NameTotals,
    pub(crate) warnings: Vec<String>,
}

/// The iteration of a step row's name, as HTA's `add_iteration` reads it
/// (`re.match(r"ProfilerStep\s*#\s*(\d+)")`).
fn row_iteration(name: &[u8]) -> Option<i64> {
    let rest = name.strip_prefix(b"ProfilerStep")?;
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b"#")?
        .trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The iteration a name offers to choose from, as `LabeledTrace.iterations` reads it
/// (`int(s.replace("ProfilerStep#", ""))`); HTA raises on the names this skips.
fn listed_iteration(name: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(name.strip_prefix(b"ProfilerStep#")?).ok()?;
    text.trim().parse().ok()
}

/// HTA's `(start, dur)` of a row: `start = ceil(ts)`, `end = floor(ts + dur)` when rounding.
fn times(r: &HtaRow, round: bool) -> (f64, f64) {
    if round {
        let start = r.ts.ceil();
        (start, (r.ts + r.dur).floor() - start)
    } else {
        (r.ts, r.dur)
    }
}

/// The totals of one rank's rows in `iteration`. A row's iteration (HTA's `add_iteration`):
/// stream < 0, the last step row in file order with `start <= ts < start + dur` (GPU-side
/// step rows included), else -1; stream > 0, that of its launch (the last non-kernel row
/// with its correlation), -1 when it has none or the launch is `traceEvents[0]`; stream 0,
/// none (HTA leaves it NaN), so it is never counted.
fn rank_totals(c: &Collected, round: bool, iteration: i64) -> NameTotals {
    let names = &c.names.names;
    let steps: Vec<(f64, f64, i64)> = c
        .hta_rows
        .iter()
        .filter(|r| names[r.name as usize].starts_with(b"ProfilerStep"))
        .filter_map(|r| {
            let (ts, dur) = times(r, round);
            row_iteration(&names[r.name as usize]).map(|i| (ts, dur, i))
        })
        .collect();
    let cpu_iteration = |ts: f64| -> i64 {
        steps
            .iter()
            .rev()
            .find(|(s, d, _)| *s <= ts && ts < s + d)
            .map_or(-1, |s| s.2)
    };
    let kernel = |r: &HtaRow| {
        let name = names[r.name as usize].as_slice();
        (r.stream >= 0 && r.correlation >= 0) || name == b"Event Sync" || name == b"Context Sync"
    };
    // A launch's iteration, by correlation: the last non-kernel row with it wins.
    let mut launch: HashMap<i64, (u64, Option<i64>)> = HashMap::new();
    for r in c
        .hta_rows
        .iter()
        .filter(|r| r.correlation != -1 && !kernel(r))
    {
        let it = (r.stream < 0).then(|| cpu_iteration(times(r, round).0));
        launch.insert(r.correlation, (r.index, it));
    }
    let mut per: HashMap<u32, (u64, f64)> = HashMap::new();
    for r in &c.hta_rows {
        let (ts, dur) = times(r, round);
        let it = if r.stream < 0 {
            Some(cpu_iteration(ts))
        } else if r.stream > 0 {
            match launch.get(&r.correlation) {
                Some(&(index, it)) if kernel(r) && index > 0 => it,
                _ => Some(-1),
            }
        } else {
            None
        };
        if it == Some(iteration) {
            let e = per.entry(r.name).or_default();
            e.0 += 1;
            e.1 += dur;
        }
    }
    let mut out: NameTotals = per
        .into_iter()
        .map(|(n, (count, sum))| {
            (
                String::from_utf8_lossy(&names[n as usize]).into_owned(),
                count,
                sum,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn refuse(what: &Path, text: String) -> Error {
    Error::InvalidArgument(format!("{}: {text}", what.display()))
}

/// One side of the comparison: the trace files of one run (one rank each, ranks as HTA
/// finds them), `rank` (default the first) and `iteration` (default the first over all
/// ranks' `ProfilerStep#N` names, as HTA takes it).
pub(crate) fn side(
    paths: &[PathBuf],
    rank: Option<i64>,
    iteration: Option<i64>,
    threads: usize,
    progress: &mut dyn FnMut() -> Result<()>,
) -> Result<Side> {
    let reads = read_all(paths, Rules::Hta, threads, progress)?;
    let (ranks, replaced) = hta_ranks(paths, &reads);
    let kept: Vec<usize> = (0..reads.len())
        .filter(|&i| ranks[i].1 != REPLACED)
        .collect();
    let mut all_ranks: Vec<i64> = kept.iter().map(|&i| ranks[i].0).collect();
    all_ranks.sort_unstable();
    let first = paths.first().map_or(Path::new(""), |p| p.as_path());
    let rank = rank.or(all_ranks.first().copied()).unwrap_or(0);
    let Some(&at) = kept.iter().find(|&&i| ranks[i].0 == rank) else {
        return Err(refuse(
            first,
            format!("no rank {rank} (ranks: {all_ranks:?})"),
        ));
    };
    let mut iterations: Vec<i64> = kept
        .iter()
        .flat_map(|&i| &reads[i].collected.names.names)
        .filter_map(|n| listed_iteration(n))
        .collect();
    iterations.sort_unstable();
    iterations.dedup();
    let iteration = match (iteration, iterations.first()) {
        (Some(i), _) if iterations.contains(&i) => i,
        (Some(i), _) => {
            return Err(refuse(
                first,
                format!("no ProfilerStep#{i} (steps: {iterations:?})"),
            ))
        }
        (None, Some(&i)) => i,
        (None, None) => {
            return Err(refuse(
                first,
                "no ProfilerStep#N, no iteration to compare".into(),
            ))
        }
    };
    let c = &reads[at].collected;
    let round = c.float_ts && std::env::var("HTA_DISABLE_NS_ROUNDING").as_deref() != Ok("1");
    let mut warnings: Vec<String> = reads.iter().filter_map(|r| r.warning.clone()).collect();
    warnings.extend(replaced.into_iter().map(|(_, w)| w));
    Ok(Side {
        source: paths[at].clone(),
        rank,
        ranks: all_ranks,
        iteration,
        iterations,
        ops: rank_totals(c, round, iteration),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two steps; a kernel launched in each (the first launch is traceEvents[0]); a
    /// stream-0 row; times HTA rounds. HTA 0.5.0's `compare_traces` on this file, run by
    /// hand, gives exactly the rows the test below expects for steps 4 and 5.
    const TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}},
 {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 0.5, "dur": 100.25},
 {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 1, "tid": 1, "ts": 100.75, "dur": 100},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 150, "dur": 1, "args": {"correlation": 2}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 150, "dur": 2.5},
 {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.5, "dur": 20.25, "args": {"stream": 7, "correlation": 1}},
 {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 160.125, "dur": 3.5, "args": {"stream": 7, "correlation": 2}},
 {"ph": "X", "cat": "cpu_op", "name": "on_stream_0", "pid": 1, "tid": 1, "ts": 150, "dur": 1, "args": {"stream": 0}},
 {"ph": "i", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 150}
]}"#;

    fn totals(iteration: Option<i64>) -> Side {
        let scratch = crate::testing::scratch("diff-hta");
        let path = scratch.join("t.json");
        std::fs::write(&path, TRACE).unwrap();
        side(&[path], None, iteration, 1, &mut || Ok(())).unwrap()
    }

    #[test]
    fn first_iteration_by_default_and_hta_quirks_kept() {
        let s = totals(None);
        assert_eq!(
            (s.rank, s.iteration, s.iterations.clone()),
            (0, 4, vec![4, 5])
        );
        // Step 4 ([1, 100]): its own row; the launch at index 0 is in it, but the kernel it
        // launched links to index 0 and so has no iteration.
        let names: Vec<&str> = s.ops.iter().map(|o| o.0.as_str()).collect();
        assert_eq!(names, ["ProfilerStep#4", "cudaLaunchKernel"]);
        assert_eq!(s.ops[0].2, 99.0, "ceil(0.5) = 1 to floor(100.75) = 100");
        let s = totals(Some(5));
        let got: Vec<(&str, u64, f64)> = s.ops.iter().map(|o| (o.0.as_str(), o.1, o.2)).collect();
        // The instant aten::mm has no dur (dropped); the stream-0 row is never counted;
        // ceil(160.125) = 161 to floor(163.625) = 163: 2 µs.
        assert_eq!(
            got,
            [
                ("ProfilerStep#5", 1, 99.0),
                ("aten::mm", 1, 2.0),
                ("cudaLaunchKernel", 1, 1.0),
                ("gemm", 1, 2.0)
            ]
        );
    }

    #[test]
    fn missing_rank_or_iteration_is_refused() {
        let scratch = crate::testing::scratch("diff-hta-refused");
        let path = scratch.join("t.json");
        std::fs::write(&path, TRACE).unwrap();
        let p = std::slice::from_ref(&path);
        let err = side(p, Some(3), None, 1, &mut || Ok(())).err().unwrap();
        assert!(err.to_string().contains("no rank 3 (ranks: [0])"), "{err}");
        let err = side(p, None, Some(6), 1, &mut || Ok(())).err().unwrap();
        assert!(
            err.to_string()
                .contains("no ProfilerStep#6 (steps: [4, 5])"),
            "{err}"
        );
        assert_eq!(row_iteration(b"ProfilerStep #  12 x"), Some(12));
        assert_eq!(listed_iteration(b"ProfilerStep# 12"), Some(12));
        assert_eq!(listed_iteration(b"ProfilerStep#12 x"), None);
    }
}
