//! Many trace files read on threads: the one pool of `merge`, `summary` and `parquet`.
//!
//! Each of the `readers` threads takes the next source when it is done with one and runs the
//! caller's work on it; the work may hand messages (blocks of text, say) to the calling
//! thread, which takes them in the order they come through a queue bounded in bytes. The
//! calling thread also tells the caller's progress the bytes read so far, between waits of
//! at most [`POLL`], so Ctrl-C is answered while the readers work.
//!
//! The first error anywhere stops every reader (their reads answer `Interrupted`, which is
//! not reported) and is the one returned. A reader's panic becomes an error naming the file
//! it was reading; the other readers stop as for any error.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
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

impl<M> Queue<M> {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, QueueState<M>>> {
        self.state
            .lock()
            .map_err(|_| Error::Poisoned("source queue"))
    }

    /// Stops every reader and the calling thread's wait.
    fn stop(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.stop = true;
        }
        self.changed.notify_all();
    }
}

/// What a reader has of the pool: the queue to the calling thread, the shared count of
/// bytes read, and the stop flag.
pub(crate) struct Reader<'q, M> {
    queue: &'q Queue<M>,
    read: &'q AtomicU64,
}

impl<M> Reader<'_, M> {
    /// Hands `msg` (of `bytes`) to the calling thread, waiting while the queue is full;
    /// `Interrupted` once the pool is stopping.
    pub(crate) fn send(&self, msg: M, bytes: usize) -> Result<()> {
        let mut st = self.queue.lock()?;
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
                .map_err(|_| Error::Poisoned("source queue"))?
                .0;
        }
        st.bytes += bytes;
        st.items.push_back((msg, bytes));
        self.queue.changed.notify_all();
        Ok(())
    }

    pub(crate) fn stopped(&self) -> bool {
        self.queue.state.lock().map_or(true, |st| st.stop)
    }

    /// `Interrupted` once the pool is stopping: for a reader's own loops between reads.
    pub(crate) fn check(&self) -> Result<()> {
        if self.stopped() {
            Err(Error::Interrupted)
        } else {
            Ok(())
        }
    }

    /// The progress callback of one read of a source (`scan_trace`'s): counts the bytes it
    /// reports into the pool's total and stops when the pool stops. One per read: it
    /// remembers where its read was.
    pub(crate) fn reading(&self) -> impl FnMut(u64) -> Result<()> + '_ {
        let mut last = 0u64;
        move |done| {
            self.read
                .fetch_add(done.saturating_sub(last), Ordering::Relaxed);
            last = done;
            self.check()
        }
    }
}

/// What a reader sends: a message of its work, or the end of a source with its result.
pub(crate) enum Msg<M, D> {
    Part(M),
    Done(usize, D),
}

/// The work of a reader on source `i` (see [`Sources::run`]).
pub(crate) type Work<'a, M, D> = dyn Fn(usize, &Reader<'_, Msg<M, D>>) -> Result<D> + Sync + 'a;

/// The sources and the reader threads that read them, pass after pass.
pub(crate) struct Sources<'a> {
    pub(crate) paths: &'a [PathBuf],
    readers: usize,
    queue_cap: usize,
    /// How each reader reads its source: with threads left over (fewer sources than
    /// threads), a plain `.json` in parallel chunks.
    pub(crate) read_options: ReadOptions,
}

impl<'a> Sources<'a> {
    /// `threads` shared between sources (one reader each, at most one per source) and,
    /// where there are more threads than sources, the chunked reading of each; a queue of
    /// `queue_bytes_per_reader` per reader.
    pub(crate) fn new(paths: &'a [PathBuf], threads: usize, queue_bytes_per_reader: usize) -> Self {
        let threads = threads.max(1);
        let readers = paths.len().clamp(1, threads);
        let per_source = threads / readers;
        Sources {
            paths,
            readers,
            queue_cap: readers * queue_bytes_per_reader,
            read_options: ReadOptions {
                threads: if per_source >= 2 { per_source } else { 1 },
                ..ReadOptions::default()
            },
        }
    }

    /// [`Sources::new`] with at least two threads on each source where `threads` allows
    /// (a gzip inflated beside its scan, a plain `.json` in chunks): half as many sources
    /// held at once, for work whose memory grows with each source read.
    pub(crate) fn two_threads_each(paths: &'a [PathBuf], threads: usize) -> Self {
        let threads = threads.max(1);
        let mut sources = Sources::new(paths, threads, 0);
        if threads >= 2 && sources.readers > threads / 2 {
            sources.readers = threads / 2;
            sources.read_options.threads = threads / sources.readers;
        }
        sources
    }

