//! `repair_trace` for Python (`kinetrace repair`): the changes as dicts, the repair run with
//! the GIL released, answering Ctrl-C at its progress reports.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::check::places;
use super::interrupt::detached;
use crate::output::sink::Encoding;
use crate::tools::repair::{self, RepairOptions};

/// Writes to `dst` the best loadable trace `src` holds (see `crate::tools::repair`); `gzip`:
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
        cd.set_item("examples", places(py, &c.examples)?)?;
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
    m.add_function(wrap_pyfunction!(repair_trace, m)?)?;
    Ok(())
}
