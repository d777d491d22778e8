//! `_GzipEncoder`: the parallel gzip encoder for Python code, writing to a path (atomically,
//! through `sink`) or to any writable binary file object. `kinetrace.GzipWriter` wraps it in
//! the `io` protocol.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyByteArray, PyBytes};

use super::errors::{io_to_pyerr, PyErrInIo};
use super::interrupt::detached;
use crate::error::lock;
use crate::error::{Error, Result};
use crate::output::gzip::{ParallelGzEncoder, DEFAULT_BLOCK_SIZE};
use crate::output::interrupt::{self, Interrupted};
use crate::output::sink::{Encoding, Sink};

/// A Python binary file object as an `io::Write`. Called from the encoder's writer
/// thread, so it takes the GIL for each call.
struct PyFileWriter {
    file: Py<PyAny>,
    written: u64,
}

impl Write for PyFileWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Python::attach(|py| {
            let written = self
                .file
                .bind(py)
                .call_method1("write", (PyBytes::new(py, buf),))
                .map_err(|e| io::Error::other(PyErrInIo(e)))?;
            // Raw files may write less than asked (an int); buffered ones return the length
            // or None.
            let n = match written.extract::<Option<usize>>() {
                Ok(Some(n)) if n <= buf.len() => n,
                Ok(_) => buf.len(),
                Err(e) => return Err(io::Error::other(PyErrInIo(e))),
            };
            self.written += n as u64;
            Ok(n)
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Python::attach(|py| {
            let file = self.file.bind(py);
            if file.hasattr("flush").unwrap_or(false) {
                file.call_method0("flush")
                    .map_err(|e| io::Error::other(PyErrInIo(e)))?;
            }
            Ok(())
        })
    }
}

enum Target {
    Path(Sink),
    File(ParallelGzEncoder<PyFileWriter>),
}

/// Counts reported by `close`: (uncompressed bytes, compressed bytes).
type Counts = (u64, u64);

#[pyclass(module = "kinetrace._kinetrace", name = "_GzipEncoder")]
pub(crate) struct PyGzipEncoder {
    target: Mutex<Option<Target>>,
    label: String,
}

impl PyGzipEncoder {
    /// Runs `f` on the open target with the GIL released (see [`detached`]); its I/O
    /// errors name the target.
    fn with_target<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Target, &mut Interrupted) -> io::Result<R> + Send,
    ) -> PyResult<R> {
        let mut guard = lock(&self.target, "gzip encoder")?;
        let target = guard
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("I/O operation on closed GzipWriter"))?;
        let label = &self.label;
        detached(py, |interrupted| -> Result<R> {
            f(target, interrupted).map_err(|e| Error::io(format!("cannot write {label}"), e))
        })
    }
}

