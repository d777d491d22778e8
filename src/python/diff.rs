//! `diff_hta_side`: one side of `kinetrace diff --rules hta` for Python, read with the GIL
//! released and Ctrl-C answered between waits (see `crate::tools::diff::hta`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::interrupt::detached;
use crate::tools::diff::hta;

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
    m.add_function(wrap_pyfunction!(diff_hta_side, m)?)
}
