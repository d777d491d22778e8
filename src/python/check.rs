//! `check_trace`, `repair_trace`, `recompress`, `split_trace` and `filter_trace`: the
//! streaming tools over trace files for Python (`kinetrace check` / `repair` / `compress` /
//! `split` / `filter`). Each runs
//! with the GIL released and answers Ctrl-C at its progress reports (every few MB).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::check::{self, CheckOptions, CheckReport, Finding, TopValue};
use crate::repair::{self, RepairOptions};
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
    let examples = PyList::empty(py);
    for e in &f.examples {
        let ed = PyDict::new(py);
        ed.set_item("offset", e.offset)?;
        ed.set_item("event_index", e.index)?;
        ed.set_item("message", &e.message)?;
        examples.append(ed)?;
    }
    d.set_item("examples", examples)?;
    let tracks = PyList::empty(py);
    for t in &f.tracks {
        let td = PyDict::new(py);
        td.set_item("pid", &t.pid)?;
        td.set_item("tid", &t.tid)?;
        td.set_item("name", &t.name)?;
        td.set_item("dropped", t.dropped)?;
        tracks.append(td)?;
    }
    d.set_item("tracks", tracks)?;
    d.set_item("track_count", f.track_count)?;
    d.set_item("note", &f.note)?;
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
/// and a summary (see `crate::check`). A trace that does not load is reported in the dict,
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

/// Writes to `dst` the best loadable trace `src` holds (see `crate::repair`); `gzip`:
/// (level, threads) for gzip output, None for plain JSON. Returns the changes and counts.
#[pyfunction]
#[pyo3(signature = (src, dst, untangle, gzip, examples=5))]
fn repair_trace<'py>(
    py: Python<'py>,
    src: PathBuf,
    dst: PathBuf,
    untangle: bool,
    gzip: Option<(u32, usize)>,
    examples: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let options = RepairOptions {
        untangle,
        examples,
        encoding: match gzip {
            Some((level, threads)) => Encoding::Gzip { level, threads },
            None => Encoding::Plain,
        },
    };
    let r = detached(py, |interrupted| {
        repair::repair(&src, &dst, options, &mut |_done| interrupted())
    })?;
    let d = PyDict::new(py);
    let changes = PyList::empty(py);
    for c in &r.changes {
        let cd = PyDict::new(py);
        cd.set_item("kind", c.kind.name())?;
        cd.set_item("count", c.count)?;
        cd.set_item("message", &c.message)?;
        let examples = PyList::empty(py);
        for e in &c.examples {
            let ed = PyDict::new(py);
            ed.set_item("offset", e.offset)?;
            ed.set_item("event_index", e.index)?;
            ed.set_item("message", &e.message)?;
            examples.append(ed)?;
        }
        cd.set_item("examples", examples)?;
        changes.append(cd)?;
    }
    d.set_item("changes", changes)?;
    d.set_item("json_bytes_read", r.json_bytes_read)?;
    d.set_item("json_bytes_written", r.json_bytes_written)?;
    d.set_item("events_read", r.events_read)?;
    d.set_item("events_written", r.events_written)?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_trace, m)?)?;
    m.add_function(wrap_pyfunction!(repair_trace, m)?)?;
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
    d.set_item("flow_events_unpaired", s.flow_events_unpaired)?;
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
    d.set_item("flow_events_unpaired", s.flow_events_unpaired)?;
    d.set_item("json_bytes_read", s.json_bytes_read)?;
    d.set_item("json_bytes_written", s.json_bytes_written)?;
    Ok(d)
}
