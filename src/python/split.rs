//! `split_trace` and `filter_trace` for Python (`kinetrace split` / `filter`, and `keep=` /
//! `split_mb=` at export time), with the GIL released and Ctrl-C answered at their progress
//! reports.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::output::sink::Encoding;
use crate::tools::split;

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
/// each (see `crate::tools::split`); `gzip`: (level, threads) for gzip parts, None for plain
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
/// `crate::tools::split`); `gzip`: (level, threads) for gzip output, None for plain JSON.
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
    let spec = crate::read::filter::FilterSpec {
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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(split_trace, m)?)?;
    m.add_function(wrap_pyfunction!(filter_trace, m)?)?;
    Ok(())
}
