//! `check_trace`, `recompress`, `split_trace` and `filter_trace`: the streaming tools over
//! trace files for Python (`kinetrace check` / `compress` / `split` / `filter`). Each runs
//! with the GIL released and answers Ctrl-C at its progress reports (every few MB).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::check::{self, CheckOptions, CheckReport, TopValue};
use crate::sink::Encoding;
use crate::split;

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
    let report = detached(py, |interrupted| {
        check::check_path(&path, options, &mut |_done| interrupted())
    })?;
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
    let stats = detached(py, |interrupted| {
        crate::recompress::recompress(&src, &dst, level, threads, &mut |_done| interrupted())
    })?;
    Ok((stats.json_bytes, stats.file_bytes))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_trace, m)?)?;
    m.add_function(wrap_pyfunction!(recompress, m)?)?;
    m.add_function(wrap_pyfunction!(split_trace, m)?)?;
    m.add_function(wrap_pyfunction!(filter_trace, m)?)?;
    Ok(())
}

/// The parts (a list of dicts) and the rest of the stats (a dict): the fields of
/// `kinetrace.Part` and `kinetrace.SplitResult`.
fn split_dicts<'py>(
    py: Python<'py>,
    s: &split::SplitStats,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
    let d = PyDict::new(py);
    let parts = PyList::empty(py);
    for p in &s.parts {
        let pd = PyDict::new(py);
        pd.set_item("path", p.path.as_os_str())?; // a str, as os.fsdecode gives
        pd.set_item("start_us", p.start_us)?;
        pd.set_item("end_us", p.end_us)?;
        pd.set_item("events", p.events)?;
        pd.set_item("json_bytes", p.json_bytes)?;
        parts.append(pd)?;
    }
    d.set_item("events_read", s.events_read)?;
    d.set_item("flow_events_cut", s.flow_events_cut)?;
    d.set_item("json_bytes_read", s.json_bytes_read)?;
    d.set_item("oversized_parts", s.oversized_parts)?;
    Ok((parts, d))
}

/// Splits the trace at `src` into parts by time window of at most `max_bytes` of JSON
/// each (see `crate::split`); `gzip`: (level, threads) for gzip parts, None for plain
/// JSON; `like_source`: ignore `gzip`'s on/off and follow the source's format.
#[pyfunction]
#[pyo3(signature = (src, max_bytes, out_dir, gzip, like_source, stem=None, suffix=None, trace_name=None))]
#[allow(clippy::too_many_arguments)]
fn split_trace<'py>(
    py: Python<'py>,
    src: PathBuf,
    max_bytes: u64,
    out_dir: Option<PathBuf>,
    gzip: Option<(u32, usize)>,
    like_source: bool,
    stem: Option<String>,
    suffix: Option<String>,
    trace_name: Option<String>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
    let options = split::SplitOptions {
        max_bytes,
        out_dir,
        gzip: if like_source { None } else { Some(gzip) },
        default_gzip: gzip.unwrap_or((6, 1)),
        stem,
        suffix,
        trace_name,
    };
    let stats = detached(py, |interrupted| {
        split::split(&src, &options, &mut |_done| interrupted())
    })?;
    split_dicts(py, &stats)
}

/// Writes to `dst` the events of the trace at `src` that the criteria keep (see
/// `crate::split`); `gzip`: (level, threads) for gzip output, None for plain JSON.
#[pyfunction]
#[pyo3(signature = (src, dst, include_cats, exclude_cats, min_dur_us, window_us, pids, gzip, trace_name=None))]
#[allow(clippy::too_many_arguments)]
fn filter_trace<'py>(
    py: Python<'py>,
    src: PathBuf,
    dst: PathBuf,
    include_cats: Vec<String>,
    exclude_cats: Vec<String>,
    min_dur_us: Option<f64>,
    window_us: Option<(f64, f64)>,
    pids: Vec<String>,
    gzip: Option<(u32, usize)>,
    trace_name: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let spec = split::FilterSpec {
        include_cats,
        exclude_cats,
        min_dur_us,
        window_us,
        pids,
    };
    let encoding = match gzip {
        Some((level, threads)) => Encoding::Gzip { level, threads },
        None => Encoding::Plain,
    };
    let s = detached(py, |interrupted| {
        let mut progress = |_done: u64| interrupted();
        split::filter(
            &src,
            &dst,
            &spec,
            encoding,
            trace_name.as_deref(),
            &mut progress,
        )
    })?;
    let d = PyDict::new(py);
    d.set_item("events_read", s.events_read)?;
    d.set_item("events_written", s.events_written)?;
    d.set_item("metadata_written", s.metadata_written)?;
    d.set_item("flow_events_cut", s.flow_events_cut)?;
    d.set_item("json_bytes_read", s.json_bytes_read)?;
    d.set_item("json_bytes_written", s.json_bytes_written)?;
    Ok(d)
}
