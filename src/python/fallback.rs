//! `_FallbackStream` and `_FallbackFile`: the fallback path's [`Stream`] and [`InPlace`] for
//! Python (`kinetrace._export.fallback`): converts descriptors and arguments, and runs them with the
//! GIL released. What they do is in `crate::export::fallback`.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use super::interrupt::detached;
use crate::error::lock;
use crate::export::fallback::{directory_for, InPlace, Stream, TraceNameRewrite};
use crate::output::sink::Encoding;

/// A finished stream: (events, bytes of text, bytes in the file).
type Counts = (u64, u64, u64);

/// Streams Kineto's output from FIFOs (or a finished file) into the destination.
///
/// `read_fds`: read ends of FIFOs, handed over to this object (it closes them). Once the
/// arguments are accepted the descriptors belong to it, even when the constructor raises.
/// `dst`: the destination (written atomically through a temporary file beside it; a
/// destination that exists and is not a regular file is written directly).
/// `write_fds`: the FIFOs' write ends, handed over too: kept open until `finish` (so no
/// reader sees end of file while `save` runs), closed by `finish`, `abort` or a drop.
/// `compresslevel`: None for plain text, 0-9 for one gzip member. `trace_name`: optional
/// `(find, replace)` bytes for Kineto's `"traceName"` value near the end of the stream.
/// `metadata`: `(key, JSON text)` pairs written as top-level members after the opening
/// `{` (a value that is not valid JSON is repaired or written as a string, as the main
/// exporter does).
#[pyclass(module = "kinetrace._kinetrace", name = "_FallbackStream")]
pub(crate) struct PyFallbackStream {
    stream: Mutex<Option<Stream>>,
}

/// The stream's settings as Python passes them.
struct Settings {
    encoding: Encoding,
    trace_name: Option<TraceNameRewrite>,
    metadata: Vec<(String, String)>,
}

impl Settings {
    fn new(
        compresslevel: Option<u32>,
        threads: usize,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> Self {
        Settings {
            encoding: match compresslevel {
                None => Encoding::Plain,
                Some(level) => Encoding::Gzip { level, threads },
            },
            trace_name: trace_name.map(|(needle, replacement)| TraceNameRewrite {
                needle: needle.to_vec(),
                replacement: replacement.to_vec(),
            }),
            metadata,
        }
    }
}

#[cfg(unix)]
fn files_from_fds(fds: &[i32]) -> PyResult<Vec<File>> {
    use std::os::fd::FromRawFd;

    let mut seen = std::collections::HashSet::new();
    for &fd in fds {
        if fd < 0 || !seen.insert(fd) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "read_fds and write_fds must be distinct open descriptors, got {fds:?}"
            )));
        }
    }
    Ok(fds
        .iter()
        // SAFETY: the caller hands over descriptors it opened (distinct and non-negative,
        // checked above) and never uses or closes them again; each becomes owned by exactly
        // one `File`, which closes it once.
        .map(|&fd| unsafe { File::from_raw_fd(fd) })
        .collect())
}

#[cfg(not(unix))]
fn files_from_fds(fds: &[i32]) -> PyResult<Vec<File>> {
    if fds.is_empty() {
        return Ok(Vec::new());
    }
    Err(pyo3::exceptions::PyOSError::new_err(
        "reading Kineto's output from FIFOs needs a POSIX system; use _FallbackStream.from_path",
    ))
}

impl PyFallbackStream {
    fn wrap(stream: Stream) -> Self {
        PyFallbackStream {
            stream: Mutex::new(Some(stream)),
        }
    }
}

