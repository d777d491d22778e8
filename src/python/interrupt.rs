//! The one way the bindings wait: [`detached`] runs work on the calling thread with the GIL
//! released, handing it an [`Interrupted`] callback. Every wait inside the work is cut into
//! waits of at most [`POLL`] (`crate::output::interrupt`); between them the callback takes the GIL back for
//! a moment and runs Python's pending signal handlers. An exception from a handler
//! (`KeyboardInterrupt` from Ctrl-C, or whatever a handler raises) cancels the work: the
//! callback fails from then on, the work abandons its wait and cleans up on its way out
//! (readers joined, temporary files removed), and the exception is raised unchanged once
//! the work has returned. Python code that waits on its own (the workers' pipes) uses the
//! same interval, exported as `POLL_INTERVAL_MS`.

use pyo3::prelude::*;

use crate::error::Error;
use crate::output::interrupt::{Interrupted, POLL};

/// Runs `work` with the GIL released; see the module docs. The exception a signal handler
/// raised wins over the work's own result.
pub(crate) fn detached<T, E>(
    py: Python<'_>,
    work: impl FnOnce(&mut Interrupted) -> Result<T, E> + Send,
) -> PyResult<T>
where
    T: Send,
    E: Send + Into<PyErr>,
{
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut interrupted = || {
            if raised.is_none() {
                if let Err(err) = Python::attach(|py| py.check_signals()) {
                    raised = Some(err);
                }
            }
            match raised {
                Some(_) => Err(Error::Interrupted),
                None => Ok(()),
            }
        };
        work(&mut interrupted)
    });
    match raised {
        Some(err) => Err(err),
        None => result.map_err(Into::into),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("POLL_INTERVAL_MS", POLL.as_millis() as u64)
}
