//! `to_parquet`: trace files as one Parquet dataset for Python (`kinetrace parquet`), with
//! the GIL released and Ctrl-C answered between waits (see `crate::tools::parquet`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::interrupt::detached;
use crate::tools::parquet::{self, ParquetOptions};

/// Converts the traces at `sources` (one rank each; `names`: what `meta.source` calls
/// each, or None for their paths) into the dataset `out`: one dict per source, in their
/// order (the fields of `_ParquetRank` in `_kinetrace.pyi`). A set `cancel` stops it.
#[pyfunction]
#[pyo3(signature = (sources, names, out, force, threads, zstd_level, cancel=None))]
#[allow(clippy::too_many_arguments)]
fn to_parquet<'py>(
    py: Python<'py>,
    sources: Vec<PathBuf>,
    names: Option<Vec<String>>,
    out: PathBuf,
    force: bool,
    threads: usize,
    zstd_level: i32,
    cancel: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let options = ParquetOptions {
        force,
        threads,
        zstd_level,
        spill_bytes: parquet::SPILL_BYTES,
    };
    let names = names.unwrap_or_else(|| {
        let text = |p: &PathBuf| p.to_string_lossy().into_owned();
        sources.iter().map(text).collect()
    });
    if names.len() != sources.len() {
        return Err(PyValueError::new_err("one name per source"));
    }
    let named: Vec<(PathBuf, String)> = sources.into_iter().zip(names).collect();
    let written = detached(py, |interrupted| {
        // `cancel` (a `threading.Event`): how another thread stops a conversion running on
        // a thread that sees no signals (`export_parquet`'s reader).
        let cancelled = || {
            let Some(cancel) = &cancel else { return Ok(()) };
            let set = Python::attach(|py| cancel.call_method0(py, "is_set")?.is_truthy(py));
            match set {
                Ok(false) => Ok(()),
                _ => Err(crate::error::Error::Interrupted),
            }
        };
        parquet::to_parquet(&named, &out, options, &mut |_read| {
            interrupted()?;
            cancelled()
        })
    })?;
    let list = PyList::empty(py);
    for w in &written {
        let d = PyDict::new(py);
        d.set_item("source", &w.source)?;
        d.set_item("rank", w.rank)?;
        d.set_item("rank_from", w.rank_from)?;
        d.set_item("events", w.rows[0])?;
        d.set_item("flows", w.rows[1])?;
        d.set_item("tracks", w.rows[2])?;
        d.set_item("json_bytes", w.json_bytes)?;
        list.append(d)?;
    }
    Ok(list)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(to_parquet, m)?)
}
