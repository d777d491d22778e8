//! `ops`: the FLOPs, bytes and GPU time of each operator instance of a trace for Python
//! (`kinetrace.ops`), read with the GIL released and Ctrl-C answered between waits, with
//! the GPU its roofline is drawn against (see `crate::tools::ops`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::tools::ops::peaks::{gpu_by_user_name, Gpu, Precision, GPUS};
use crate::tools::ops::roofline::{peak_of, GpuChoice};
use crate::tools::ops::{rows, InstanceRow, Rules};

fn row_dict<'py>(
    py: Python<'py>,
    r: &InstanceRow,
    gpu: Option<&Gpu>,
) -> PyResult<Bound<'py, PyDict>> {
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
    d.set_item("input_dims", r.input_dims.as_deref())?;
    d.set_item("input_type", r.input_type.as_deref())?;
    d.set_item("device", r.device)?;
    let peak = gpu.and_then(|g| peak_of(g, r.table, r.input_type.as_deref()));
    d.set_item("precision", peak.map(|(p, _)| p.label()))?;
    d.set_item("peak_tflops", peak.map(|(_, v)| v))?;
    Ok(d)
}

/// A GPU of the peaks table, per device (one GCD of an MI250X).
fn gpu_dict<'py>(py: Python<'py>, g: &Gpu) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("key", g.key)?;
    d.set_item("label", g.label)?;
    d.set_item("bandwidth_tbs", g.device_bandwidth_tbs())?;
    let peaks = PyDict::new(py);
    for p in Precision::ALL {
        if let Some(v) = g.peak_tflops(p) {
            peaks.set_item(p.label(), v)?;
        }
    }
    d.set_item("peaks_tflops", peaks)?;
    d.set_item("source", g.source)?;
    Ok(d)
}

fn choice_dict<'py>(py: Python<'py>, c: &GpuChoice) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("gpu", c.gpu.map(|g| gpu_dict(py, g)).transpose()?)?;
    d.set_item("how", c.how)?;
    d.set_item("device_name", c.device.as_ref().map(|x| x.name.clone()))?;
    d.set_item("note", c.note.as_deref())?;
    Ok(d)
}

/// The GPU `--gpu NAME` names (a table key, a device name, a family), or `None`.
#[pyfunction]
fn ops_gpu<'py>(py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
    gpu_by_user_name(name).map(|g| gpu_dict(py, g)).transpose()
}

/// The keys of the peaks table, in its order.
#[pyfunction]
fn ops_gpu_keys() -> Vec<&'static str> {
    GPUS.iter().map(|g| g.key).collect()
}

/// The instance rows of the trace at `path` under `rules` (`"exact"` or `"tracelens"`) and
/// its GPU (`gpu`: a `--gpu` name, else the trace's): `{"rows": [...], "gpu": ...}` (the
/// fields of `_OpsFound` in `_kinetrace.pyi`).
#[pyfunction]
#[pyo3(signature = (path, rules, gpu=None))]
fn ops<'py>(
    py: Python<'py>,
    path: PathBuf,
    rules: &str,
    gpu: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let rules = match rules {
        "exact" => Rules::Exact,
        "tracelens" => Rules::TraceLens,
        other => {
            return Err(PyValueError::new_err(format!(
                "rules must be 'exact' or 'tracelens', not {other:?}"
            )))
        }
    };
    let user = match gpu {
        Some(name) => Some(gpu_by_user_name(name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown GPU {name:?}; known: {}",
                ops_gpu_keys().join(", ")
            ))
        })?),
        None => None,
    };
    let found = detached(py, |interrupted| {
        rows(&path, rules, user, &mut || interrupted())
    })?;
    let out = PyList::empty(py);
    for r in &found.rows {
        out.append(row_dict(py, r, found.gpu.gpu)?)?;
    }
    let d = PyDict::new(py);
    d.set_item("rows", out)?;
    d.set_item("gpu", choice_dict(py, &found.gpu)?)?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(ops_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(ops_gpu_keys, m)?)
}
