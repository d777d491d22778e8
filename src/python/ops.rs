//! `ops`: the FLOPs, bytes and GPU time of each operator instance of traces for Python
//! (`kinetrace.ops`), read with the GIL released and Ctrl-C answered between waits, with
//! the GPU its roofline is drawn against (see `crate::tools::ops`).

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::interrupt::detached;
use crate::tools::ops::peaks::{gpu_by_user_name, Gpu, Precision, GPUS};
use crate::tools::ops::rates::{rates, Rates, Roof};
use crate::tools::ops::roofline::{peak_of, GpuChoice};
use crate::tools::ops::{reports, InstanceRow, Rules};

/// Python strings of the rows' texts, one object per distinct text (a group's instances
/// repeat their name and inputs: ~200 B a row saved, and no new string made).
#[derive(Default)]
struct Texts<'py>(HashMap<String, Bound<'py, PyString>>);

impl<'py> Texts<'py> {
    fn get(&mut self, py: Python<'py>, text: &str) -> Bound<'py, PyString> {
        if let Some(known) = self.0.get(text) {
            return known.clone();
        }
        let new = PyString::new(py, text);
        self.0.insert(text.to_owned(), new.clone());
        new
    }
}

/// The roofline figures of [`Rates`] into `d` (its keys and labels Python's interned
/// strings: ~20 a row otherwise made and freed again) (the keys of `OpRow` and `_Rates`).
fn set_rates(d: &Bound<'_, PyDict>, r: &Rates) -> PyResult<()> {
    let py = d.py();
    d.set_item(intern!(py, "tflops_s"), r.tflops_s)?;
    d.set_item(intern!(py, "tbs"), r.tbs)?;
    d.set_item(intern!(py, "flops_per_byte"), r.flops_per_byte)?;
    d.set_item(intern!(py, "roof_tflops"), r.roof_tflops)?;
    d.set_item(intern!(py, "roof_pct"), r.roof_pct)?;
    let bound = r.bound.map(|b| match b {
        Roof::Compute => intern!(py, "compute"),
        Roof::Memory => intern!(py, "memory"),
    });
    d.set_item(intern!(py, "bound"), bound)?;
    d.set_item(intern!(py, "roof_time_us"), r.roof_time_us)
}

/// A row of rank `rank` as `OpRow`, its roofline against `gpu`'s peak and bandwidth.
fn row_dict<'py>(
    py: Python<'py>,
    r: &InstanceRow,
    rank: i64,
    rules: Rules,
    gpu: Option<&Gpu>,
    texts: &mut Texts<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "uid"), r.uid)?;
    d.set_item(intern!(py, "rank"), rank)?;
    d.set_item(intern!(py, "name"), texts.get(py, &r.name))?;
    d.set_item(intern!(py, "table"), texts.get(py, r.table.label()))?;
    d.set_item(intern!(py, "bwd"), r.bwd)?;
    let (flops, bytes) = (r.figures.map(|f| f.flops), r.figures.and_then(|f| f.bytes));
    d.set_item(intern!(py, "flops"), flops)?;
    d.set_item(intern!(py, "bytes"), bytes)?;
    d.set_item(intern!(py, "kernel_time_us"), r.kernel_us)?;
    d.set_item(intern!(py, "kernel_time_ns"), r.kernel_ns)?;
    d.set_item(intern!(py, "kernel_uids"), PyList::new(py, &r.kernel_uids)?)?;
    let input_dims = r.input_dims.as_deref().map(|t| texts.get(py, t));
    d.set_item(intern!(py, "input_dims"), input_dims)?;
    let input_type = r.input_type.as_deref().map(|t| texts.get(py, t));
    d.set_item(intern!(py, "input_type"), input_type)?;
    d.set_item(intern!(py, "device"), r.device)?;
    let peak = gpu.and_then(|g| peak_of(g, r.table, r.input_type.as_deref()));
    let precision = peak.map(|(p, _)| texts.get(py, p.label()));
    d.set_item(intern!(py, "precision"), precision)?;
    d.set_item(intern!(py, "peak_tflops"), peak.map(|(_, v)| v))?;
    let time_us = match rules {
        Rules::TraceLens => r.kernel_us,
        Rules::Exact => r.kernel_ns as f64 / 1e3,
    };
    d.set_item(intern!(py, "time_us"), time_us)?;
    let bandwidth = gpu.map(|g| g.device_bandwidth_tbs());
    set_rates(
        &d,
        &rates(flops, bytes, time_us, peak.map(|(_, v)| v), bandwidth),
    )?;
    Ok(d)
}

