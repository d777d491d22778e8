//! The one mapping from the crate's error to Python exceptions.
//!
//! I/O errors with an errno become `OSError(errno, message)`, which Python turns into the
//! matching subclass (`FileNotFoundError`, `PermissionError`, `IsADirectoryError`, ...).
//! A trace file that is not a valid trace becomes `kinetrace.TraceFormatError` (a
//! `ValueError` defined in Python, `kinetrace/_errors.py`, carrying path, offset and event
//! index, and its `kind`: a stable slug, `error::FormatKind`). Internal failures (a panic, a poisoned lock) become `RuntimeError`; every lock in
//! the bindings is taken through [`crate::error::lock`], so a poisoned one always reads the
//! same.

use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyKeyboardInterrupt, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::PyErr;
use std::io;

use crate::error::Error;

pyo3::import_exception!(kinetrace._errors, TraceFormatError);

/// A Python exception raised inside a callback (a Python file object's `write`) travels
/// through `io::Error` in this wrapper, so it comes back out unchanged.
#[derive(Debug)]
pub(crate) struct PyErrInIo(pub(crate) PyErr);

impl std::fmt::Display for PyErrInIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for PyErrInIo {}

/// The message of an `io::Error` without Rust's " (os error N)" suffix.
fn strerror(err: &io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

pub(crate) fn io_to_pyerr(context: &str, source: io::Error) -> PyErr {
    if source
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<PyErrInIo>().is_some())
    {
        let inner = source.into_inner().expect("checked above");
        return inner.downcast::<PyErrInIo>().expect("checked above").0;
    }
    let message = format!("{context}: {}", strerror(&source));
    if let Some(errno) = source.raw_os_error() {
        return PyOSError::new_err((errno, message));
    }
    match source.kind() {
        io::ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
        io::ErrorKind::PermissionDenied => PyPermissionError::new_err(message),
        io::ErrorKind::AlreadyExists => PyFileExistsError::new_err(message),
        io::ErrorKind::InvalidInput => PyValueError::new_err(message),
        io::ErrorKind::Interrupted => PyKeyboardInterrupt::new_err(message),
        _ => PyOSError::new_err(message),
    }
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        match err {
            Error::Io { context, source } => io_to_pyerr(&context, source),
            Error::InvalidArgument(msg) => PyValueError::new_err(msg),
            Error::TraceFormat(t) => {
                let message = t.to_string();
                TraceFormatError::new_err((message, t.path, t.offset, t.event_index, t.kind.slug()))
            }
            Error::State(msg) => PyRuntimeError::new_err(msg),
            Error::Interrupted => PyKeyboardInterrupt::new_err("export interrupted"),
            err @ (Error::Panic(_) | Error::Poisoned(_)) => {
                PyRuntimeError::new_err(err.to_string())
            }
        }
    }
}
