//! Running the sources of a merge on reader threads: each reader takes the next source
//! when done with one and hands its messages to the calling thread through a queue bounded
//! in bytes; the first error anywhere stops every reader.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::{panic_message, Error, Result};
use crate::output::interrupt::POLL;
use crate::read::events::ReadOptions;

/// Messages from readers to the calling thread, bounded in bytes; stopping wakes everyone.
struct Queue<M> {
    state: Mutex<QueueState<M>>,
    changed: Condvar,
    cap: usize,
}

struct QueueState<M> {
    items: VecDeque<(M, usize)>,
    bytes: usize,
    stop: bool,
    readers_left: usize,
}

/// What a reader has of the queue.
pub(super) struct Ctl<'q, M> {
    queue: &'q Queue<M>,
    read: &'q AtomicU64,
}

impl<M> Ctl<'_, M> {
    /// Hands `msg` (of `bytes`) to the calling thread, waiting while the queue is full;
    /// an error once the merge is stopping.
    pub(super) fn send(&self, msg: M, bytes: usize) -> Result<()> {
        let mut st = self
            .queue
            .state
            .lock()
            .map_err(|_| Error::Poisoned("merge queue"))?;
        loop {
            if st.stop {
                return Err(Error::Interrupted);
            }
            if st.bytes == 0 || st.bytes + bytes <= self.queue.cap {
                break;
            }
            st = self
                .queue
                .changed
                .wait_timeout(st, POLL)
                .map_err(|_| Error::Poisoned("merge queue"))?
                .0;
        }
        st.bytes += bytes;
        st.items.push_back((msg, bytes));
        self.queue.changed.notify_all();
        Ok(())
    }

    fn stopped(&self) -> bool {
        self.queue.state.lock().map_or(true, |st| st.stop)
    }

    /// The progress callback of a source's read: counts bytes, stops when told.
    pub(super) fn reading(&self) -> impl FnMut(u64) -> Result<()> + '_ {
        let mut last = 0u64;
        move |done| {
            self.read
                .fetch_add(done.saturating_sub(last), Ordering::Relaxed);
            last = done;
            if self.stopped() {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        }
    }
}

/// The work of a reader on one source (see [`run_sources`]).
pub(super) type Work<'a, M, D> = dyn Fn(usize, &Ctl<'_, Msg<M, D>>) -> Result<D> + Sync + 'a;

/// What a reader sends: a message of its work, or the end of a source.
pub(super) enum Msg<M, D> {
    Part(M),
    Done(usize, D),
}

/// The calling thread's part of [`run_sources`]: every message handed to `on_msg` as it
/// comes, and `progress` told the bytes read between waits, until the readers are done or
/// stopped.
fn take_messages<M>(
    queue: &Queue<M>,
    read: &AtomicU64,
    on_msg: &mut dyn FnMut(M) -> Result<()>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<()> {
    loop {
        let (item, finished) = {
            let mut st = queue
                .state
                .lock()
                .map_err(|_| Error::Poisoned("merge queue"))?;
            if st.stop {
                return Ok(());
            }
            if st.items.is_empty() && st.readers_left > 0 {
                st = queue
                    .changed
                    .wait_timeout(st, POLL)
                    .map_err(|_| Error::Poisoned("merge queue"))?
                    .0;
            }
            let item = st.items.pop_front().map(|(msg, bytes)| {
                st.bytes -= bytes;
                msg
            });
            if item.is_some() {
                queue.changed.notify_all();
            }
            (item, st.readers_left == 0 && st.items.is_empty())
        };
        if let Some(msg) = item {
            on_msg(msg)?;
        }
        progress(read.load(Ordering::Relaxed))?;
        if finished {
            return Ok(());
        }
    }
}

/// Runs `work` for each of `n` sources on `readers` threads (each takes the next source
/// when it is done with one). The calling thread gets every message as it comes
/// (`on_msg`) and calls `progress` with the bytes read so far between waits; the first
/// error anywhere stops every reader and is returned.
pub(super) fn run_sources<M: Send, D: Send>(
    n: usize,
    readers: usize,
    queue_cap: usize,
    work: &Work<'_, M, D>,
    on_msg: &mut dyn FnMut(Msg<M, D>) -> Result<()>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<()> {
    let readers = readers.clamp(1, n.max(1));
    let queue = Queue {
        state: Mutex::new(QueueState {
            items: VecDeque::new(),
            bytes: 0,
            stop: false,
            readers_left: readers,
        }),
        changed: Condvar::new(),
        cap: queue_cap,
    };
    let next = AtomicUsize::new(0);
    let read = AtomicU64::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    // The first error is the cause; readers stopped by it answer `Interrupted`.
    let fail = |e: Error| {
        if let Ok(mut first) = first_error.lock() {
            first.get_or_insert(e);
        }
        if let Ok(mut st) = queue.state.lock() {
            st.stop = true;
        }
        queue.changed.notify_all();
    };
    std::thread::scope(|scope| {
        for _ in 0..readers {
            let (queue, next, read, fail) = (&queue, &next, &read, &fail);
            scope.spawn(move || {
                let ctl = Ctl { queue, read };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n || ctl.stopped() {
                        break;
                    }
                    let done =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(i, &ctl)))
                            .unwrap_or_else(|p| Err(Error::Panic(panic_message(&*p))));
                    match done.and_then(|d| ctl.send(Msg::Done(i, d), 0)) {
                        Ok(()) => {}
                        Err(e) => {
                            fail(e);
                            break;
                        }
                    }
                }
                if let Ok(mut st) = queue.state.lock() {
                    st.readers_left -= 1;
                }
                queue.changed.notify_all();
            });
        }
        // The calling thread: messages as they come, Ctrl-C between waits.
        let result = take_messages(&queue, &read, on_msg, progress);
        if let Err(e) = result {
            fail(e);
        }
    });
    match first_error.into_inner().ok().flatten() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Reader threads for `n` sources and chunk-scanning threads per source, from `threads`.
pub(super) fn reader_threads(n: usize, threads: usize) -> (usize, ReadOptions) {
    let threads = threads.max(1);
    let readers = n.clamp(1, threads);
    let per_source = threads / readers;
    let options = ReadOptions {
        threads: if per_source >= 2 { per_source } else { 1 },
        ..ReadOptions::default()
    };
    (readers, options)
}
