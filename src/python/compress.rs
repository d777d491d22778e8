//! `recompress` for Python (`kinetrace compress`), with the GIL released and Ctrl-C answered
//! at its progress reports.

use std::path::PathBuf;

use pyo3::prelude::*;

use super::interrupt::detached;

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
        crate::tools::compress::recompress(&src, &dst, level, threads, &mut |_done| interrupted())
    })?;
    Ok((stats.json_bytes, stats.file_bytes))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(recompress, m)?)?;
    Ok(())
}
