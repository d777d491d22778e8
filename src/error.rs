//! The one error type of the crate; the Python layer maps it onto exception classes.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Where the input stops being a valid trace, and why: what the JSON lexer finds
/// (`json::lexer::Stop::Invalid`), made an [`Error::TraceFormat`] by [`Error::trace_format`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    /// What is wrong, as a stable slug.
    pub(crate) kind: FormatKind,
    /// Byte offset in the decompressed JSON.
    pub(crate) offset: u64,
    /// Index of the event in `traceEvents`, when the fault is inside one.
    pub(crate) event: Option<u64>,
    pub(crate) message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.event {
            Some(i) => write!(
                f,
                "offset {} (traceEvents[{i}]): {}",
                self.offset, self.message
            ),
            None => write!(f, "offset {}: {}", self.offset, self.message),
        }
    }
}

/// What kind of fault makes a trace file's content not a valid trace: a stable slug for code
/// and tests to match (never the message), the one `kinetrace check` names its finding by and
/// `kinetrace.TraceFormatError.kind` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FormatKind {
    /// Not strict JSON (UTF-8 included).
    Syntax,
    /// The JSON text ends early.
    Truncated,
    /// The gzip data is corrupt or truncated.
    Gzip,
    /// Valid JSON, but not a trace (no `traceEvents` array in a top-level object, an empty
    /// file, no event to keep).
    NotATrace,
    /// More than a tool can hold (kept text, processes, nesting).
    TooLarge,
}

impl FormatKind {
    pub(crate) fn slug(self) -> &'static str {
        match self {
            FormatKind::Syntax => "syntax",
            FormatKind::Truncated => "truncated",
            FormatKind::Gzip => "gzip",
            FormatKind::NotATrace => "not_a_trace",
            FormatKind::TooLarge => "too_large",
        }
    }
}

#[derive(Debug)]
pub(crate) enum Error {
    /// An I/O failure, with a short note of what was being done.
    Io { context: String, source: io::Error },
    /// An argument outside its allowed range or of the wrong shape.
    InvalidArgument(String),
    /// A trace file's content is not a valid trace (not strict JSON, not a trace, a corrupt
    /// or truncated gzip stream, more than a tool can hold): where and why. Never used for
    /// arguments, nor for what kinetrace itself produced.
    TraceFormat(Box<TraceFormat>),
    /// A call made in the wrong order (e.g. a batch after `finish`).
    State(String),
    /// The export was cancelled (Ctrl-C, or an explicit abort).
    Interrupted,
    /// A thread of the export panicked; the message is what it panicked with.
    Panic(String),
    /// A lock was poisoned: a thread panicked while holding it, so what it guards may be half
    /// changed. The str names what the lock guards ("exporter state"). See [`lock`].
    Poisoned(&'static str),
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// Where a trace file stops being a valid trace, and why ([`Error::TraceFormat`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceFormat {
    /// What is wrong, as a stable slug.
    pub(crate) kind: FormatKind,
    /// The file, as given.
    pub(crate) path: String,
    /// Byte offset in the decompressed JSON, when the fault is at one place.
    pub(crate) offset: Option<u64>,
    /// Index in `traceEvents`, when the fault is inside an event.
    pub(crate) event_index: Option<u64>,
    pub(crate) message: String,
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path)?;
        match (self.offset, self.event_index) {
            (Some(o), Some(i)) => write!(f, "offset {o} (traceEvents[{i}]): ")?,
            (Some(o), None) => write!(f, "offset {o}: ")?,
            (None, Some(i)) => write!(f, "traceEvents[{i}]: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

impl Error {
    /// Back to an `io::Error` (for code that speaks `io::Write`); the context is dropped.
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            Error::Io { source, .. } => source,
            Error::InvalidArgument(msg) => io::Error::new(io::ErrorKind::InvalidInput, msg),
            Error::TraceFormat(t) => io::Error::new(io::ErrorKind::InvalidData, t.to_string()),
            Error::Interrupted => io::Error::from(io::ErrorKind::Interrupted),
            other => io::Error::other(other.to_string()),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The lexer's finding in the file at `path`.
    pub(crate) fn trace_format(path: &Path, invalid: Invalid) -> Self {
        Error::TraceFormat(Box::new(TraceFormat {
            kind: invalid.kind,
            path: path.display().to_string(),
            offset: Some(invalid.offset),
            event_index: invalid.event,
            message: invalid.message,
        }))
    }

    /// A fault of the file at `path` as a whole (no single place to point at): not a trace.
    pub(crate) fn not_a_trace(path: &Path, message: impl Into<String>) -> Self {
        Error::trace_fault(path, FormatKind::NotATrace, message)
    }

    /// A fault of `kind` of the file at `path` as a whole (no single place to point at).
    pub(crate) fn trace_fault(path: &Path, kind: FormatKind, message: impl Into<String>) -> Self {
        Error::TraceFormat(Box::new(TraceFormat {
            kind,
            path: path.display().to_string(),
            offset: None,
            event_index: None,
            message: message.into(),
        }))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::InvalidArgument(msg) | Error::State(msg) => f.write_str(msg),
            Error::TraceFormat(t) => t.fmt(f),
            Error::Interrupted => f.write_str("export interrupted"),
            Error::Panic(msg) => write!(f, "internal error in kinetrace (a Rust panic): {msg}"),
            Error::Poisoned(what) => write!(
                f,
                "internal error in kinetrace: {what} poisoned by an earlier panic"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(source: io::Error) -> Self {
        Error::Io {
            context: "I/O error".into(),
            source,
        }
    }
}

/// Locks `mutex`, which guards `what`; a lock poisoned by a panic in another thread is
/// [`Error::Poisoned`]. The one way to take a lock whose state a panic could leave half
/// changed. (The gzip pool and the export queue recover from poisoning instead: their
/// state is consistent between any two statements, and the panic itself is reported.)
pub(crate) fn lock<'a, T>(mutex: &'a Mutex<T>, what: &'static str) -> Result<MutexGuard<'a, T>> {
    mutex.lock().map_err(|_| Error::Poisoned(what))
}

/// Turns a caught panic payload into a readable message.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_is_an_error_naming_it() {
        let mutex = Arc::new(Mutex::new(1));
        *lock(&mutex, "the number").unwrap() += 1;
        let held = Arc::clone(&mutex);
        let panicked = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        let err = lock(&mutex, "the number").map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::Poisoned("the number")), "{err:?}");
        assert_eq!(
            err.to_string(),
            "internal error in kinetrace: the number poisoned by an earlier panic"
        );
        assert_eq!(err.into_io().kind(), io::ErrorKind::Other);
    }
}
