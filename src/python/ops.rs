//! `ops`: the FLOPs, bytes and GPU time of each operator instance of traces for Python
//! (`kinetrace.ops`), read with the GIL released and Ctrl-C answered between waits, with
//! the GPU its roofline is drawn against (see `crate::tools::ops`). The rows stay here,
//! ~150 B each, and become dicts one at a time as Python asks for them (`OpRows`): a 1 GB
//! trace has ~0.66M, ~1.6 KB each as dicts; the groups Python gets are made here too.

use std::path::PathBuf;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySlice};

use super::interrupt::detached;
use crate::json::render::{push_int, push_json_string};
use crate::tools::ops::groups::{groups, Group, RankedRow};
use crate::tools::ops::peaks::{gpu_by_user_name, Gpu, Precision, GPUS};
use crate::tools::ops::rates::{Rates, Roof};
use crate::tools::ops::roofline::GpuChoice;
use crate::tools::ops::{reports, Rules};

/// The roofline figures of [`Rates`] into `d` (the keys of `OpRow` and `_OpGroup`); keys
/// and labels are interned strings, not ~20 new ones a row.
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

/// `precision` and `peak_tflops`.
fn set_peak(d: &Bound<'_, PyDict>, peak: Option<(Precision, f64)>) -> PyResult<()> {
    let py = d.py();
    d.set_item(intern!(py, "precision"), peak.map(|(p, _)| p.label()))?;
    d.set_item(intern!(py, "peak_tflops"), peak.map(|(_, v)| v))
}

/// A row as `OpRow`.
fn row_dict<'py>(py: Python<'py>, ranked: &RankedRow) -> PyResult<Bound<'py, PyDict>> {
    let r = &ranked.row;
    let d = PyDict::new(py);
    d.set_item(intern!(py, "uid"), r.uid)?;
    d.set_item(intern!(py, "rank"), ranked.rank)?;
    d.set_item(intern!(py, "name"), &r.name)?;
    d.set_item(intern!(py, "table"), r.table.label())?;
    d.set_item(intern!(py, "bwd"), r.bwd)?;
    d.set_item(intern!(py, "flops"), r.figures.map(|f| f.flops))?;
    d.set_item(intern!(py, "bytes"), r.figures.and_then(|f| f.bytes))?;
    d.set_item(intern!(py, "kernel_time_us"), r.kernel_us)?;
    d.set_item(intern!(py, "kernel_time_ns"), r.kernel_ns)?;
    d.set_item(intern!(py, "kernel_uids"), PyList::new(py, &r.kernel_uids)?)?;
    d.set_item(intern!(py, "input_dims"), r.input_dims.as_deref())?;
    d.set_item(intern!(py, "input_type"), r.input_type.as_deref())?;
    d.set_item(intern!(py, "device"), r.device)?;
    set_peak(&d, ranked.peak)?;
    d.set_item(intern!(py, "time_us"), ranked.time_us)?;
    set_rates(&d, &ranked.rates)?;
    Ok(d)
}

/// A group as the fields of `OpGroup`.
fn group_dict<'py>(py: Python<'py>, g: &Group) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "name"), &g.name)?;
    d.set_item(intern!(py, "table"), g.table.label())?;
    d.set_item(intern!(py, "bwd"), g.bwd)?;
    d.set_item(intern!(py, "input_dims"), g.input_dims.as_deref())?;
    d.set_item(intern!(py, "input_type"), g.input_type.as_deref())?;
    d.set_item(intern!(py, "count"), g.count)?;
    d.set_item(intern!(py, "time_us"), g.time_us)?;
    d.set_item(intern!(py, "mean_us"), g.mean_us)?;
    d.set_item(intern!(py, "median_us"), g.median_us)?;
    d.set_item(intern!(py, "min_us"), g.min_us)?;
    d.set_item(intern!(py, "max_us"), g.max_us)?;
    d.set_item(intern!(py, "flops"), g.flops)?;
    d.set_item(intern!(py, "bytes"), g.bytes)?;
    set_peak(&d, g.peak)?;
    set_rates(&d, &g.rates)?;
    d.set_item(intern!(py, "saveable_us"), g.saveable_us)?;
    Ok(d)
}

