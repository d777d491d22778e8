//! `merge_traces`: many trace files on one timeline for Python (`kinetrace merge`), with the
//! GIL released and Ctrl-C answered between waits (see `crate::tools::merge`).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::read::filter::FilterSpec;
use crate::tools::merge::{self, MergeOptions, MergeStats};

/// The result as `(outputs, ranks, stats)`: the fields of kinetrace's result dataclasses
/// (`_MergeStats` and friends in `_kinetrace.pyi`).
type MergeResult<'py> = (Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyDict>);

fn result<'py>(py: Python<'py>, s: &MergeStats) -> PyResult<MergeResult<'py>> {
    let outputs = PyList::empty(py);
    for o in &s.outputs {
        let od = PyDict::new(py);
        od.set_item("path", o.path.as_os_str())?; // a str, as os.fsdecode gives
        od.set_item("start_us", o.start_us)?;
        od.set_item("end_us", o.end_us)?;
        od.set_item("events", o.events)?;
        od.set_item("json_bytes", o.json_bytes)?;
        outputs.append(od)?;
    }
    let ranks = PyList::empty(py);
    for r in &s.ranks {
        let rd = PyDict::new(py);
        rd.set_item("source", r.source.as_os_str())?;
        rd.set_item("label", &r.label)?;
        rd.set_item("rank", r.rank)?;
        rd.set_item("rank_from", r.rank_from)?;
        rd.set_item("base_time_ns", r.base_time_ns)?;
        rd.set_item("offset_ns", r.offset_ns)?;
        rd.set_item("align_offset_ns", r.align_offset_ns)?;
        rd.set_item("events_read", r.events_read)?;
        rd.set_item("events_written", r.events_written)?;
        rd.set_item("json_bytes_read", r.json_bytes_read)?;
        let processes = PyList::empty(py);
        for p in &r.processes {
            let pd = PyDict::new(py);
            pd.set_item("source_pid", &p.source_pid)?;
            pd.set_item("pid", p.pid)?;
            pd.set_item("name", &p.name)?;
            pd.set_item("sort_index", p.sort_index)?;
            processes.append(pd)?;
        }
        rd.set_item("processes", processes)?;
        ranks.append(rd)?;
    }
    let d = PyDict::new(py);
    d.set_item("base_time_ns", s.base_time_ns)?;
    d.set_item("aligned_step", s.aligned_step)?;
    d.set_item("events_read", s.events_read)?;
    d.set_item("events_written", s.events_written)?;
    d.set_item("flow_events_cut", s.flow_events_cut)?;
    d.set_item("json_bytes_read", s.json_bytes_read)?;
    d.set_item("json_bytes_written", s.json_bytes_written)?;
    d.set_item("oversized_parts", s.oversized_parts)?;
    d.set_item("warnings", PyList::new(py, &s.warnings)?)?;
    Ok((outputs, ranks, d))
}

/// Merges the traces at `sources` into `dst` (see `crate::tools::merge`); `labels`: one per
/// source or none; `gzip`: (level, threads) or None; `max_bytes`: parts of at most that.
#[pyfunction]
#[pyo3(signature = (sources, dst, labels, align_step, include_cats, exclude_cats, min_dur_us, window_us, pids, max_bytes, gzip, threads))]
#[allow(clippy::too_many_arguments)]
fn merge_traces<'py>(
    py: Python<'py>,
    sources: Vec<PathBuf>,
    dst: PathBuf,
    labels: Vec<Option<String>>,
    align_step: bool,
    include_cats: Vec<String>,
    exclude_cats: Vec<String>,
    min_dur_us: Option<f64>,
    window_us: Option<(f64, f64)>,
    pids: Vec<String>,
    max_bytes: Option<u64>,
    gzip: Option<(u32, usize)>,
    threads: usize,
) -> PyResult<MergeResult<'py>> {
    let options = MergeOptions {
        labels,
        align_step,
        spec: FilterSpec {
            include_cats,
            exclude_cats,
            min_dur_us,
            window_us,
            pids,
        },
        max_bytes,
        gzip,
        threads,
    };
    let stats = detached(py, |interrupted| {
        merge::merge(&sources, &dst, &options, &mut |_done| interrupted())
    })?;
    result(py, &stats)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(merge_traces, m)?)
}
