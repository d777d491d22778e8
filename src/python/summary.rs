//! `summarize`: per-rank figures of trace files for Python (`kinetrace summary`), read with
//! the GIL released and Ctrl-C answered between waits (see `crate::summary`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::tools::summary::events::Rules;
use crate::tools::summary::report::RankSummary;
use crate::tools::summary::{self};

/// A dict of figures under the names they have in Rust (`report.rs`), which are the
/// dataclass fields of `kinetrace._tools.summary` and the JSON keys.
fn named_dict<'py>(py: Python<'py>, named: &[(&'static str, f64)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in named {
        d.set_item(name, value)?;
    }
    Ok(d)
}

/// A rank's summary as `summarize` gives it (also `diff_read`'s).
pub(super) fn rank_dict<'py>(py: Python<'py>, r: &RankSummary) -> PyResult<Bound<'py, PyDict>> {
    let f = &r.figures;
    let d = PyDict::new(py);
    d.set_item("rank", r.rank)?;
    d.set_item("rank_from", r.rank_from)?;
    d.set_item("source", r.source.as_os_str())?;
    d.set_item(
        "temporal_breakdown",
        named_dict(py, &f.temporal_breakdown.named())?,
    )?;
    d.set_item("kernel_types", f.kernel_types.clone())?;
    let kernels = PyList::empty(py);
    for k in &f.kernels {
        let kd = named_dict(py, &k.times.named())?;
        kd.set_item("name", &k.name)?;
        kd.set_item("type", k.r#type)?;
        kd.set_item("count", k.count)?;
        kernels.append(kd)?;
    }
    d.set_item("kernels", kernels)?;
    d.set_item("comm_comp_overlap_pct", f.comm_comp_overlap_pct)?;
    let idle = PyDict::new(py);
    for (stream, i) in &f.idle_time {
        idle.set_item(stream, named_dict(py, &i.named())?)?;
    }
    d.set_item("idle_time", idle)?;
    d.set_item("steps", r.steps.clone())?;
    d.set_item("gpu_activities", f.gpu_activities)?;
    d.set_item("events", r.events)?;
    d.set_item("json_bytes", r.json_bytes)?;
    d.set_item("warnings", r.warnings.clone())?;
    Ok(d)
}

/// Summarises the traces at `paths` (one rank each) under `rules` (`"exact"` or `"hta"`),
/// on up to `threads` threads: one dict per rank (the fields of `_RankFigures` in
/// `_kinetrace.pyi`), in rank order.
#[pyfunction]
#[pyo3(signature = (paths, rules, threads))]
fn summarize<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    rules: &str,
    threads: usize,
) -> PyResult<Bound<'py, PyList>> {
    let rules = match rules {
        "exact" => Rules::Exact,
        "hta" => Rules::Hta,
        other => {
            return Err(PyValueError::new_err(format!(
                "rules must be 'exact' or 'hta', not {other:?}"
            )))
        }
    };
    let started = std::time::Instant::now();
    let ranks = detached(py, |interrupted| {
        summary::summarize(&paths, rules, threads, &mut || interrupted())
    })?;
    py.detach(|| super::slow_down_for_tests(started));
    let out = PyList::empty(py);
    for r in &ranks {
        out.append(rank_dict(py, r)?)?;
    }
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(summarize, m)?)
}
