//! `check_trace` and `recompress`: the streaming tools of `crate::check` for Python
//! (`kinetrace check` / `kinetrace compress`). Both run with the GIL released and check for
//! Ctrl-C every few MB.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::check::{self, CheckOptions, CheckReport, TopValue};
use crate::error::{Error, Result};

/// Runs `work` with the GIL released, giving it a progress callback that checks for
/// signals; the Python exception a signal handler raised (KeyboardInterrupt) comes back
/// unchanged.
fn detached_with_signals<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(&mut dyn FnMut(u64) -> Result<()>) -> Result<T> + Send,
) -> PyResult<T> {
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut progress = |_done: u64| -> Result<()> {
            Python::attach(|py| py.check_signals()).map_err(|err| {
                raised = Some(err);
                Error::Interrupted
            })
        };
        work(&mut progress)
    });
    if let Some(err) = raised {
        return Err(err);
    }
    Ok(result?)
}

fn top_value<'py>(py: Python<'py>, value: &Option<TopValue>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        None | Some(TopValue::Null) => py.None().into_bound(py),
        Some(TopValue::Number(text)) => {
            if let Ok(i) = text.parse::<i64>() {
                i.into_pyobject(py)?.into_any()
            } else if let Ok(i) = text.parse::<i128>() {
                i.into_pyobject(py)?.into_any()
            } else {
                // Valid JSON number syntax always parses (possibly to inf).
                text.parse::<f64>()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
            }
        }
        Some(TopValue::Str(s)) => s.into_pyobject(py)?.into_any(),
        Some(TopValue::Bool(b)) => b.into_pyobject(py)?.to_owned().into_any(),
        Some(TopValue::Container(kind)) => format!("<{kind}>").into_pyobject(py)?.into_any(),
    })
}

fn counts<'py>(py: Python<'py>, pairs: &[(String, u64)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, n) in pairs {
        d.set_item(k, n)?;
    }
    Ok(d)
}

fn report_dict<'py>(py: Python<'py>, r: &CheckReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("valid", r.valid)?;
    d.set_item("json_valid", r.json_valid)?;
    d.set_item("errors", PyList::new(py, &r.errors)?)?;
    d.set_item("error_count", r.error_count)?;
    d.set_item("warnings", PyList::new(py, &r.warnings)?)?;
    d.set_item("json_bytes", r.json_bytes)?;
    d.set_item("gzip_members", r.gzip_members)?;
    d.set_item("top_level_keys", PyList::new(py, &r.top_level_keys)?)?;
    d.set_item("schema_version", top_value(py, &r.schema_version)?)?;
    d.set_item("trace_name", top_value(py, &r.trace_name)?)?;
    d.set_item("base_time_ns", top_value(py, &r.base_time_ns)?)?;
    d.set_item("display_time_unit", top_value(py, &r.display_time_unit)?)?;
    d.set_item("events", r.events)?;
    d.set_item("phases", counts(py, &r.phases)?)?;
    d.set_item("categories", counts(py, &r.categories)?)?;
    d.set_item("processes", r.processes)?;
    d.set_item("threads", r.threads)?;
    d.set_item("ts_min", r.ts_min)?;
    d.set_item("ts_max", r.ts_max)?;
    d.set_item("flows_paired", r.flows_paired)?;
    d.set_item("flows_unpaired", r.flows_unpaired)?;
    d.set_item("summary_truncated", r.summary_truncated)?;
    Ok(d)
}

/// Validates the trace at `path` (JSON or gzip of any number of members). An invalid trace
/// is reported in the dict (`valid`, `errors`, ...), not raised; I/O errors raise OSError.
#[pyfunction]
#[pyo3(signature = (path, max_errors=50))]
fn check_trace<'py>(
    py: Python<'py>,
    path: PathBuf,
    max_errors: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let options = CheckOptions {
        max_errors,
        ..CheckOptions::default()
    };
    let report = detached_with_signals(py, |progress| check::check_path(&path, options, progress))?;
    report_dict(py, &report)
}

/// Streams `src` (JSON or gzip of any number of members) into `dst` as one gzip member
/// (atomically; `dst` may be `src`). Returns (decompressed bytes, bytes of `dst`).
#[pyfunction]
#[pyo3(signature = (src, dst, level, threads))]
fn recompress(
    py: Python<'_>,
    src: PathBuf,
    dst: PathBuf,
    level: u32,
    threads: usize,
) -> PyResult<(u64, u64)> {
    let stats = detached_with_signals(py, |progress| {
        crate::recompress::recompress(&src, &dst, level, threads, progress)
    })?;
    Ok((stats.json_bytes, stats.file_bytes))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_trace, m)?)?;
    m.add_function(wrap_pyfunction!(recompress, m)?)?;
    Ok(())
}
