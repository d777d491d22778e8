//! Interrupts: how a long operation of the core stays answerable to Ctrl-C without knowing
//! about Python.
//!
//! Nothing in the core blocks without a timeout. A wait is cut into waits of at most [`POLL`];
//! between them the core calls an [`Interrupted`] callback its caller supplies (the
//! Python bindings run the interpreter's pending signal handlers there). An error from the
//! callback abandons the wait and is returned as is, so the operation stops and cleans up
//! on the way out. [`wait`] and [`wait_until`] are that loop.

use std::time::{Duration, Instant};

use crate::error::Result;

/// The longest a wait runs before the caller may look for an interrupt again: Ctrl-C is
/// answered within about this long at every stage.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// Called between the short waits of a wait; an error (Ctrl-C) abandons the wait.
pub(crate) type Interrupted<'a> = dyn FnMut() -> Result<()> + 'a;

/// An [`Interrupted`] callback that never interrupts (for tests with nobody to ask).
#[cfg(test)]
pub(crate) fn never() -> Result<()> {
    Ok(())
}

/// Runs `step` (which waits at most the duration it is given) until it returns a value,
/// calling `interrupted` between attempts.
pub(crate) fn wait<T>(
    interrupted: &mut Interrupted,
    mut step: impl FnMut(Duration) -> Result<Option<T>>,
) -> Result<T> {
    loop {
        if let Some(value) = step(POLL)? {
            return Ok(value);
        }
        interrupted()?;
    }
}

/// Like [`wait`], but gives up at `deadline` (when given) with `None`. `step` is tried at
/// least once, with a zero duration when the deadline has already passed.
pub(crate) fn wait_until<T>(
    deadline: Option<Instant>,
    interrupted: &mut Interrupted,
    mut step: impl FnMut(Duration) -> Result<Option<T>>,
) -> Result<Option<T>> {
    loop {
        let timeout = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(POLL),
            None => POLL,
        };
        if let Some(value) = step(timeout)? {
            return Ok(Some(value));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        interrupted()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn wait_asks_between_slices_and_stops_when_told() {
        let mut asked = 0;
        let mut interrupted = || {
            asked += 1;
            if asked == 3 {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        };
        let mut timeouts = Vec::new();
        let result: Result<()> = wait(&mut interrupted, |timeout| {
            timeouts.push(timeout);
            Ok(None)
        });
        assert!(matches!(result, Err(Error::Interrupted)));
        assert_eq!(asked, 3);
        assert_eq!(timeouts, vec![POLL; 3]);
    }

    #[test]
    fn wait_returns_the_first_value_without_asking() {
        let mut interrupted = || -> Result<()> { panic!("not asked when the first try succeeds") };
        assert_eq!(wait(&mut interrupted, |_| Ok(Some(7))).unwrap(), 7);
        let mut tries = 0;
        let value = wait(&mut never, |_| {
            tries += 1;
            Ok((tries == 4).then_some("done"))
        })
        .unwrap();
        assert_eq!((value, tries), ("done", 4));
    }

    #[test]
    fn wait_passes_step_errors_through() {
        let result: Result<()> = wait(&mut never, |_| Err(Error::State("broken".into())));
        assert_eq!(result.unwrap_err().to_string(), "broken");
    }

    #[test]
    fn wait_until_gives_up_at_the_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(120);
        let mut timeouts = Vec::new();
        let result: Option<()> = wait_until(Some(deadline), &mut never, |timeout| {
            timeouts.push(timeout);
            std::thread::sleep(timeout);
            Ok(None)
        })
        .unwrap();
        assert!(result.is_none());
        assert!(Instant::now() >= deadline);
        assert!(timeouts.iter().all(|&s| s <= POLL), "{timeouts:?}");
        // A deadline already passed still tries once, without waiting.
        let past = Some(Instant::now());
        let mut tries = Vec::new();
        let result = wait_until(past, &mut never, |timeout| {
            tries.push(timeout);
            Ok(Some(1))
        });
        assert_eq!(result.unwrap(), Some(1));
        assert_eq!(tries, vec![Duration::ZERO]);
        // No deadline: like `wait`.
        assert_eq!(
            wait_until(None, &mut never, |_| Ok(Some(2))).unwrap(),
            Some(2)
        );
    }
}