#[pymethods]
impl PyGzipEncoder {
    #[new]
    #[pyo3(signature = (target, compresslevel, threads))]
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        compresslevel: u32,
        threads: usize,
    ) -> PyResult<Self> {
        let encoding = Encoding::Gzip {
            level: compresslevel,
            threads,
        }
        .validate()?;
        if let Ok(path) = target.extract::<PathBuf>() {
            let label = path.display().to_string();
            let sink = py.detach(|| Sink::create(&path, encoding))?;
            return Ok(PyGzipEncoder {
                target: Mutex::new(Some(Target::Path(sink))),
                label,
            });
        }
        if !target.hasattr("write")? {
            return Err(PyTypeError::new_err(format!(
                "GzipWriter needs a path or a writable binary file, not {}",
                target.get_type().name()?
            )));
        }
        let writer = PyFileWriter {
            file: target.clone().unbind(),
            written: 0,
        };
        let encoder = ParallelGzEncoder::new(writer, compresslevel, threads)
            .map_err(|e| io_to_pyerr("cannot start gzip", e))?;
        Ok(PyGzipEncoder {
            target: Mutex::new(Some(Target::File(encoder))),
            label: target.repr()?.to_string(),
        })
    }

    /// Compresses `data` (bytes-like); returns its length.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let bytes: PyBackedBytes =
            if data.is_instance_of::<PyBytes>() || data.is_instance_of::<PyByteArray>() {
                data.extract()?
            } else {
                // memoryview, array, ...: bytes() copies any buffer.
                py.import("builtins")?
                    .getattr("bytes")?
                    .call1((data,))?
                    .extract()?
            };
        let len = bytes.len();
        self.with_target(py, move |target, interrupted| match target {
            Target::Path(sink) => sink.write_all(&bytes).map_err(into_io),
            // A file object can stall (a pipe nobody reads): wait for room in slices,
            // answering Ctrl-C between them, one block at a time.
            Target::File(enc) => {
                for chunk in bytes.chunks(DEFAULT_BLOCK_SIZE) {
                    interrupt::wait(interrupted, |timeout| {
                        Ok(enc.wait_for_room(timeout)?.then_some(()))
                    })
                    .map_err(into_io)?;
                    enc.write_all(chunk)?;
                }
                Ok(())
            }
        })?;
        Ok(len)
    }

    /// Makes everything written so far decodable from the output (a sync flush).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with_target(py, |target, interrupted| match target {
            Target::Path(sink) => sink.flush().map_err(into_io),
            // The file object may stall: wait for the writer thread in slices.
            Target::File(enc) => {
                enc.start_flush()?;
                interrupt::wait(interrupted, |timeout| {
                    Ok(enc.wait_flushed(timeout)?.then_some(()))
                })
                .map_err(into_io)
            }
        })
    }

    /// Writes the trailer and, for a path, moves the file into place. Returns
    /// (uncompressed bytes, compressed bytes). Interrupted while a file object stalls, it
    /// leaves the encoder open: `close` again goes on waiting, `abort` discards.
    fn close(&self, py: Python<'_>) -> PyResult<Counts> {
        // A file object may stall: end the stream and wait for the writer thread in slices
        // (only an interrupt fails here; `finish` reports the encoder's errors), the encoder
        // still in place, so that `finish` below does not wait.
        let on_file = matches!(
            lock(&self.target, "gzip encoder")?.as_ref(),
            Some(Target::File(_))
        );
        if on_file {
            self.with_target(py, |target, interrupted| {
                let Target::File(enc) = target else {
                    return Ok(());
                };
                interrupt::wait(interrupted, |timeout| {
                    Ok(enc.end_input(timeout).unwrap_or(true).then_some(()))
                })
                .and_then(|()| {
                    interrupt::wait(interrupted, |timeout| {
                        Ok(enc.wait_written(timeout).then_some(()))
                    })
                })
                .map_err(into_io)
            })?;
        }
        let target = lock(&self.target, "gzip encoder")?.take();
        let Some(target) = target else {
            return Ok((0, 0));
        };
        let label = self.label.clone();
        let counts = py.detach(move || match target {
            Target::Path(sink) => sink
                .finish()
                .map(|s| (s.uncompressed_bytes, s.file_bytes))
                .map_err(Error::into_io),
            Target::File(enc) => {
                let bytes_in = enc.bytes_in();
                enc.finish().map(|w| (bytes_in, w.written))
            }
        });
        counts.map_err(|e| io_to_pyerr(&format!("cannot write {label}"), e))
    }

    /// Discards the output: a path's temporary file is removed, nothing more is written
    /// to a file object.
    fn abort(&self, py: Python<'_>) {
        // Never raises (it runs in `finally` blocks): a poisoned lock just leaves the
        // target to its drop, which discards it the same way.
        let target = lock(&self.target, "gzip encoder")
            .ok()
            .and_then(|mut t| t.take());
        py.detach(move || drop(target));
    }
}

fn into_io(e: Error) -> io::Error {
    e.into_io()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGzipEncoder>()
}
