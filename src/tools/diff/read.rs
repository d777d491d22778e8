//! `diff`'s reading under the default rules: each file once, streaming, for both its
//! summary (`tools::summary`'s visitor) and its operator groups (the attribution's, then
//! its call tree and groups: `read::attribution::groups`), through a tee; the steps'
//! figures from the same records, and their FLOPs from the tree (`ops`' models). Every file of
//! both sides (and of all their runs) is read in one pool (`read::sources`), two threads a
//! file, as many files at once as the threads given allow; a file named twice (a run
//! against itself) is read once. Ranks are then assigned per run as `summarize` assigns
//! them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::read::attribution::groups::{attributed_beside, groups, Group};
use crate::read::events::{scan_trace, ReadOptions, Tee};
use crate::read::sources::{Reader, Sources};
use crate::tools::diff::steps::{step_figures, RankSteps};
use crate::tools::ops::modelled_flops;
use crate::tools::summary::events::Collected;
use crate::tools::summary::exact::{self, Attributed};
use crate::tools::summary::report::RankSummary;
use crate::tools::summary::{ranked, Figured, Read};

/// What `diff` has of its runs: per run the summaries of its ranks (as `summarize` gives
/// them), and per file read its operator groups and its steps' figures.
#[derive(Debug)]
pub(crate) struct Runs {
    pub(crate) ranks: Vec<Vec<RankSummary>>,
    pub(crate) files: Vec<FileRead>,
}

/// What one file gave beside its summary.
#[derive(Debug)]
pub(crate) struct FileRead {
    pub(crate) path: PathBuf,
    pub(crate) operators: Vec<Group>,
    pub(crate) steps: RankSteps,
}