    /// One pass over every source: `work` on the reader threads, `on_msg` on this one with
    /// every message as it comes, `progress` told the bytes read between waits.
    pub(crate) fn run<M: Send, D: Send>(
        &self,
        work: &Work<'_, M, D>,
        on_msg: &mut dyn FnMut(Msg<M, D>) -> Result<()>,
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        let queue = Queue {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                bytes: 0,
                stop: false,
                readers_left: self.readers,
            }),
            changed: Condvar::new(),
            cap: self.queue_cap,
        };
        let next = AtomicUsize::new(0);
        let read = AtomicU64::new(0);
        let first_error: Mutex<Option<Error>> = Mutex::new(None);
        // The first error is the cause; readers stopped by it answer `Interrupted`.
        let fail = |e: Error| {
            if let Ok(mut first) = first_error.lock() {
                first.get_or_insert(e);
            }
            queue.stop();
        };
        std::thread::scope(|scope| {
            for _ in 0..self.readers {
                let reader = Reader {
                    queue: &queue,
                    read: &read,
                };
                let (next, fail) = (&next, &fail);
                scope.spawn(move || self.reader_loop(&reader, next, work, fail));
            }
            // The calling thread: messages as they come, Ctrl-C between waits.
            if let Err(e) = take_messages(&queue, &read, on_msg, progress) {
                fail(e);
            }
        });
        match first_error.into_inner().ok().flatten() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One reader thread: the next source until none is left or the pool stops.
    fn reader_loop<M, D>(
        &self,
        reader: &Reader<'_, Msg<M, D>>,
        next: &AtomicUsize,
        work: &Work<'_, M, D>,
        fail: &(dyn Fn(Error) + Sync),
    ) {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= self.paths.len() || reader.stopped() {
                break;
            }
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                panic_if_asked(&self.paths[i]);
                work(i, reader)
            }))
            .unwrap_or_else(|p| {
                let path = self.paths[i].display();
                Err(Error::Panic(format!(
                    "reading {path}: {}",
                    panic_message(&*p)
                )))
            });
            if let Err(e) = done.and_then(|d| reader.send(Msg::Done(i, d), 0)) {
                fail(e);
                break;
            }
        }
        if let Ok(mut st) = reader.queue.state.lock() {
            st.readers_left -= 1;
        }
        reader.queue.changed.notify_all();
    }

    /// Every source's result, in the order of the sources: [`Sources::run`] for work that
    /// sends no messages of its own.
    pub(crate) fn each<D: Send>(
        &self,
        work: &Work<'_, (), D>,
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Vec<D>> {
        let mut done: Vec<Option<D>> = (0..self.paths.len()).map(|_| None).collect();
        let mut on_msg = |msg: Msg<(), D>| {
            if let Msg::Done(i, d) = msg {
                done[i] = Some(d);
            }
            Ok(())
        };
        self.run(work, &mut on_msg, progress)?;
        Ok(done
            .into_iter()
            .map(|d| d.expect("every source done"))
            .collect())
    }
}

/// `KINETRACE_TEST_PANIC_READING=NAME` (builds with the `test-hooks` feature only, never a
/// release wheel): the reader of the source whose file name is NAME panics, so
/// `tests/test_panics.py` can see what each tool makes of a panicking reader.
#[cfg(feature = "test-hooks")]
fn panic_if_asked(path: &Path) {
    let asked = std::env::var_os("KINETRACE_TEST_PANIC_READING");
    if asked.is_some_and(|name| path.file_name() == Some(name.as_os_str())) {
        panic!("panic requested by a test");
    }
}

#[cfg(not(feature = "test-hooks"))]
fn panic_if_asked(_: &Path) {}

