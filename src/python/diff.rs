//! `kinetrace diff`'s native side for Python, each read with the GIL released and Ctrl-C
//! answered between waits: `diff_read`, both sides read once per file for their summaries
//! and their operators grouped by (name, `Input Dims`, `Input type`) with their self CPU
//! time and own GPU time, and each step's GPU busy time and counts
//! (`crate::tools::diff::read`, `crate::tools::diff::steps`), and `diff_hta_side`, one side of
//! `--rules hta` (`crate::tools::diff::hta`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use super::summary::rank_dict;
use crate::read::attribution::groups::Group;
use crate::tools::diff::hta;
use crate::tools::diff::read::read_runs;
use crate::tools::diff::steps::{RankSteps, DIRECTIONS};

/// The operator groups of one file as a list of dicts with the fields of `_OperatorGroup`
/// in `_kinetrace.pyi`, in order of first instance.
fn groups_list<'py>(py: Python<'py>, file: Vec<Group>) -> PyResult<Bound<'py, PyList>> {
    let groups = PyList::empty(py);
    for g in file {
        let d = PyDict::new(py);
        d.set_item("name", g.name)?;
        d.set_item("input_dims", g.input_dims)?;
        d.set_item("input_type", g.input_type)?;
        d.set_item("count", g.count)?;
        d.set_item("self_ns", g.self_ns)?;
        d.set_item("gpu_ns", g.gpu_ns)?;
        let (top, top_ns) = g.top_kernel.unzip();
        d.set_item("top_kernel", top)?;
        d.set_item("top_kernel_ns", top_ns)?;
        groups.append(d)?;
    }
    Ok(groups)
}

/// The figures of each step of one file as the dict `_RankSteps` of `_kinetrace.pyi`.
fn steps_dict<'py>(py: Python<'py>, found: RankSteps) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let (names, kinds): (Vec<String>, Vec<&str>) = found.names.into_iter().unzip();
    d.set_item("names", names)?;
    d.set_item("kinds", kinds)?;
    d.set_item("directions", DIRECTIONS.to_vec())?;
    let steps = PyList::empty(py);
    for step in found.steps {
        let (ids, counts): (Vec<u32>, Vec<u32>) = step.launched.into_iter().unzip();
        let s = PyDict::new(py);
        s.set_item("gpu_busy_ns", step.gpu_busy_ns)?;
        s.set_item("names", ids)?;
        s.set_item("counts", counts)?;
        s.set_item("memcpy_bytes", step.memcpy_bytes.to_vec())?;
        s.set_item("flops", step.flops)?;
        steps.append(s)?;
    }
    d.set_item("steps", steps)?;
    Ok(d)
}

/// Reads the trace files of `runs` (each a list of files, one rank each), every file once
/// and `threads` files at once, for `summarize`'s figures, the operators and the steps:
/// per run the list `summarize(run, "exact", threads)` gives (the same warnings for a
/// trace damaged after some events, the same errors), and two dicts from each file (as the
/// ranks' `source` name it): to its operator groups (`groups_list`) and to its steps'
/// figures (`steps_dict`), as far as the file reads.
#[pyfunction]
fn diff_read<'py>(
    py: Python<'py>,
    runs: Vec<Vec<PathBuf>>,
    threads: usize,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let started = std::time::Instant::now();
    let found = detached(py, |interrupted| {
        read_runs(&runs, threads, &mut || interrupted())
    })?;
    py.detach(|| super::slow_down_for_tests(started));
    let ranks = PyList::empty(py);
    for run in &found.ranks {
        let out = PyList::empty(py);
        for r in run {
            out.append(rank_dict(py, r)?)?;
        }
        ranks.append(out)?;
    }
    let (operators, steps) = (PyDict::new(py), PyDict::new(py));
    for file in found.files {
        let key = file.path.as_os_str();
        operators.set_item(key, groups_list(py, file.operators)?)?;
        steps.set_item(key, steps_dict(py, file.steps)?)?;
    }
    Ok((ranks, operators, steps))
}

/// The count and total `dur` (µs) per event name of one rank (default the first) in one
/// iteration (default the first) of the trace files at `paths`, as HTA 0.5.0's
/// `TraceDiff.compare_traces` counts them: a dict with the fields of `_HtaSide` in
/// `_kinetrace.pyi`.
#[pyfunction]
#[pyo3(signature = (paths, rank, iteration, threads))]
fn diff_hta_side<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    rank: Option<i64>,
    iteration: Option<i64>,
    threads: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let side = detached(py, |interrupted| {
        hta::side(&paths, rank, iteration, threads, &mut || interrupted())
    })?;
    let d = PyDict::new(py);
    d.set_item("source", side.source.as_os_str())?;
    d.set_item("rank", side.rank)?;
    d.set_item("ranks", side.ranks)?;
    d.set_item("iteration", side.iteration)?;
    d.set_item("iterations", side.iterations)?;
    d.set_item("ops", side.ops)?;
    d.set_item("warnings", side.warnings)?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(diff_read, m)?)?;
    m.add_function(wrap_pyfunction!(diff_hta_side, m)?)
}
