//! `check_trace` for Python (`kinetrace check`): the findings and summary as dicts, the
//! check run with the GIL released, answering Ctrl-C at its progress reports (every few MB).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::tools::check::{self, CheckOptions, CheckReport, Finding, TopValue};
use crate::tools::report::Place;

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

/// A report's examples as dicts (`offset` None where there is no one place: never in check's
/// findings).
pub(super) fn places<'py>(py: Python<'py>, places: &[Place]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for p in places {
        let d = PyDict::new(py);
        d.set_item("offset", p.offset)?;
        d.set_item("event_index", p.index)?;
        d.set_item("message", &p.message)?;
        list.append(d)?;
    }
    Ok(list)
}

fn finding_dict<'py>(py: Python<'py>, f: &Finding) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("kind", f.kind.name())?;
    d.set_item(
        "level",
        if f.kind.is_error() {
            "error"
        } else {
            "warning"
        },
    )?;
    d.set_item("count", f.count)?;
    d.set_item("message", &f.message)?;
    d.set_item("examples", places(py, &f.examples)?)?;
    let tracks = PyList::empty(py);
    for t in &f.extra.tracks {
        let td = PyDict::new(py);
        td.set_item("pid", &t.pid)?;
        td.set_item("tid", &t.tid)?;
        td.set_item("name", &t.name)?;
        td.set_item("dropped", t.dropped)?;
        tracks.append(td)?;
    }
    d.set_item("tracks", tracks)?;
    d.set_item("track_count", f.extra.track_count)?;
    d.set_item("note", &f.extra.note)?;
    Ok(d)
}

fn findings<'py>(py: Python<'py>, fs: &[Finding]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for f in fs {
        list.append(finding_dict(py, f)?)?;
    }
    Ok(list)
}

fn report_dict<'py>(py: Python<'py>, r: &CheckReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("valid", r.valid())?;
    d.set_item("complete", r.complete)?;
    d.set_item("errors", findings(py, &r.errors)?)?;
    d.set_item("warnings", findings(py, &r.warnings)?)?;
    let s = &r.summary;
    let info = PyDict::new(py);
    info.set_item("json_bytes", s.json_bytes)?;
    info.set_item("gzip_members", s.gzip_members)?;
    info.set_item("top_level_keys", PyList::new(py, &s.top_level_keys)?)?;
    info.set_item("schema_version", top_value(py, &s.schema_version)?)?;
    info.set_item("trace_name", top_value(py, &s.trace_name)?)?;
    info.set_item("base_time_ns", top_value(py, &s.base_time_ns)?)?;
    info.set_item("display_time_unit", top_value(py, &s.display_time_unit)?)?;
    info.set_item("events", s.events)?;
    info.set_item("phases", counts(py, &s.phases)?)?;
    info.set_item("categories", counts(py, &s.categories)?)?;
    info.set_item("processes", s.processes)?;
    info.set_item("threads", s.threads)?;
    info.set_item("ts_min", s.ts_min)?;
    info.set_item("ts_max", s.ts_max)?;
    info.set_item("flows_paired", s.flows_paired)?;
    info.set_item("flows_unpaired", s.flows_unpaired)?;
    info.set_item("summary_truncated", s.summary_truncated)?;
    d.set_item("info", info)?;
    Ok(d)
}

/// Checks the trace at `path` (JSON or gzip of any number of members): errors, warnings
/// and a summary (see `crate::tools::check`). A trace that does not load is reported in the dict,
/// not raised; I/O errors raise OSError.
#[pyfunction]
#[pyo3(signature = (path, examples=5))]
fn check_trace<'py>(
    py: Python<'py>,
    path: PathBuf,
    examples: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let options = CheckOptions {
        examples,
        ..CheckOptions::default()
    };
    let report = detached(py, |interrupted| {
        check::check_path(&path, options, &mut |_done| interrupted())
    })?;
    report_dict(py, &report)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_trace, m)?)?;
    Ok(())
}