/// The instance rows of an `ops` report, rank by rank and operators in file order: a
/// read-only sequence whose items are made as `OpRow` dicts when asked for (each access a
/// new dict).
#[pyclass(module = "kinetrace._kinetrace", name = "OpRows", frozen, sequence)]
pub(crate) struct OpRows {
    rows: Vec<RankedRow>,
}

#[pymethods]
impl OpRows {
    fn __len__(&self) -> usize {
        self.rows.len()
    }

    /// The row at `index` (negative from the end), or a list of those of a slice.
    fn __getitem__<'py>(&self, py: Python<'py>, index: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(slice) = index.cast::<PySlice>() {
            let found = slice.indices(self.rows.len() as isize)?;
            let out = PyList::empty(py);
            let mut at = found.start;
            for _ in 0..found.slicelength {
                out.append(row_dict(py, &self.rows[at as usize])?)?;
                at += found.step;
            }
            return Ok(out.into_any().unbind());
        }
        let i: isize = index.extract()?;
        let len = self.rows.len() as isize;
        let at = if i < 0 { i + len } else { i };
        if !(0..len).contains(&at) {
            return Err(PyIndexError::new_err("OpRows index out of range"));
        }
        Ok(row_dict(py, &self.rows[at as usize])?.into_any().unbind())
    }

    fn __iter__(slf: Py<Self>) -> OpRowsIter {
        OpRowsIter { rows: slf, next: 0 }
    }

    fn __repr__(&self) -> String {
        format!("<OpRows: {} rows>", self.rows.len())
    }

    /// Rows `start` to `stop` (clipped to the rows) as the text `",\n  ".join(json.dumps(r)
    /// for r in rows[start:stop])` gives, made without a dict: `--json` prints 0.66M rows
    /// of a 1 GB trace.
    fn json_text(&self, start: usize, stop: usize) -> String {
        let stop = stop.min(self.rows.len());
        let mut out = Vec::new();
        for (i, r) in self.rows[start.min(stop)..stop].iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b",\n  ");
            }
            row_json(&mut out, r);
        }
        // Only ASCII: strings are escaped as `json.dumps` escapes them.
        String::from_utf8(out).unwrap_or_default()
    }
}

/// A float as Python's `json.dumps` writes it (`repr`: the shortest text that reads back
/// as the same double, an exponent of at least two digits with its sign below 1e-4 and
/// from 1e16; `NaN`, `Infinity`).
fn push_float(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else {
        // Rust's `Debug` is the shortest text too, in exponent form from the same bounds;
        // only the exponent is written differently (`1e-7`, `1e16`).
        let text = format!("{v:?}");
        match text.split_once('e') {
            None => out.extend_from_slice(text.as_bytes()),
            Some((mantissa, exp)) => {
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                let exp = format!("{mantissa}e{sign}{digits:0>2}");
                out.extend_from_slice(exp.as_bytes());
            }
        }
    }
}

