//! The one error type of the crate; the Python layer maps it onto exception classes.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// An I/O failure, with a short note of what was being done.
    Io { context: String, source: io::Error },
    /// An argument outside its allowed range or of the wrong shape.
    InvalidArgument(String),
    /// A call made in the wrong order (e.g. a batch after `finish`).
    State(String),
    /// The export was cancelled (Ctrl-C, or an explicit abort).
    Interrupted,
    /// A thread of the export panicked; the message is what it panicked with.
    Panic(String),
    /// A lock (named) was poisoned: a thread panicked while holding it.
    Poisoned(&'static str),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Back to an `io::Error` (for code that speaks `io::Write`); the context is dropped.
    pub fn into_io(self) -> io::Error {
        match self {
            Error::Io { source, .. } => source,
            Error::InvalidArgument(msg) => io::Error::new(io::ErrorKind::InvalidInput, msg),
            Error::Interrupted => io::Error::from(io::ErrorKind::Interrupted),
            other => io::Error::other(other.to_string()),
        }
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::InvalidArgument(msg) | Error::State(msg) => f.write_str(msg),
            Error::Interrupted => f.write_str("export interrupted"),
            Error::Panic(msg) => write!(f, "internal error in kinetrace (a Rust panic): {msg}"),
            Error::Poisoned(what) => {
                write!(f, "internal error: the {what} lock was poisoned by a panic")
            }
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

/// Turns a caught panic payload into a readable message.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}
