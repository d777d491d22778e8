//! The pool: the fixed set of [`Block`]s an encoder owns, and the [`Shared`] state its
//! threads hand them around in.
//!
//! A block goes round: free -> filled by the producer (`encoder`) -> `jobs` -> compressed by a
//! worker -> `done` -> written by the writer -> free. All of it is under one lock; the
//! condition variables say who may have something to do.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// One unit of work: a block's input (preceded by its dictionary) and, once compressed, its
/// part of the deflate stream; or a chunk of a spliced slice, which goes straight to the
/// writer. Blocks are pooled and reused, buffers and all.
pub(super) struct Block {
    /// Position of the block in the stream.
    pub(super) seq: u64,
    /// `dict_len` bytes of dictionary, then the block's input (empty for a spliced chunk).
    pub(super) data: Vec<u8>,
    pub(super) dict_len: usize,
    /// The block's part of the deflate stream (or the spliced chunk).
    pub(super) out: Vec<u8>,
    /// CRC-32 and length of the uncompressed text `out` adds to the stream, folded into the
    /// trailer by the writer. Set by the worker; for a spliced slice, the whole slice's values
    /// ride on its last chunk and the other chunks add nothing.
    pub(super) crc: u32,
    pub(super) len: u64,
    /// Ends the deflate stream with a final block (the gzip member's last block); otherwise the
    /// block ends with a sync flush.
    pub(super) finish: bool,
    /// The writer's last block: it writes the trailer (gzip) and stops.
    pub(super) last: bool,
}

impl Block {
    pub(super) fn new() -> Self {
        Block {
            seq: 0,
            data: Vec::new(),
            dict_len: 0,
            out: Vec::new(),
            crc: 0,
            len: 0,
            finish: false,
            last: false,
        }
    }

    pub(super) fn input_len(&self) -> usize {
        self.data.len() - self.dict_len
    }
}

/// Everything the threads share, under one lock. Work moves in whole blocks (about one lock
/// round trip per MiB), so contention does not matter.
pub(super) struct State {
    /// Blocks the producer may fill.
    pub(super) free: Vec<Block>,
    /// Filled blocks waiting for a worker.
    pub(super) jobs: VecDeque<Block>,
    /// Compressed blocks waiting for the writer, at index `seq % done.len()`. At most
    /// `done.len()` blocks are between dispatch and write, and their `seq`s are consecutive, so
    /// the indexes never collide.
    pub(super) done: Vec<Option<Block>>,
    /// The `seq` the writer writes next.
    pub(super) next_write: u64,
    /// A flush request: flush the inner writer once every block before this `seq` is written.
    pub(super) flush_to: Option<u64>,
    /// No more blocks will be dispatched; workers exit once `jobs` is empty.
    pub(super) closing: bool,
    /// Stop everything now (an error, or the encoder was dropped).
    pub(super) abort: bool,
    /// The writer thread has returned (done, stopped or failed): joining it will not wait.
    pub(super) writer_done: bool,
    /// The first error of any thread.
    pub(super) error: Option<io::Error>,
}

/// What an encoder's threads share.
pub(super) struct Shared {
    state: Mutex<State>,
    /// The producer waits here for a free block or the end of a flush.
    pub(super) producer_cv: Condvar,
    /// Workers wait here for jobs.
    pub(super) worker_cv: Condvar,
    /// The writer waits here for the next compressed block or a flush request.
    pub(super) writer_cv: Condvar,
    /// Set with `state.error`, so `write` can check for errors without locking.
    pub(super) failed: AtomicBool,
    pub(super) bytes_out: AtomicU64,
    /// Fault injection for tests: the worker compressing this `seq` panics.
    #[cfg(test)]
    pub(super) panic_at_seq: AtomicU64,
}

impl Shared {
    /// The state of a new encoder with `slots` blocks, all free.
    pub(super) fn new(slots: usize) -> Self {
        Shared {
            state: Mutex::new(State {
                free: (0..slots).map(|_| Block::new()).collect(),
                jobs: VecDeque::with_capacity(slots),
                done: (0..slots).map(|_| None).collect(),
                next_write: 0,
                flush_to: None,
                closing: false,
                abort: false,
                writer_done: false,
                error: None,
            }),
            producer_cv: Condvar::new(),
            worker_cv: Condvar::new(),
            writer_cv: Condvar::new(),
            failed: AtomicBool::new(false),
            bytes_out: AtomicU64::new(0),
            #[cfg(test)]
            panic_at_seq: AtomicU64::new(u64::MAX),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // No thread panics while holding the lock, and if one did the state would still be
        // consistent enough to shut down; never let poisoning turn into a panic here.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to `timeout` for a free block (or for the encoder to stop).
    pub(super) fn wait_for_free(&self, timeout: Duration) -> MutexGuard<'_, State> {
        self.wait_while(timeout, |s| !s.abort && s.free.is_empty())
    }

    /// Waits (as the producer) up to `timeout` while `busy` holds.
    pub(super) fn wait_while(
        &self,
        timeout: Duration,
        busy: impl FnMut(&mut State) -> bool,
    ) -> MutexGuard<'_, State> {
        let st = self.lock();
        self.producer_cv
            .wait_timeout_while(st, timeout, busy)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    pub(super) fn wait<'a>(cv: &Condvar, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn wake_all(&self) {
        self.producer_cv.notify_all();
        self.worker_cv.notify_all();
        self.writer_cv.notify_all();
    }

    /// Records `error` (the first one wins) and stops every thread.
    pub(super) fn fail(&self, error: io::Error) {
        {
            let mut st = self.lock();
            if st.error.is_none() {
                st.error = Some(error);
            }
            st.abort = true;
        }
        self.failed.store(true, Ordering::Release);
        self.wake_all();
    }

    /// Stops every thread (the encoder was dropped).
    pub(super) fn stop(&self) {
        self.lock().abort = true;
        self.wake_all();
    }
}

/// Hands out the recorded error: the original the first time, copies (same kind, same OS error
/// code, same message) afterwards.
pub(super) fn take_error(st: &mut State) -> io::Error {
    match st.error.take() {
        Some(error) => {
            st.error = Some(copy_error(&error));
            error
        }
        None => io::Error::other("the gzip encoder was stopped"),
    }
}

fn copy_error(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(error.kind(), error.to_string()),
    }
}

/// A thread's panic, as the error the encoder reports.
pub(super) fn panic_error(thread: &str, payload: &(dyn std::any::Any + Send)) -> io::Error {
    io::Error::other(format!(
        "gzip {thread} thread panicked: {}",
        crate::error::panic_message(payload)
    ))
}