/// One read of `path` fed to both visitors. A trace damaged after some events gives both
/// as far as it reads, warned of (the summary's warning); one with no event is refused.
fn read_one(
    path: &Path,
    options: ReadOptions,
    reading: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(Figured, FileRead)> {
    // On this reader's thread (two threads a file, see `read_runs`). The summary's visitor
    // keeps the steps only: its figures and the steps' are made of the attribution's
    // records (one record set per activity, not two), before the call tree is built.
    let (read, (figures, mut steps, slices), attribution) = attributed_beside(
        |operators| {
            let mut summary = Collected::without_gpu();
            let end = scan_trace(path, &mut Tee(&mut summary, operators), reading, options)?;
            Read::of(path, summary, end)
        },
        |read, records| {
            let activities = Attributed::new(records);
            let slices: Vec<(Option<i64>, i64)> =
                read.collected.steps.iter().map(|s| (s.1, s.2)).collect();
            let steps = step_figures(&slices, &activities, &records.memory_bytes);
            (exact::figures(&activities), steps, slices)
        },
    )?;
    steps.count_flops(&slices, &modelled_flops(&attribution));
    let operators = groups(&attribution);
    let file = FileRead {
        path: path.to_path_buf(),
        operators,
        steps,
    };
    Ok((read.figured_as(path, figures), file))
}

/// Reads the files of `runs` on up to `threads` threads; `progress` is called on the
/// calling thread between waits (its error stops the readers).
pub(crate) fn read_runs(
    runs: &[Vec<PathBuf>],
    threads: usize,
    progress: &mut dyn FnMut() -> Result<()>,
) -> Result<Runs> {
    let mut index: HashMap<&PathBuf, usize> = HashMap::new();
    let mut files: Vec<PathBuf> = Vec::new();
    for path in runs.iter().flatten() {
        index.entry(path).or_insert_with(|| {
            files.push(path.clone());
            files.len() - 1
        });
    }
    // Two threads on each file (a gzip inflated beside its scan, a plain .json in chunks):
    // each file's records are the largest of any reader's, so half as many files are held
    // at once, in about the time of one thread each (docs/benchmarks.md). Nothing is sent
    // but each file's result: no queue to bound.
    let sources = Sources::two_threads_each(&files, threads);
    let options = sources.read_options;
    let work =
        |i: usize, reader: &Reader<'_, _>| read_one(&files[i], options, &mut reader.reading());
    let (figured, files): (Vec<Figured>, Vec<FileRead>) = sources
        .each(&work, &mut |_| progress())?
        .into_iter()
        .unzip();
    let ranks = runs
        .iter()
        .map(|run| ranked(run, run.iter().map(|p| figured[index[p]].clone()).collect()))
        .collect::<Result<_>>()?;
    Ok(Runs { ranks, files })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::attribution::groups::groups;
    use crate::read::attribution::{attribute, Links};
    use crate::tools::summary::events::Rules;
    use crate::tools::summary::summarize;
    use std::collections::HashMap;

    fn no_progress() -> impl FnMut() -> Result<()> {
        || Ok(())
    }

    /// A rank's step with an operator launching a kernel.
    fn trace(rank: i64, kernel_us: u32) -> String {
        format!(
            r#"{{"distributedInfo": {{"rank": {rank}}}, "traceEvents": [
 {{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100}},
 {{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": {{"Input Dims": [[2, 3], [3, 4]]}}}},
 {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {{"correlation": 1}}}},
 {{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 20}},
 {{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 30, "bp": "e"}},
 {{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 30, "dur": {kernel_us}, "args": {{"stream": 7, "correlation": 1}}}}
]}}"#
        )
    }

    #[test]
    fn one_read_gives_what_summarize_and_the_attribution_give_apart() {
        let scratch = crate::testing::scratch("diff-read");
        let write = |name: &str, text: String| {
            let path = scratch.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let (a0, a1) = (write("a0.json", trace(0, 5)), write("a1.json", trace(1, 7)));
        let b = write("b.json", trace(3, 9));
        // Two runs of two ranks (the second a0 again, read once), then one of one rank.
        let runs = vec![
            vec![a1.clone(), a0.clone()],
            vec![b.clone(), a0.clone()],
            vec![b.clone()],
        ];
        let got = read_runs(&runs, 2, &mut no_progress()).unwrap();
        for (run, ranks) in runs.iter().zip(&got.ranks) {
            let alone = summarize(run, Rules::Exact, 1, &mut no_progress()).unwrap();
            assert_eq!(format!("{ranks:?}"), format!("{alone:?}"));
        }
        assert_eq!(
            got.ranks[0].iter().map(|r| r.rank).collect::<Vec<_>>(),
            [0, 1]
        );
        let files: Vec<&PathBuf> = got.files.iter().map(|f| &f.path).collect();
        assert_eq!(files, [&a1, &a0, &b]);
        for FileRead {
            path,
            operators: found,
            ..
        } in &got.files
        {
            let a = attribute(path, ReadOptions::default(), Links::default(), &mut |_| {
                Ok(())
            })
            .unwrap();
            assert_eq!(found, &groups(&a));
            let mm = found.iter().find(|g| g.name == "aten::mm").unwrap();
            assert_eq!(mm.top_kernel.as_ref().map(|k| k.0.as_str()), Some("gemm"));
        }
    }

    /// The summary's figures made of the attribution's records are `summarize`'s, on the
    /// events where the two readings part: launches the call tree leaves out (an instant
    /// event, one without `dur`), the first of two launches of one correlation, a memory
    /// category with a kernel's name, `args` that is no object, a correlation of -1.
    #[test]
    fn figures_of_the_attributions_records_are_summarizes() {
        let text = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 200},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"correlation": 1}},
 {"ph": "i", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 40, "args": {"correlation": 2}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 70, "args": {"correlation": 3}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 150, "dur": 1, "args": {"correlation": 4}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 1, "args": {"correlation": 4}},
 {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 30, "dur": 5, "args": {"stream": 7, "correlation": 1}},
 {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 50, "dur": 5, "args": {"stream": 7, "correlation": 2}},
 {"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 80, "dur": 5, "args": {"stream": 7, "correlation": 3}},
 {"ph": "X", "cat": "kernel", "name": "k4", "pid": 0, "tid": 7, "ts": 120, "dur": 5, "args": {"stream": 7, "correlation": 4}},
 {"ph": "X", "cat": "kernel", "name": "k5", "pid": 0, "tid": 7, "ts": 140, "dur": 5, "args": {"stream": 7, "correlation": -1}},
 {"ph": "X", "cat": "gpu_memcpy", "name": "copy_kernel", "pid": 0, "tid": 8, "ts": 52, "dur": 10, "args": {"stream": 8}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 9, "ts": 60, "dur": 30, "args": "stream 9"}
]}"#;
        let scratch = crate::testing::scratch("diff-read-figures");
        let path = scratch.join("t.json");
        std::fs::write(&path, text).unwrap();
        let got = read_runs(&[vec![path.clone()]], 1, &mut no_progress()).unwrap();
        let alone = summarize(&[path], Rules::Exact, 1, &mut no_progress()).unwrap();
        assert_eq!(format!("{:?}", got.ranks[0]), format!("{alone:?}"));
        let f = &alone[0].figures;
        // Stream 7: k2 and k3 wait for launches the tree leaves out (40 > 35, 70 > 55), k4
        // for its first launch (150, not 10) after 85; k5's short gap has no launch.
        let seven = &f.idle_time.iter().find(|(s, _)| s == "7").unwrap().1;
        let waits = (seven.host_wait_us, seven.kernel_wait_us, seven.other_us);
        assert_eq!(waits, (15.0 + 25.0 + 35.0, 15.0, 0.0));
        assert!(f.idle_time.iter().any(|(s, _)| s == "-1"));
        let kind = |name: &str| f.kernels.iter().find(|k| k.name == name).unwrap().r#type;
        assert_eq!(kind("copy_kernel"), "MEMORY");
        assert_eq!(kind("ncclDevKernel_AllReduce"), "COMMUNICATION");
    }

    #[test]
    fn a_damaged_file_is_warned_of_or_refused_as_summarize_does() {
        let scratch = crate::testing::scratch("diff-read-damaged");
        let text = trace(0, 5);
        let cut = scratch.join("cut.json");
        std::fs::write(&cut, &text[..text.find("cudaLaunchKernel").unwrap()]).unwrap();
        let got = read_runs(&[vec![cut.clone()]], 1, &mut no_progress()).unwrap();
        let alone = summarize(
            std::slice::from_ref(&cut),
            Rules::Exact,
            1,
            &mut no_progress(),
        )
        .unwrap();
        assert_eq!(got.ranks[0][0].warnings, alone[0].warnings);
        assert!(got.ranks[0][0].warnings[0].contains("summarised up to there"));
        assert_eq!(got.files[0].operators[1].name, "aten::mm");
        let empty = scratch.join("empty.json");
        std::fs::write(&empty, "{\"traceEvents\": [").unwrap();
        let err = read_runs(&[vec![cut], vec![empty.clone()]], 2, &mut no_progress());
        let want = summarize(&[empty], Rules::Exact, 1, &mut no_progress()).unwrap_err();
        assert_eq!(err.unwrap_err().to_string(), want.to_string());
    }

    /// Two steps; step 1 launches k1, k2 and a memcpy that starts after step 2's window
    /// opens; step 2 launches k1 and k3; a collective without a correlation runs inside
    /// step 2's window.
    const STEPS_TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
 {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2, "args": {"correlation": 1}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 2, "args": {"correlation": 2}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 30, "dur": 2, "args": {"correlation": 3}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 2, "args": {"correlation": 4}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 120, "dur": 2, "args": {"correlation": 5}},
 {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 50, "dur": 30, "args": {"stream": 7, "correlation": 1}},
 {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 8, "ts": 70, "dur": 40, "args": {"stream": 8, "correlation": 2}},
 {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 9, "ts": 115, "dur": 10, "args": {"stream": 9, "correlation": 3, "bytes": 4096}},
 {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 130, "dur": 30, "args": {"stream": 7, "correlation": 4}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 10, "ts": 150, "dur": 5, "args": {"stream": 10}},
 {"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 160, "dur": 10, "args": {"stream": 7, "correlation": 5}},
 {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 9, "ts": 300, "dur": 1, "args": {"stream": 9, "bytes": 64}}
]}"#;

    fn read_steps(text: &str) -> RankSteps {
        let scratch = crate::testing::scratch("diff-steps");
        let path = scratch.join("t.json");
        std::fs::write(&path, text).unwrap();
        let mut found = read_runs(&[vec![path]], 1, &mut || Ok(())).unwrap();
        found.files.remove(0).steps
    }

    fn counted(found: &RankSteps, step: usize) -> Vec<(&str, u32)> {
        let mut out: Vec<(&str, u32)> = found.steps[step]
            .launched
            .iter()
            .map(|&(id, n)| (found.names[id as usize].0.as_str(), n))
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn windows_busy_time_counts_and_bytes_follow_the_rules() {
        let found = read_steps(STEPS_TRACE);
        // Windows: step 1 from 50 µs (its first activity) to 130 µs (step 2's first),
        // step 2 to 170 µs (the end of its last own). Busy: [50, 110) and [115, 125) in
        // the first, [130, 170) in the second.
        let busy: Vec<Option<i64>> = found.steps.iter().map(|s| s.gpu_busy_ns).collect();
        assert_eq!(busy, [Some(70_000), Some(40_000)]);
        // The memcpy is step 1's (its launch), though it runs in step 2's window; the
        // collective has no launch: the window its start falls in (step 2's).
        assert_eq!(
            counted(&found, 0),
            [
                ("Memcpy HtoD (Pageable -> Device)", 1),
                ("k1", 1),
                ("k2", 1)
            ]
        );
        assert_eq!(
            counted(&found, 1),
            [("k1", 1), ("k3", 1), ("ncclDevKernel_AllReduce", 1)]
        );
        assert_eq!(found.steps[0].memcpy_bytes, [4096, 0, 0, 0]);
        // The memset at 300 µs is after the last window: no step's, and no memcpy.
        assert_eq!(found.steps[1].memcpy_bytes, [0; 4]);
        let kinds: HashMap<&str, &str> =
            found.names.iter().map(|(n, k)| (n.as_str(), *k)).collect();
        assert_eq!(kinds["ncclDevKernel_AllReduce"], "COMMUNICATION");
        assert_eq!(kinds["Memcpy HtoD (Pageable -> Device)"], "MEMORY");
    }

    /// FLOPs per step: `ops`' modelled operators, each at the outermost (the `aten::mul`
    /// inside the `aten::addmm` is not counted again; the unmodelled `aten::linear` above
    /// it counts nothing), by the step whose CPU slice holds its start; an `aten::mm` whose
    /// inputs its model cannot read, and one outside every step, count nothing.
    #[test]
    fn flops_are_the_modelled_operators_of_each_step() {
        let ops = r#"
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 8, "dur": 6, "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 40, "dur": 6, "args": {"Input Dims": [], "Input type": []}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 105, "dur": 20},
 {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 106, "dur": 18, "args": {"Input Dims": [[16], [4, 8], [8, 16]], "Input type": ["float", "float", "float"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 107, "dur": 2, "args": {"Input Dims": [[4, 16], [4, 16]], "Input type": ["float", "float"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 500, "dur": 6, "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}},"#;
        let text = STEPS_TRACE.replacen(
            r#"{"traceEvents": ["#,
            &format!(r#"{{"traceEvents": [{ops}"#),
            1,
        );
        let found = read_steps(&text);
        let flops: Vec<i64> = found.steps.iter().map(|s| s.flops).collect();
        // 2 x 4 x 8 x 16; the same and the bias (4 x 16, as `ops` charges it).
        assert_eq!(flops, [1024, 1024 + 64]);
        // The GPU figures are those of the trace without the operators.
        let plain = read_steps(STEPS_TRACE);
        assert_eq!(found.steps[0].launched, plain.steps[0].launched);
        assert_eq!(
            plain.steps.iter().map(|s| s.flops).collect::<Vec<_>>(),
            [0, 0]
        );
    }

    #[test]
    fn a_step_that_launched_nothing_has_no_window() {
        let text = STEPS_TRACE.replace(
            r#" {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#2""#,
            r#" {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 400, "dur": 10},
 {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#2""#,
        );
        let found = read_steps(&text);
        let busy: Vec<Option<i64>> = found.steps.iter().map(|s| s.gpu_busy_ns).collect();
        // File order: steps 1, 3, 2; step 3 (at 400 µs) launched nothing.
        assert_eq!(busy, [Some(70_000), None, Some(40_000)]);
        assert!(found.steps[1].launched.is_empty());
    }
}
