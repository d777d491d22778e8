//! `kinetrace diff`'s native side for Python, each read with the GIL released and Ctrl-C
//! answered between waits: `diff_operators`, the operators of one trace grouped by (name,
//! `Input Dims`, `Input type`) with their self CPU time and own GPU time
//! (`crate::read::attribution::groups`), and `diff_hta_side`, one side of `--rules hta`
//! (`crate::tools::diff::hta`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::read::attribution::groups::groups_of;
use crate::tools::diff::hta;

/// The operator groups of each trace at `paths` (in their order), `threads` files at once:
/// per trace a list of dicts with the fields of `_OperatorGroup` in `_kinetrace.pyi`, in
/// order of first instance. A trace damaged after some events gives those up to the
/// damage, as `summarize` (which `diff` runs first, and warns) reads it.
#[pyfunction]
fn diff_operators<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    threads: usize,
) -> PyResult<Bound<'py, PyList>> {
    let found = detached(py, |interrupted| {
        groups_of(&paths, threads, &mut |_| interrupted())
    })?;
    let out = PyList::empty(py);
    for file in found {
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
        out.append(groups)?;
    }
    Ok(out)
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
    m.add_function(wrap_pyfunction!(diff_operators, m)?)?;
    m.add_function(wrap_pyfunction!(diff_hta_side, m)?)
}
