//! `ops`: the FLOPs, bytes and GPU time of each operator instance of traces for Python
//! (`kinetrace.ops`), read with the GIL released and Ctrl-C answered between waits, with
//! the GPU its roofline is drawn against (see `crate::tools::ops`). The rows stay here,
//! ~150 B each, and become dicts one at a time as Python asks for them (`OpRows`): a 1 GB
//! trace has ~0.66M, ~1.6 KB each as dicts; the groups Python gets are made here too.

use std::path::PathBuf;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySlice, PyString};

use super::interrupt::detached;
use crate::json::render::{push_int, push_json_string};
use crate::tools::ops::groups::{ranked, Group, RankedRow};
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

/// One value of a row, as the dict and the JSON text both give it.
enum Field<'a> {
    Int(Option<i64>),
    Float(Option<f64>),
    Text(Option<&'a str>),
    Bool(bool),
    Ints(&'a [u64]),
}

/// How many fields a row has (the compiler holds [`ROW_KEYS`] and [`row_values`] to it).
const ROW_FIELDS: usize = 23;

/// The keys of `OpRow`, in the order its dict and its JSON text give them.
const ROW_KEYS: [&str; ROW_FIELDS] = [
    "uid",
    "rank",
    "name",
    "table",
    "bwd",
    "flops",
    "bytes",
    "kernel_time_us",
    "kernel_time_ns",
    "kernel_uids",
    "input_dims",
    "input_type",
    "device",
    "precision",
    "peak_tflops",
    "time_us",
    "tflops_s",
    "tbs",
    "flops_per_byte",
    "roof_tflops",
    "roof_pct",
    "bound",
    "roof_time_us",
];

/// A row's values, one for each of [`ROW_KEYS`]: the one place a row's fields are listed,
/// for its dict ([`row_dict`]) and its JSON text ([`row_json`]) alike.
fn row_values(ranked: &RankedRow) -> [Field<'_>; ROW_FIELDS] {
    let (r, rates) = (&ranked.row, &ranked.rates);
    [
        Field::Int(Some(r.uid as i64)),
        Field::Int(Some(ranked.rank)),
        Field::Text(Some(&r.name)),
        Field::Text(Some(r.table.label())),
        Field::Bool(r.bwd),
        Field::Float(r.figures.map(|f| f.flops)),
        Field::Float(r.figures.and_then(|f| f.bytes)),
        Field::Float(Some(r.kernel_us)),
        Field::Int(Some(r.kernel_ns)),
        Field::Ints(&r.kernel_uids),
        Field::Text(r.input_dims.as_deref()),
        Field::Text(r.input_type.as_deref()),
        Field::Int(r.device),
        Field::Text(ranked.peak.map(|(p, _)| p.label())),
        Field::Float(ranked.peak.map(|(_, v)| v)),
        Field::Float(Some(ranked.time_us)),
        Field::Float(rates.tflops_s),
        Field::Float(rates.tbs),
        Field::Float(rates.flops_per_byte),
        Field::Float(rates.roof_tflops),
        Field::Float(rates.roof_pct),
        Field::Text(rates.bound.map(Roof::label)),
        Field::Float(rates.roof_time_us),
    ]
}

/// A row as `OpRow`, its keys `keys` ([`ROW_KEYS`] as Python strings, made once per
/// [`OpRows`], not ~25 new ones a row).
fn row_dict<'py>(
    py: Python<'py>,
    keys: &[Py<PyString>],
    ranked: &RankedRow,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (key, value) in keys.iter().zip(row_values(ranked)) {
        let key = key.bind(py);
        match value {
            Field::Int(v) => d.set_item(key, v)?,
            Field::Float(v) => d.set_item(key, v)?,
            Field::Text(v) => d.set_item(key, v)?,
            Field::Bool(v) => d.set_item(key, v)?,
            Field::Ints(v) => d.set_item(key, PyList::new(py, v)?)?,
        }
    }
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
    keys: Vec<Py<PyString>>,
}

impl OpRows {
    fn new(py: Python<'_>, rows: Vec<RankedRow>) -> Self {
        let keys = ROW_KEYS
            .iter()
            .map(|k| PyString::intern(py, k).unbind())
            .collect();
        OpRows { rows, keys }
    }

    fn row<'py>(&self, py: Python<'py>, at: usize) -> PyResult<Bound<'py, PyDict>> {
        row_dict(py, &self.keys, &self.rows[at])
    }
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
                out.append(self.row(py, at as usize)?)?;
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
        Ok(self.row(py, at as usize)?.into_any().unbind())
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

    fn ints(&mut self, key: &str, v: &[u64]) {
        let out = self.key(key);
        out.push(b'[');
        for (i, &n) in v.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            push_int(out, n);
        }
        out.push(b']');
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

/// [`row_dict`]'s keys and values in its order, as `json.dumps` writes that dict.
fn row_json(out: &mut Vec<u8>, ranked: &RankedRow) {
    let mut o = JsonObject::new(out);
    for (key, value) in ROW_KEYS.iter().zip(row_values(ranked)) {
        match value {
            Field::Int(v) => o.int(key, v),
            Field::Float(v) => o.float(key, v),
            Field::Text(v) => o.text(key, v),
            Field::Bool(v) => o.boolean(key, v),
            Field::Ints(v) => o.ints(key, v),
        }
    }
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
        let rows = self.rows.get();
        if self.next >= rows.rows.len() {
            return Ok(None);
        }
        self.next += 1;
        rows.row(py, self.next - 1).map(Some)
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
/// `{"ranks": [{"source", "rank", "gpu"}, ...], "rows": OpRows, "groups": [...],
/// "coverage": {...} | None}`, ranks in rank order (the fields of `_OpsFound` in
/// `_kinetrace.pyi`).
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
    let (ranks, rows, groups, coverage) = detached(py, |interrupted| {
        let found = reports(&paths, rules, user, threads, &mut |_| interrupted())?;
        Ok::<_, crate::error::Error>(ranked(found, rules))
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
    d.set_item(intern!(py, "rows"), Bound::new(py, OpRows::new(py, rows))?)?;
    let coverage = match coverage {
        Some(c) => {
            let c_dict = PyDict::new(py);
            let us = |ns: i64| ns as f64 / 1e3;
            c_dict.set_item(intern!(py, "modelled_us"), us(c.modelled_ns))?;
            c_dict.set_item(intern!(py, "unmodelled_us"), us(c.unmodelled_ns))?;
            c_dict.set_item(intern!(py, "without_shapes_us"), us(c.without_shapes_ns))?;
            c_dict.set_item(intern!(py, "collectives_us"), us(c.collectives_ns))?;
            c_dict.set_item(intern!(py, "modelled_share"), c.share())?;
            Some(c_dict)
        }
        None => None,
    };
    d.set_item(intern!(py, "coverage"), coverage)?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(ops_gpu, m)?)?;
    m.add_class::<OpRows>()?;
    m.add_function(wrap_pyfunction!(ops_gpu_keys, m)?)
}
