//! `ops`: the FLOPs, bytes and GPU time of each operator instance of a trace for Python
//! (`kinetrace.ops`), read with the GIL released and Ctrl-C answered between waits (see
//! `crate::tools::ops`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::tools::ops::{rows, InstanceRow, Rules};

fn row_dict<'py>(py: Python<'py>, r: &InstanceRow) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("uid", r.uid)?;
    d.set_item("name", &r.name)?;
    d.set_item("table", r.table.label())?;
    d.set_item("bwd", r.bwd)?;
    d.set_item("flops", r.figures.map(|f| f.flops))?;
    d.set_item("bytes", r.figures.and_then(|f| f.bytes))?;
    d.set_item("kernel_time_us", r.kernel_us)?;
    d.set_item("kernel_time_ns", r.kernel_ns)?;
    d.set_item("kernel_uids", r.kernel_uids.clone())?;
    Ok(d)
}

/// The instance rows of the trace at `path` under `rules` (`"exact"` or `"tracelens"`): one
/// dict per row (the fields of `_OpRow` in `_kinetrace.pyi`).
#[pyfunction]
#[pyo3(signature = (path, rules))]
fn ops<'py>(py: Python<'py>, path: PathBuf, rules: &str) -> PyResult<Bound<'py, PyList>> {
    let rules = match rules {
        "exact" => Rules::Exact,
        "tracelens" => Rules::TraceLens,
        other => {
            return Err(PyValueError::new_err(format!(
                "rules must be 'exact' or 'tracelens', not {other:?}"
            )))
        }
    };
    let found = detached(py, |interrupted| rows(&path, rules, &mut || interrupted()))?;
    let out = PyList::empty(py);
    for r in &found {
        out.append(row_dict(py, r)?)?;
    }
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops, m)?)
}