#[pymethods]
impl PyFallbackStream {
    #[new]
    #[pyo3(signature = (
        read_fds, write_fds, dst, compresslevel=None, threads=1, trace_name=None, metadata=vec![]
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        read_fds: Vec<i32>,
        write_fds: Vec<i32>,
        dst: PathBuf,
        compresslevel: Option<u32>,
        threads: usize,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let all: Vec<i32> = read_fds.iter().chain(&write_fds).copied().collect();
        let mut sources = files_from_fds(&all)?;
        let writers = sources.split_off(read_fds.len());
        let s = Settings::new(compresslevel, threads, trace_name, metadata);
        let stream = py.detach(move || {
            Stream::start(
                sources,
                writers,
                &dst,
                s.encoding,
                s.trace_name,
                &s.metadata,
            )
        })?;
        Ok(Self::wrap(stream))
    }

    /// Streams a file Kineto already wrote (where FIFOs are unavailable, or Kineto replaced
    /// one with a regular file). The source is only read, never removed.
    #[staticmethod]
    #[pyo3(signature = (src, dst, compresslevel=None, threads=1, trace_name=None, metadata=vec![]))]
    fn from_path(
        py: Python<'_>,
        src: PathBuf,
        dst: PathBuf,
        compresslevel: Option<u32>,
        threads: usize,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let s = Settings::new(compresslevel, threads, trace_name, metadata);
        let stream = py
            .detach(move || Stream::from_path(&src, &dst, s.encoding, s.trace_name, &s.metadata))?;
        Ok(Self::wrap(stream))
    }

    /// Closes the write ends (`save` is over), waits (GIL released, Ctrl-C answered) until
    /// every source reached its end, then moves the output into place. Returns (events,
    /// bytes of text, bytes in the file), or None when no source received anything (then
    /// nothing is written; call `abort`). Raises if a source failed or more than one
    /// received data (the output is discarded).
    fn finish(&self, py: Python<'_>) -> PyResult<Option<Counts>> {
        let mut guard = lock(&self.stream, "fallback stream")?;
        let stream = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the stream is already finished or aborted"))?;
        let finished = detached(py, |interrupted| stream.finish(interrupted));
        if !matches!(finished, Ok(None)) {
            // Done: the readers are joined, so dropping it here does not wait. `Ok(None)`
            // keeps the unused output open until `abort`.
            guard.take();
        }
        Ok(finished?.map(|s| (s.events, s.text_bytes, s.file_bytes)))
    }

    /// Closes the write ends, stops and joins the readers and discards the output (its
    /// temporary file is removed before this returns). Safe to call more than once, and
    /// after `finish`.
    fn abort(&self, py: Python<'_>) {
        // Never raises (it runs in `finally` blocks): a poisoned lock just leaves the
        // stream to its drop, which aborts it the same way.
        let stream = lock(&self.stream, "fallback stream")
            .ok()
            .and_then(|mut s| s.take());
        if let Some(mut stream) = stream {
            py.detach(move || stream.abort());
        }
    }
}

/// Kineto's trace written into a private file beside a plain destination, checked while
/// Kineto writes it, then edited in place and renamed over the destination.
///
/// `path`: the file Kineto is told to write, in a private directory the caller made beside
/// the destination (see `directory`); it and `path + ".tmp"` are created here, new and
/// empty. `dst`: the destination. `trace_name`: optional `(find, replace)` bytes for
/// Kineto's `"traceName"` value near the end. `metadata`: `(key, JSON text)` pairs written
/// as top-level members after the opening `{`.
#[pyclass(module = "kinetrace._kinetrace", name = "_FallbackFile")]
pub(crate) struct PyFallbackFile {
    inner: Mutex<Option<InPlace>>,
}

#[pymethods]
impl PyFallbackFile {
    #[new]
    #[pyo3(signature = (path, dst, trace_name=None, metadata=vec![]))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        dst: PathBuf,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let s = Settings::new(None, 1, trace_name, metadata);
        let in_place = py.detach(move || InPlace::start(&path, &dst, s.trace_name, &s.metadata))?;
        Ok(PyFallbackFile {
            inner: Mutex::new(Some(in_place)),
        })
    }

    /// The directory to make the private directory in for `dst` (that of the file the
    /// destination names, following symlinks), or None for a destination written in place
    /// (an existing FIFO or device). Raises OSError naming `dst` for a directory, an
    /// existing file that cannot be written, or a missing directory.
    #[staticmethod]
    fn directory(py: Python<'_>, dst: PathBuf) -> PyResult<Option<PathBuf>> {
        Ok(py.detach(move || directory_for(&dst))?)
    }

    /// A new name for a private directory in `dir` (of the temporary shape, prefix
    /// `kinetrace`; not created: make it with mode 0700, exclusively), after removing the
    /// stale temporaries and private directories that killed exports left in `dir`.
    #[staticmethod]
    fn private_name(py: Python<'_>, dir: PathBuf) -> PathBuf {
        py.detach(move || PathBuf::from(crate::output::temps::private_dir_name(&dir)))
    }

    /// After `save`: waits (GIL released, Ctrl-C answered) until the reader has checked
    /// everything Kineto wrote, edits the file and renames it over the destination. Returns
    /// (events, bytes of text, bytes in the file), or None when Kineto wrote nothing.
    /// Raises when the text is not strict JSON or Kineto wrote more than one file (the
    /// destination is then untouched).
    fn finish(&self, py: Python<'_>) -> PyResult<Option<Counts>> {
        let mut guard = lock(&self.inner, "fallback file")?;
        let mut in_place = guard
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the export is already finished or aborted"))?;
        let finished = detached(py, |interrupted| in_place.finish(interrupted));
        Ok(finished?.map(|s| (s.events, s.text_bytes, s.file_bytes)))
    }

    /// Stops the reader and removes the private file (unless it was renamed into place).
    /// Safe to call more than once, and after `finish`.
    fn abort(&self, py: Python<'_>) {
        let in_place = lock(&self.inner, "fallback file")
            .ok()
            .and_then(|mut s| s.take());
        if let Some(mut in_place) = in_place {
            py.detach(move || in_place.abort());
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFallbackStream>()?;
    m.add_class::<PyFallbackFile>()
}