/// The calling thread's part of [`Sources::run`]: every message handed to `on_msg` as it
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
            let mut st = queue.lock()?;
            if st.stop {
                return Ok(());
            }
            if st.items.is_empty() && st.readers_left > 0 {
                st = queue
                    .changed
                    .wait_timeout(st, POLL)
                    .map_err(|_| Error::Poisoned("source queue"))?
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

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(n: usize) -> Vec<PathBuf> {
        (0..n)
            .map(|i| PathBuf::from(format!("rank{i}.json")))
            .collect()
    }

    fn quiet(_: u64) -> Result<()> {
        Ok(())
    }

    #[test]
    fn results_come_back_in_the_order_of_the_sources() {
        let paths = paths(7);
        for threads in [1, 2, 3, 16] {
            let sources = Sources::new(&paths, threads, 1 << 10);
            let done = sources
                .each(&|i, _| Ok(i * 10), &mut quiet)
                .expect("no error");
            assert_eq!(done, (0..7).map(|i| i * 10).collect::<Vec<_>>());
        }
    }

    #[test]
    fn threads_are_shared_between_sources_and_chunked_reading() {
        let one = paths(1);
        let s = Sources::new(&one, 8, 1);
        assert_eq!((s.readers, s.read_options.threads), (1, 8));
        let four = paths(4);
        let s = Sources::new(&four, 2, 1);
        assert_eq!((s.readers, s.read_options.threads), (2, 1));
        let s = Sources::new(&four, 0, 1);
        assert_eq!((s.readers, s.read_options.threads), (1, 1));
        // Two threads a source where there are enough: fewer sources held at once.
        let each = |paths: &[PathBuf], threads: usize| {
            let s = Sources::two_threads_each(paths, threads);
            (s.readers, s.read_options.threads)
        };
        assert_eq!(each(&four, 2), (1, 2));
        assert_eq!(each(&four, 3), (1, 3));
        assert_eq!(each(&four, 8), (4, 2));
        assert_eq!(each(&four, 16), (4, 4));
        assert_eq!(each(&one, 8), (1, 8));
        assert_eq!(each(&four, 1), (1, 1));
    }

    #[test]
    fn a_panicking_reader_is_an_error_naming_its_file() {
        let paths = paths(5);
        let sources = Sources::new(&paths, 2, 1 << 10);
        let work = |i: usize, reader: &Reader<'_, Msg<(), usize>>| {
            if i == 3 {
                panic!("bad index");
            }
            reader.check()?;
            Ok(i)
        };
        let err = sources.each(&work, &mut quiet).expect_err("an error");
        let text = err.to_string();
        assert!(matches!(err, Error::Panic(_)), "{text}");
        assert!(
            text.contains("rank3.json") && text.contains("bad index"),
            "{text}"
        );
    }

    #[test]
    fn the_first_error_is_returned_and_stops_the_others() {
        let paths = paths(40);
        let sources = Sources::new(&paths, 3, 1 << 10);
        let started = AtomicUsize::new(0);
        let work = |i: usize, reader: &Reader<'_, Msg<(), ()>>| {
            started.fetch_add(1, Ordering::Relaxed);
            if i == 0 {
                return Err(Error::State(format!("{} is bad", Path::new("x").display())));
            }
            // Wait to be stopped: the pool must stop us rather than let us run on.
            loop {
                reader.check()?;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        let err = sources.each(&work, &mut quiet).expect_err("an error");
        assert!(matches!(err, Error::State(_)), "{err}");
        assert!(
            started.load(Ordering::Relaxed) <= 3,
            "readers went on after the error"
        );
    }

    #[test]
    fn progress_sees_the_bytes_read_and_its_error_stops_the_readers() {
        let paths = paths(2);
        let sources = Sources::new(&paths, 2, 1 << 10);
        let work = |_: usize, reader: &Reader<'_, Msg<(), ()>>| {
            let mut reading = reader.reading();
            reading(100)?;
            reading(250)?;
            loop {
                reading(250)?;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        let mut seen = 0;
        let mut progress = |bytes: u64| {
            seen = seen.max(bytes);
            if bytes >= 500 {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        };
        let err = sources.each(&work, &mut progress).expect_err("stopped");
        assert!(matches!(err, Error::Interrupted), "{err}");
        assert_eq!(seen, 500, "each read counted once, as far as it went");
    }

    #[test]
    fn messages_arrive_in_order_per_source_within_the_byte_cap() {
        let paths = paths(3);
        let sources = Sources::new(&paths, 3, 10);
        let work = |i: usize, reader: &Reader<'_, Msg<(usize, usize), usize>>| {
            for k in 0..50 {
                reader.send(Msg::Part((i, k)), 4)?;
            }
            Ok(i)
        };
        let mut last = [None::<usize>; 3];
        let mut dones = 0;
        let mut on_msg = |msg: Msg<(usize, usize), usize>| {
            match msg {
                Msg::Part((i, k)) => {
                    assert_eq!(last[i].map_or(0, |l| l + 1), k);
                    last[i] = Some(k);
                }
                Msg::Done(i, d) => {
                    assert_eq!((i, last[i]), (d, Some(49)));
                    dones += 1;
                }
            }
            Ok(())
        };
        sources
            .run(&work, &mut on_msg, &mut quiet)
            .expect("no error");
        assert_eq!(dones, 3);
    }
}