/// A JSON object of `(key, value writer)` pairs, `json.dumps`' separators.
struct JsonObject<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> JsonObject<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        JsonObject { out, first: true }
    }

    fn key(&mut self, key: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.extend_from_slice(b", ");
        }
        self.first = false;
        push_json_string(self.out, key.as_bytes());
        self.out.extend_from_slice(b": ");
        self.out
    }

    fn int(&mut self, key: &str, v: Option<impl itoa::Integer>) {
        let out = self.key(key);
        match v {
            Some(v) => push_int(out, v),
            None => out.extend_from_slice(b"null"),
        }
    }

    fn float(&mut self, key: &str, v: Option<f64>) {
        let out = self.key(key);
        match v {
            Some(v) => push_float(out, v),
            None => out.extend_from_slice(b"null"),
        }
    }

    fn text(&mut self, key: &str, v: Option<&str>) {
        let out = self.key(key);
        match v {
            Some(v) => push_json_string(out, v.as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
    }

    fn boolean(&mut self, key: &str, v: bool) {
        let out = self.key(key);
        out.extend_from_slice(if v { b"true" } else { b"false" });
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

/// [`row_dict`]'s keys and values in its order, as `json.dumps` writes that dict.
fn row_json(out: &mut Vec<u8>, ranked: &RankedRow) {
    let r = &ranked.row;
    let mut o = JsonObject::new(out);
    o.int("uid", Some(r.uid));
    o.int("rank", Some(ranked.rank));
    o.text("name", Some(&r.name));
    o.text("table", Some(r.table.label()));
    o.boolean("bwd", r.bwd);
    o.float("flops", r.figures.map(|f| f.flops));
    o.float("bytes", r.figures.and_then(|f| f.bytes));
    o.float("kernel_time_us", Some(r.kernel_us));
    o.int("kernel_time_ns", Some(r.kernel_ns));
    let uids = o.key("kernel_uids");
    uids.push(b'[');
    for (i, &uid) in r.kernel_uids.iter().enumerate() {
        if i > 0 {
            uids.extend_from_slice(b", ");
        }
        push_int(uids, uid);
    }
    uids.push(b']');
    o.text("input_dims", r.input_dims.as_deref());
    o.text("input_type", r.input_type.as_deref());
    o.int("device", r.device);
    o.text("precision", ranked.peak.map(|(p, _)| p.label()));
    o.float("peak_tflops", ranked.peak.map(|(_, v)| v));
    o.float("time_us", Some(ranked.time_us));
    let rates = &ranked.rates;
    o.float("tflops_s", rates.tflops_s);
    o.float("tbs", rates.tbs);
    o.float("flops_per_byte", rates.flops_per_byte);
    o.float("roof_tflops", rates.roof_tflops);
    o.float("roof_pct", rates.roof_pct);
    o.text("bound", rates.bound.map(Roof::label));
    o.float("roof_time_us", rates.roof_time_us);
    o.end();
}

/// An iterator over [`OpRows`].
#[pyclass(module = "kinetrace._kinetrace", name = "_OpRowsIterator")]
struct OpRowsIter {
    rows: Py<OpRows>,
    next: usize,
}

#[pymethods]
impl OpRowsIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let rows = &self.rows.get().rows;
        let Some(r) = rows.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        row_dict(py, r).map(Some)
    }
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
/// `--gpu` name, else the trace's), and their groups (the first rank's GPU's bandwidth):
/// `{"ranks": [{"source", "rank", "gpu"}, ...], "rows": OpRows, "groups": [...]}`, ranks
/// in rank order (the fields of `_OpsFound` in `_kinetrace.pyi`).
#[pyfunction]
#[pyo3(signature = (paths, rules, threads, gpu=None))]
fn ops<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    rules: &str,
    threads: usize,
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
    let (ranks, rows, groups) = detached(py, |interrupted| {
        let found = reports(&paths, rules, user, threads, &mut |_| interrupted())?;
        let bandwidth = found
            .first()
            .and_then(|f| f.report.gpu.gpu)
            .map(Gpu::device_bandwidth_tbs);
        let mut rows = Vec::new();
        let mut ranks = Vec::new();
        for file in found {
            let gpu = file.report.gpu.gpu;
            rows.extend(
                (file.report.rows.into_iter()).map(|r| RankedRow::new(r, file.rank, rules, gpu)),
            );
            ranks.push((file.source, file.rank, file.report.gpu));
        }
        let groups = groups(&rows, bandwidth);
        Ok::<_, crate::error::Error>((ranks, rows, groups))
    })?;
    let out = PyList::empty(py);
    for (source, rank, gpu) in &ranks {
        let d = PyDict::new(py);
        d.set_item(intern!(py, "source"), source.as_os_str())?;
        d.set_item(intern!(py, "rank"), rank)?;
        d.set_item(intern!(py, "gpu"), choice_dict(py, gpu)?)?;
        out.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item(intern!(py, "ranks"), out)?;
    let group_list = PyList::empty(py);
    for g in &groups {
        group_list.append(group_dict(py, g)?)?;
    }
    d.set_item(intern!(py, "groups"), group_list)?;
    d.set_item(intern!(py, "rows"), Bound::new(py, OpRows { rows })?)?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(ops_gpu, m)?)?;
    m.add_class::<OpRows>()?;
    m.add_function(wrap_pyfunction!(ops_gpu_keys, m)?)
}