/// The roofline figures of `flops` and `bytes` done in `time_us` against a peak (TFLOPS)
/// and a bandwidth (TB/s): the fields of `_Rates` in `_kinetrace.pyi` (a group's).
#[pyfunction]
#[pyo3(signature = (flops, bytes, time_us, peak_tflops, bandwidth_tbs))]
fn ops_rates(
    py: Python<'_>,
    flops: Option<f64>,
    bytes: Option<f64>,
    time_us: f64,
    peak_tflops: Option<f64>,
    bandwidth_tbs: Option<f64>,
) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    set_rates(
        &d,
        &rates(flops, bytes, time_us, peak_tflops, bandwidth_tbs),
    )?;
    Ok(d)
}

/// A GPU of the peaks table, per device (one GCD of an MI250X).
fn gpu_dict<'py>(py: Python<'py>, g: &Gpu) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "key"), g.key)?;
    d.set_item(intern!(py, "label"), g.label)?;
    d.set_item(intern!(py, "bandwidth_tbs"), g.device_bandwidth_tbs())?;
    let peaks = PyDict::new(py);
    for p in Precision::ALL {
        if let Some(v) = g.peak_tflops(p) {
            peaks.set_item(p.label(), v)?;
        }
    }
    d.set_item(intern!(py, "peaks_tflops"), peaks)?;
    d.set_item(intern!(py, "source"), g.source)?;
    Ok(d)
}

fn choice_dict<'py>(py: Python<'py>, c: &GpuChoice) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(
        intern!(py, "gpu"),
        c.gpu.map(|g| gpu_dict(py, g)).transpose()?,
    )?;
    d.set_item(intern!(py, "how"), c.how)?;
    d.set_item(
        intern!(py, "device_name"),
        c.device.as_ref().map(|x| x.name.clone()),
    )?;
    d.set_item(intern!(py, "note"), c.note.as_deref())?;
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

/// The instance rows of the traces at `paths` (one rank each, read `threads` files at once)
/// under `rules` (`"exact"` or `"tracelens"`), each against its trace's GPU (`gpu`: a
/// `--gpu` name, else the trace's): per rank, in rank order, `{"source", "rank", "rows",
/// "gpu"}` (the fields of `_OpsRank` in `_kinetrace.pyi`).
#[pyfunction]
#[pyo3(signature = (paths, rules, threads, gpu=None))]
fn ops<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    rules: &str,
    threads: usize,
    gpu: Option<&str>,
) -> PyResult<Bound<'py, PyList>> {
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
        reports(&paths, rules, user, threads, &mut |_| interrupted())
    })?;
    let out = PyList::empty(py);
    let mut texts = Texts::default();
    for file in &found {
        let rows = PyList::empty(py);
        let gpu = file.report.gpu.gpu;
        for r in &file.report.rows {
            rows.append(row_dict(py, r, file.rank, rules, gpu, &mut texts)?)?;
        }
        let d = PyDict::new(py);
        d.set_item(intern!(py, "source"), file.source.as_os_str())?;
        d.set_item(intern!(py, "rank"), file.rank)?;
        d.set_item(intern!(py, "rows"), rows)?;
        d.set_item(intern!(py, "gpu"), choice_dict(py, &file.report.gpu)?)?;
        out.append(d)?;
    }
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(ops_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(ops_rates, m)?)?;
    m.add_function(wrap_pyfunction!(ops_gpu_keys, m)?)
}
