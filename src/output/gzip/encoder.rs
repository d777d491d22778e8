//! [`ParallelGzEncoder`]: the API (`write`, `flush`, `finish`, and the steps of waits in short
//! slices: `wait_for_room`, `start_flush` / `wait_flushed`, `end_input` / `wait_written`) and
//! the producer's side of the pool. `write` copies input into the block being filled; a full
//! block gets the last 32 KiB of input before it as its dictionary and goes to the workers
//! (`dispatch`). The encoder starts the worker and writer threads, and stops and joins them
//! on `finish` or drop.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::pool::{panic_error, take_error, Block, Shared};
use super::worker::worker_thread;
use super::writer::{gzip_header, writer_thread};
use super::{DEFAULT_BLOCK_SIZE, WINDOW};

/// Smallest accepted block size (the deflate window).
pub(super) const MIN_BLOCK_SIZE: usize = WINDOW;

/// Largest accepted block size (per-block CRC lengths must fit in 32 bits).
pub(super) const MAX_BLOCK_SIZE: usize = 1 << 30;

/// What an encoder writes around the deflate stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// One gzip member: header, deflate stream ended by a final block, trailer.
    Gzip,
    /// A raw deflate slice: no header, no trailer, the last block ends with a sync flush.
    Slice,
}

/// A gzip encoder that compresses on several threads and writes a single gzip member.
///
/// Input given to [`write`](Write::write) is copied into pooled blocks; full blocks are
/// compressed by worker threads and written, in order, to the inner writer by a writer thread.
/// Errors from any thread are returned by the next `write`, `flush` or [`finish`](Self::finish).
/// Dropping the encoder without `finish` stops the threads and discards the rest of the output.
///
/// The same type, built with [`new_slice`](Self::new_slice), writes a raw deflate slice instead,
/// which [`append_slice`](Self::append_slice) splices into another encoder's stream (see the
/// module docs).
pub(crate) struct ParallelGzEncoder<W: Write + Send + 'static> {
    pub(super) shared: Arc<Shared>,
    /// The block being filled; it is dispatched when full and more input arrives, on `flush`,
    /// or on `finish` (as the last block).
    pub(super) current: Option<Block>,
    /// The last (up to) 32 KiB of input: the dictionary of the next block.
    pub(super) window: Vec<u8>,
    pub(super) next_seq: u64,
    pub(super) bytes_in: u64,
    pub(super) block_size: usize,
    pub(super) mode: Mode,
    /// The last block is dispatched ([`end_input`](Self::end_input)): no more input.
    input_ended: bool,
    workers: Vec<JoinHandle<()>>,
    /// Returns the inner writer and the CRC-32 and length of the whole stream's text once
    /// everything is written, `None` after an error or abort.
    writer: Option<JoinHandle<Option<(W, u32, u64)>>>,
}

impl<W: Write + Send + 'static> std::fmt::Debug for ParallelGzEncoder<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParallelGzEncoder")
            .field("threads", &self.workers.len())
            .field("block_size", &self.block_size)
            .field("mode", &self.mode)
            .field("bytes_in", &self.bytes_in)
            .field("bytes_out", &self.bytes_out())
            .finish_non_exhaustive()
    }
}

impl<W: Write + Send + 'static> ParallelGzEncoder<W> {
    /// A new encoder with [`DEFAULT_BLOCK_SIZE`]: `level` 0..=9, `threads` (deflate worker
    /// threads) >= 1.
    pub(crate) fn new(inner: W, level: u32, threads: usize) -> io::Result<Self> {
        Self::with_block_size(inner, level, threads, DEFAULT_BLOCK_SIZE)
    }

    /// A new encoder compressing `block_size` bytes of input per block
    /// ([`MIN_BLOCK_SIZE`]..=[`MAX_BLOCK_SIZE`]).
    pub(crate) fn with_block_size(
        inner: W,
        level: u32,
        threads: usize,
        block_size: usize,
    ) -> io::Result<Self> {
        Self::build(inner, level, threads, block_size, Mode::Gzip)
    }

    pub(super) fn build(
        inner: W,
        level: u32,
        threads: usize,
        block_size: usize,
        mode: Mode,
    ) -> io::Result<Self> {
        if level > 9 {
            return Err(invalid_input(format!(
                "gzip level must be 0..=9, got {level}"
            )));
        }
        if threads == 0 {
            return Err(invalid_input("gzip threads must be at least 1".into()));
        }
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(invalid_input(format!(
                "gzip block size must be {MIN_BLOCK_SIZE}..={MAX_BLOCK_SIZE} bytes, got {block_size}"
            )));
        }
        let slots = threads
            .checked_mul(2)
            .and_then(|n| n.checked_add(2))
            .ok_or_else(|| invalid_input(format!("too many gzip threads: {threads}")))?;
        let shared = Arc::new(Shared::new(slots));
        let mut encoder = ParallelGzEncoder {
            shared,
            current: None,
            window: Vec::with_capacity(WINDOW),
            next_seq: 0,
            bytes_in: 0,
            block_size,
            mode,
            input_ended: false,
            workers: Vec::with_capacity(threads),
            writer: None,
        };
        // If a spawn fails, dropping `encoder` stops and joins the threads already started.
        for i in 0..threads {
            let shared = Arc::clone(&encoder.shared);
            let handle = thread::Builder::new()
                .name(format!("kinetrace-gzip-{i}"))
                .spawn(move || worker_thread(&shared, level))?;
            encoder.workers.push(handle);
        }
        let shared = Arc::clone(&encoder.shared);
        let header = (mode == Mode::Gzip).then(|| gzip_header(level));
        let handle = thread::Builder::new()
            .name("kinetrace-gzip-writer".into())
            .spawn(move || writer_thread(&shared, inner, header))?;
        encoder.writer = Some(handle);
        Ok(encoder)
    }

    /// Uncompressed bytes accepted so far, spliced slices (their `len`) included.
    pub(crate) fn bytes_in(&self) -> u64 {
        self.bytes_in
    }

    /// Compressed bytes written to the inner writer so far, header included. Blocks still being
    /// compressed or queued are not counted.
    pub(crate) fn bytes_out(&self) -> u64 {
        self.shared.bytes_out.load(Ordering::Relaxed)
    }

    /// Compresses what is buffered, writes the trailer, waits for every thread, flushes the
    /// inner writer and returns it. The first error of any thread is returned here if it was
    /// not returned before. On a slice encoder ([`new_slice`](Self::new_slice)) this is an
    /// `InvalidInput` error and the output is discarded: use
    /// [`finish_slice`](Self::finish_slice).
    pub(crate) fn finish(self) -> io::Result<W> {
        if self.mode != Mode::Gzip {
            return Err(invalid_input(
                "finish called on a raw deflate slice encoder; use finish_slice".into(),
            ));
        }
        self.finish_stream().map(|(inner, _, _)| inner)
    }

    /// Dispatches the last block and waits for every thread; returns the inner writer with the
    /// CRC-32 and length of the stream's text.
    pub(super) fn finish_stream(mut self) -> io::Result<(W, u32, u64)> {
        // The last block may be empty: it then only ends the deflate stream (gzip), or writes
        // nothing (slice).
        let dispatched = if self.input_ended {
            Ok(()) // by `end_input`, whose errors are recorded
        } else {
            self.input_ended = true;
            self.check_error().and_then(|()| {
                let block = match self.current.take() {
                    Some(block) => block,
                    None => self.start_block()?,
                };
                self.dispatch(block, true)
            })
        };
        {
            let mut st = self.shared.lock();
            st.closing = true;
            if dispatched.is_err() {
                st.abort = true;
            }
        }
        self.shared.wake_all();

        let inner = match self.writer.take().map(JoinHandle::join) {
            Some(Ok(inner)) => inner,
            Some(Err(payload)) => {
                self.shared.fail(panic_error("writer", payload.as_ref()));
                None
            }
            None => None,
        };
        for handle in std::mem::take(&mut self.workers) {
            if let Err(payload) = handle.join() {
                self.shared
                    .fail(panic_error("deflate worker", payload.as_ref()));
            }
        }
        dispatched?;

        let mut st = self.shared.lock();
        if st.error.is_some() || st.abort {
            return Err(take_error(&mut st));
        }
        inner.ok_or_else(|| io::Error::other("the gzip writer thread stopped unexpectedly"))
    }

    /// Returns the recorded error, if any thread failed.
    pub(super) fn check_error(&self) -> io::Result<()> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(take_error(&mut self.shared.lock()));
        }
        Ok(())
    }

    /// Records `error`, stops every thread and returns the first recorded error.
    pub(super) fn fail_now(&self, error: io::Error) -> io::Error {
        self.shared.fail(error);
        take_error(&mut self.shared.lock())
    }

    /// Waits up to `timeout` for a free block in the pool, so that the next `write` of at
    /// most one block does not wait for one: lets a caller that must stay responsive (to
    /// Ctrl-C) wait a little at a time. `Ok(false)` on timeout; a recorded error is returned.
    pub(crate) fn wait_for_room(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let mut st = self.shared.wait_for_free(timeout);
        if st.abort {
            return Err(take_error(&mut st));
        }
        Ok(!st.free.is_empty())
    }

    /// The first step of finishing in short waits, for a caller that must stay responsive
    /// (to Ctrl-C): dispatches the last block, waiting up to `timeout` for a free block when
    /// none is being filled. `Ok(false)` on timeout; once it returned `Ok(true)` (later calls
    /// do at once), no more input is accepted, [`wait_written`](Self::wait_written) waits in
    /// slices for the writer, and [`finish`](Self::finish) then returns without waiting.
    pub(crate) fn end_input(&mut self, timeout: Duration) -> io::Result<bool> {
        if self.input_ended {
            return Ok(true);
        }
        self.check_error()?;
        let block = match self.current.take() {
            Some(block) => block,
            None if self.wait_for_room(timeout)? => self.start_block()?,
            None => return Ok(false),
        };
        self.input_ended = true;
        self.dispatch(block, true)?;
        self.shared.lock().closing = true;
        self.shared.wake_all();
        Ok(true)
    }

    /// Waits up to `timeout` for the writer thread to return (after
    /// [`end_input`](Self::end_input): once the whole stream is written, or on an error).
    /// `false` on timeout.
    pub(crate) fn wait_written(&self, timeout: Duration) -> bool {
        self.shared
            .wait_while(timeout, |s| !s.writer_done)
            .writer_done
    }

    /// Starts a flush (see [`Write::flush`]) without waiting for it, for a caller that
    /// waits in slices with [`wait_flushed`](Self::wait_flushed).
    pub(crate) fn start_flush(&mut self) -> io::Result<()> {
        self.check_input_open()?;
        self.check_error()?;
        if let Some(block) = self.current.take_if(|b| b.input_len() > 0) {
            self.dispatch(block, false)?;
        }
        self.shared.lock().flush_to = Some(self.next_seq);
        self.shared.writer_cv.notify_one();
        Ok(())
    }

    /// Waits up to `timeout` for the flush [`start_flush`](Self::start_flush) started.
    /// `Ok(false)` on timeout; a recorded error is returned.
    pub(crate) fn wait_flushed(&self, timeout: Duration) -> io::Result<bool> {
        let mut st = self
            .shared
            .wait_while(timeout, |s| !s.abort && s.flush_to.is_some());
        if st.abort {
            return Err(take_error(&mut st));
        }
        Ok(st.flush_to.is_none())
    }

    fn check_input_open(&self) -> io::Result<()> {
        if self.input_ended {
            return Err(invalid_input(
                "the gzip encoder is finishing: no more input".into(),
            ));
        }
        Ok(())
    }

    /// Takes a free block from the pool, waiting while none is.
    pub(super) fn take_free(&self) -> io::Result<Block> {
        let mut st = self.shared.lock();
        loop {
            if st.abort {
                return Err(take_error(&mut st));
            }
            if let Some(block) = st.free.pop() {
                return Ok(block);
            }
            st = Shared::wait(&self.shared.producer_cv, st);
        }
    }

    /// Takes a free block from the pool, waiting while none is, and primes it with the
    /// dictionary.
    fn start_block(&mut self) -> io::Result<Block> {
        let mut block = self.take_free()?;
        block.data.clear();
        // Reserved once per pooled block: the block never grows past this.
        block.data.reserve_exact(WINDOW + self.block_size);
        block.data.extend_from_slice(&self.window);
        block.dict_len = self.window.len();
        Ok(block)
    }

    /// Sends a filled block to the workers.
    pub(super) fn dispatch(&mut self, mut block: Block, last: bool) -> io::Result<()> {
        // The dictionary is the tail of the history, and `data` is the previous dictionary
        // followed by this block's input, so its tail is the next dictionary.
        let tail = block.data.len().saturating_sub(WINDOW);
        self.window.clear();
        self.window.extend_from_slice(&block.data[tail..]);
        block.seq = self.next_seq;
        block.last = last;
        block.finish = last && self.mode == Mode::Gzip;
        {
            let mut st = self.shared.lock();
            if st.abort {
                return Err(take_error(&mut st));
            }
            st.jobs.push_back(block);
        }
        self.next_seq += 1;
        self.shared.worker_cv.notify_one();
        Ok(())
    }
}

pub(super) fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

impl<W: Write + Send + 'static> Write for ParallelGzEncoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check_input_open()?;
        self.check_error()?;
        let mut rest = buf;
        while !rest.is_empty() {
            let mut block = match self.current.take() {
                Some(block) if block.input_len() < self.block_size => block,
                // Full, and there is more input: it is not the last block.
                Some(full) => {
                    self.dispatch(full, false)?;
                    self.start_block()?
                }
                None => self.start_block()?,
            };
            let n = (self.block_size - block.input_len()).min(rest.len());
            block.data.extend_from_slice(&rest[..n]);
            self.current = Some(block);
            rest = &rest[n..];
            self.bytes_in += n as u64;
        }
        Ok(buf.len())
    }

    /// Ends the current block with a sync flush, waits until everything written so far has
    /// reached the inner writer, and flushes the inner writer: what the inner writer holds is
    /// then a decodable prefix of the stream.
    fn flush(&mut self) -> io::Result<()> {
        self.start_flush()?;
        while !self.wait_flushed(Duration::from_secs(60))? {}
        Ok(())
    }
}

impl<W: Write + Send + 'static> Drop for ParallelGzEncoder<W> {
    fn drop(&mut self) {
        if self.writer.is_none() && self.workers.is_empty() {
            return; // finished
        }
        self.shared.stop();
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::gzip::testing::{
        check_gzip, encode, encode_chunks, trace_text, with_timeout, FailingWriter, Rng,
        SlowWriter, SMALL_BLOCK,
    };
    use flate2::{Compression, Crc};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    #[test]
    fn empty_input() {
        for threads in [1, 3] {
            let gz = encode(b"", 6, threads, SMALL_BLOCK);
            check_gzip(&gz, b"");
            // Header, an empty final fixed-Huffman block, zero CRC and length.
            assert_eq!(gz.len(), 20);
            assert_eq!(&gz[10..12], &[3, 0]);
        }
    }

    #[test]
    fn sizes_around_the_block_size() {
        let data = trace_text(40 * SMALL_BLOCK + 1, 1);
        for len in [
            0,
            1,
            2,
            WINDOW - 1,
            WINDOW,
            WINDOW + 1,
            SMALL_BLOCK - 1,
            SMALL_BLOCK,
            SMALL_BLOCK + 1,
            2 * SMALL_BLOCK,
            2 * SMALL_BLOCK + 1,
            40 * SMALL_BLOCK,
            40 * SMALL_BLOCK + 1,
        ] {
            for threads in [1, 2, 4] {
                let gz = encode(&data[..len], 6, threads, SMALL_BLOCK);
                check_gzip(&gz, &data[..len]);
            }
        }
    }

    #[test]
    fn minimum_block_size() {
        let data = trace_text(20 * MIN_BLOCK_SIZE + 17, 9);
        check_gzip(&encode(&data, 6, 3, MIN_BLOCK_SIZE), &data);
    }

    #[test]
    fn every_level() {
        let data = trace_text(5 * SMALL_BLOCK + 1234, 2);
        let mut sizes = Vec::new();
        for level in 0..=9 {
            let gz = encode(&data, level, 3, SMALL_BLOCK);
            check_gzip(&gz, &data);
            sizes.push(gz.len());
        }
        assert!(sizes[0] > data.len(), "level 0 stores");
        assert!(sizes[9] < sizes[1]);
    }

    #[test]
    fn incompressible_input() {
        let mut rng = Rng(3);
        let data: Vec<u8> = (0..6 * SMALL_BLOCK + 99)
            .map(|_| rng.next() as u8)
            .collect();
        for level in [0, 1, 6, 9] {
            check_gzip(&encode(&data, level, 2, SMALL_BLOCK), &data);
        }
    }

    #[test]
    fn thread_counts_are_deterministic() {
        let data = trace_text(13 * SMALL_BLOCK + 4321, 4);
        for level in [1, 6] {
            let reference = encode(&data, level, 1, SMALL_BLOCK);
            check_gzip(&reference, &data);
            for threads in 2..=8 {
                let gz = encode(&data, level, threads, SMALL_BLOCK);
                assert!(gz == reference, "level {level}, {threads} threads");
            }
        }
    }

    #[test]
    fn write_sizes_do_not_matter() {
        let data = trace_text(6 * SMALL_BLOCK + 777, 5);
        let reference = encode(&data, 6, 2, SMALL_BLOCK);
        check_gzip(&reference, &data);
        for chunk in [
            1,
            7,
            4096,
            SMALL_BLOCK - 1,
            SMALL_BLOCK,
            SMALL_BLOCK + 1,
            data.len(),
        ] {
            assert!(
                encode_chunks(&data, 6, 3, SMALL_BLOCK, chunk) == reference,
                "chunk {chunk}"
            );
        }
        // Mixed: one byte at a time for a while, random odd sizes, then one huge write.
        let mut enc = ParallelGzEncoder::with_block_size(Vec::new(), 6, 4, SMALL_BLOCK).unwrap();
        let mut pos = 0;
        while pos < 100_000 {
            pos += enc.write(&data[pos..pos + 1]).unwrap();
        }
        let mut rng = Rng(6);
        while pos < 3 * SMALL_BLOCK {
            let n = 1 + rng.below(3 * 4096) as usize;
            enc.write_all(&data[pos..pos + n]).unwrap();
            pos += n;
        }
        enc.write_all(&data[pos..]).unwrap();
        enc.write_all(b"").unwrap();
        assert!(enc.finish().unwrap() == reference);
    }

    #[test]
    fn bytes_counters() {
        let data = trace_text(3 * SMALL_BLOCK, 7);
        let mut enc = ParallelGzEncoder::with_block_size(Vec::new(), 6, 2, SMALL_BLOCK).unwrap();
        assert_eq!((enc.bytes_in(), enc.bytes_out()), (0, 0));
        enc.write_all(&data[..1000]).unwrap();
        enc.flush().unwrap();
        let after_flush = enc.bytes_out();
        assert!(after_flush > 10);
        enc.write_all(&data[1000..]).unwrap();
        assert_eq!(enc.bytes_in(), data.len() as u64);
        let shared = Arc::clone(&enc.shared);
        let gz = enc.finish().unwrap();
        assert_eq!(shared.bytes_out.load(Ordering::Relaxed), gz.len() as u64);
        check_gzip(&gz, &data);
    }

    /// A writer whose content other threads can look at.
    #[derive(Clone, Default)]
    struct SharedVec(Arc<Mutex<Vec<u8>>>);

    impl Write for SharedVec {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Inflates a prefix of a gzip stream, as far as it goes.
    fn inflate_prefix(gz: &[u8]) -> Vec<u8> {
        assert_eq!(&gz[..3], &[0x1f, 0x8b, 8]);
        let mut inflate = flate2::Decompress::new(false);
        let mut out = Vec::with_capacity(gz.len() * 20 + 1024);
        inflate
            .decompress_vec(&gz[10..], &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(
            inflate.total_in() as usize,
            gz.len() - 10,
            "prefix not fully decodable"
        );
        out
    }

    #[test]
    fn flush_gives_a_decodable_prefix() {
        let data = trace_text(5 * SMALL_BLOCK + 5, 8);
        let sink = SharedVec::default();
        let mut enc = ParallelGzEncoder::with_block_size(sink.clone(), 6, 3, SMALL_BLOCK).unwrap();
        enc.flush().unwrap(); // nothing written: writes nothing
        assert!(sink.0.lock().unwrap().is_empty());
        let cuts = [
            1,
            100,
            100,
            SMALL_BLOCK,
            2 * SMALL_BLOCK + 3,
            4 * SMALL_BLOCK,
            data.len(),
        ];
        let mut pos = 0;
        for &cut in &cuts {
            enc.write_all(&data[pos..cut]).unwrap();
            pos = cut;
            enc.flush().unwrap();
            enc.flush().unwrap(); // a second flush adds nothing
            let so_far = sink.0.lock().unwrap().clone();
            assert_eq!(enc.bytes_out(), so_far.len() as u64);
            assert!(inflate_prefix(&so_far) == data[..cut]);
        }
        let gz = enc.finish().unwrap();
        let gz = gz.0.lock().unwrap().clone();
        check_gzip(&gz, &data);
        // Flushing changes the block outputs but not the content, the same way for any thread count.
        let mut enc =
            ParallelGzEncoder::with_block_size(SharedVec::default(), 6, 1, SMALL_BLOCK).unwrap();
        let mut pos = 0;
        for &cut in &cuts {
            enc.write_all(&data[pos..cut]).unwrap();
            pos = cut;
            enc.flush().unwrap();
        }
        assert!(*enc.finish().unwrap().0.lock().unwrap() == gz);
    }

    #[test]
    fn flush_at_the_end_then_finish() {
        let data = trace_text(SMALL_BLOCK, 10);
        let mut enc = ParallelGzEncoder::with_block_size(Vec::new(), 6, 2, SMALL_BLOCK).unwrap();
        enc.write_all(&data).unwrap();
        enc.flush().unwrap();
        let gz = enc.finish().unwrap();
        check_gzip(&gz, &data);
    }

    #[test]
    fn invalid_arguments() {
        let check = |r: io::Result<ParallelGzEncoder<Vec<u8>>>| {
            assert_eq!(r.err().unwrap().kind(), io::ErrorKind::InvalidInput);
        };
        check(ParallelGzEncoder::new(Vec::new(), 10, 1));
        check(ParallelGzEncoder::new(Vec::new(), 6, 0));
        check(ParallelGzEncoder::with_block_size(
            Vec::new(),
            6,
            1,
            MIN_BLOCK_SIZE - 1,
        ));
        check(ParallelGzEncoder::with_block_size(
            Vec::new(),
            6,
            1,
            MAX_BLOCK_SIZE + 1,
        ));
        check(ParallelGzEncoder::new(Vec::new(), 6, usize::MAX));
    }

    /// Writes `data` then finishes, flushing every `flush_every` writes; returns the first error.
    fn run_until_error<W: Write + Send + 'static>(
        inner: W,
        data: Arc<Vec<u8>>,
        threads: usize,
        flush_every: usize,
    ) -> io::Error {
        with_timeout(60, move || {
            let mut enc =
                ParallelGzEncoder::with_block_size(inner, 1, threads, SMALL_BLOCK).unwrap();
            for (i, part) in data.chunks(10_000).enumerate() {
                if let Err(e) = enc.write_all(part) {
                    // Later calls keep reporting it, and nothing hangs.
                    let again = enc.flush().unwrap_err();
                    assert_eq!(again.raw_os_error(), e.raw_os_error());
                    assert_eq!(again.kind(), e.kind());
                    assert!(enc.finish().is_err());
                    return e;
                }
                if flush_every > 0 && i % flush_every == 0 {
                    if let Err(e) = enc.flush() {
                        assert!(enc.write_all(b"x").is_err());
                        return e;
                    }
                }
            }
            match enc.finish() {
                Ok(_) => panic!("finish succeeded"),
                Err(e) => e,
            }
        })
    }

    #[test]
    fn writer_errors_come_back() {
        let data = Arc::new(trace_text(30 * SMALL_BLOCK, 11));
        let full = encode(&data, 1, 1, SMALL_BLOCK).len();
        for limit in [0, 5, 10, 11, 1000, full / 2, full - 8, full - 4, full - 1] {
            for threads in [1, 2, 5] {
                for flush_every in [0, 7] {
                    let inner = FailingWriter {
                        written: 0,
                        limit,
                        fail_flush: false,
                    };
                    let e = run_until_error(inner, Arc::clone(&data), threads, flush_every);
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "limit {limit}");
                    assert_eq!(e.kind(), io::ErrorKind::StorageFull);
                }
            }
        }
        let inner = FailingWriter {
            written: 0,
            limit: usize::MAX,
            fail_flush: true,
        };
        let e = run_until_error(inner, Arc::clone(&data), 2, 0);
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        let inner = FailingWriter {
            written: 0,
            limit: usize::MAX,
            fail_flush: true,
        };
        let e = run_until_error(inner, data, 2, 3);
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn dev_full() {
        let Ok(file) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return; // not on Linux
        };
        let data = Arc::new(trace_text(8 * SMALL_BLOCK, 12));
        let e = run_until_error(file, data, 2, 0);
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn worker_panic_becomes_an_error() {
        for (panic_at, threads) in [(0, 1), (3, 2), (5, 4), (8, 3)] {
            let e = with_timeout(60, move || {
                let data = trace_text(12 * SMALL_BLOCK, 13);
                let mut enc =
                    ParallelGzEncoder::with_block_size(Vec::new(), 6, threads, SMALL_BLOCK)
                        .unwrap();
                enc.shared.panic_at_seq.store(panic_at, Ordering::Relaxed);
                for part in data.chunks(50_000) {
                    if let Err(e) = enc.write_all(part) {
                        drop(enc);
                        return e;
                    }
                }
                enc.finish().unwrap_err()
            });
            assert_eq!(e.kind(), io::ErrorKind::Other);
            assert!(e.to_string().contains("panic"), "{e}");
        }
    }

    /// A writer that panics on its first write.
    struct PanickingWriter;

    impl Write for PanickingWriter {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            panic!("injected writer panic");
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writer_panic_becomes_an_error() {
        let data = Arc::new(trace_text(20 * SMALL_BLOCK, 19));
        for flush_every in [0, 3] {
            let e = run_until_error(PanickingWriter, Arc::clone(&data), 2, flush_every);
            assert_eq!(e.kind(), io::ErrorKind::Other);
            assert!(e.to_string().contains("panic"), "{e}");
        }
    }

    #[test]
    fn wait_for_room_waits_for_a_free_block() {
        with_timeout(60, || {
            let data = trace_text(20 * SMALL_BLOCK, 33);
            let mut enc =
                ParallelGzEncoder::with_block_size(SlowWriter, 1, 1, SMALL_BLOCK).unwrap();
            assert!(enc.wait_for_room(Duration::ZERO).unwrap());
            // More blocks than the pool holds, behind a slow writer: the pool runs dry.
            enc.write_all(&data).unwrap();
            let mut waits = 0;
            while !enc.wait_for_room(Duration::from_millis(5)).unwrap() {
                waits += 1;
            }
            assert!(waits < 1000, "{waits} waits");
            // A block is free: writing one block's worth does not wait for the writer.
            let start = Instant::now();
            enc.write_all(&data[..SMALL_BLOCK]).unwrap();
            assert!(start.elapsed() < Duration::from_secs(5));
            drop(enc);
            // A failed encoder reports its error instead of waiting.
            let inner = FailingWriter {
                written: 0,
                limit: 0,
                fail_flush: false,
            };
            let mut enc = ParallelGzEncoder::with_block_size(inner, 1, 1, SMALL_BLOCK).unwrap();
            // The writer may fail (and the pool stop) before the second block is taken.
            let e = enc
                .write_all(&data[..2 * SMALL_BLOCK])
                .and_then(|()| enc.flush())
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
            let e = enc.wait_for_room(Duration::from_secs(5)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        });
    }

    /// An inner writer that holds every write until its gate opens (a pipe nobody reads).
    struct Gated {
        open: Arc<std::sync::atomic::AtomicBool>,
        out: SharedVec,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            while !self.open.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(1));
            }
            self.out.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn flush_and_finish_in_short_waits() {
        with_timeout(60, || {
            let data = trace_text(3 * SMALL_BLOCK + 100, 34);
            let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let out = Arc::new(Mutex::new(Vec::new()));
            let inner = Gated {
                open: Arc::clone(&open),
                out: SharedVec(Arc::clone(&out)),
            };
            let mut enc = ParallelGzEncoder::with_block_size(inner, 6, 2, SMALL_BLOCK).unwrap();
            let half = data.len() / 2;
            enc.write_all(&data[..half]).unwrap();
            // A stalled writer: each wait gives up after its timeout, and may be retried.
            enc.start_flush().unwrap();
            assert!(!enc.wait_flushed(Duration::from_millis(20)).unwrap());
            assert!(!enc.wait_flushed(Duration::ZERO).unwrap());
            open.store(true, Ordering::Release);
            while !enc.wait_flushed(Duration::from_millis(5)).unwrap() {}
            assert_eq!(inflate_prefix(&out.lock().unwrap()), &data[..half]);
            open.store(false, Ordering::Release);
            enc.write_all(&data[half..]).unwrap();
            while !enc.end_input(Duration::from_millis(5)).unwrap() {}
            assert!(
                enc.end_input(Duration::ZERO).unwrap(),
                "once ended, at once"
            );
            assert!(!enc.wait_written(Duration::from_millis(20)));
            // No more input once it ended.
            let e = enc.write_all(b"late").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert_eq!(
                enc.start_flush().unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            open.store(true, Ordering::Release);
            while !enc.wait_written(Duration::from_millis(5)) {}
            let start = Instant::now();
            enc.finish().unwrap();
            assert!(start.elapsed() < Duration::from_secs(5));
            // The same member as one blocking flush and finish write.
            let expected = Arc::new(Mutex::new(Vec::new()));
            let mut plain = ParallelGzEncoder::with_block_size(
                SharedVec(Arc::clone(&expected)),
                6,
                2,
                SMALL_BLOCK,
            )
            .unwrap();
            plain.write_all(&data[..half]).unwrap();
            plain.flush().unwrap();
            plain.write_all(&data[half..]).unwrap();
            plain.finish().unwrap();
            let gz = out.lock().unwrap().clone();
            check_gzip(&gz, &data);
            assert_eq!(gz, *expected.lock().unwrap());
        });
    }

    #[test]
    fn end_input_reports_a_failed_encoder() {
        with_timeout(60, || {
            let data = trace_text(2 * SMALL_BLOCK, 35);
            let inner = FailingWriter {
                written: 0,
                limit: 0,
                fail_flush: false,
            };
            let mut enc = ParallelGzEncoder::with_block_size(inner, 1, 1, SMALL_BLOCK).unwrap();
            // The first block goes to the writer while the second is filled: on a busy
            // machine the writer may have failed before the second block is taken or the
            // flush starts, and then that call reports the error instead of the wait.
            let e = match enc.write_all(&data).and_then(|()| enc.start_flush()) {
                Err(e) => e,
                Ok(()) => loop {
                    match enc.wait_flushed(Duration::from_millis(5)) {
                        Ok(done) => assert!(!done, "flushed into a failing writer"),
                        Err(e) => break e,
                    }
                },
            };
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
            let e = enc.end_input(Duration::from_secs(5)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
            assert!(
                enc.wait_written(Duration::from_secs(5)),
                "the writer returned"
            );
            let e = enc.finish().err().expect("finish reports the error");
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        });
    }

    #[test]
    fn drop_without_finish_does_not_hang() {
        with_timeout(60, || {
            let data = trace_text(40 * SMALL_BLOCK, 14);
            // Nothing written.
            drop(ParallelGzEncoder::new(Vec::new(), 6, 4).unwrap());
            // Mid-stream, with blocks queued everywhere and the producer having waited for free
            // blocks.
            for threads in [1, 3] {
                let mut enc =
                    ParallelGzEncoder::with_block_size(SlowWriter, 1, threads, SMALL_BLOCK)
                        .unwrap();
                enc.write_all(&data).unwrap();
                let start = Instant::now();
                drop(enc);
                assert!(start.elapsed() < Duration::from_secs(5));
            }
            // After an error.
            let inner = FailingWriter {
                written: 0,
                limit: 100,
                fail_flush: false,
            };
            let mut enc = ParallelGzEncoder::with_block_size(inner, 1, 2, SMALL_BLOCK).unwrap();
            let _ = enc.write_all(&data);
            drop(enc);
        });
    }

    /// Counts bytes and keeps the last 8.
    struct Tail {
        count: u64,
        last: [u8; 8],
    }

    impl Write for Tail {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.count += buf.len() as u64;
            if buf.len() >= 8 {
                self.last.copy_from_slice(&buf[buf.len() - 8..]);
            } else {
                self.last.rotate_left(buf.len());
                self.last[8 - buf.len()..].copy_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// About 4 s in release mode on 2 cores; far slower unoptimized.
    #[test]
    #[cfg_attr(
        debug_assertions,
        ignore = "compresses more than 4 GiB; run with --release"
    )]
    fn length_wraps_above_4_gib() {
        let chunk = trace_text(1 << 20, 16);
        let total: u64 = (1 << 32) + 3 * (1 << 20) + 12_345;
        let threads = thread::available_parallelism().map_or(2, |n| n.get());
        let start = Instant::now();
        let mut enc = ParallelGzEncoder::new(
            Tail {
                count: 0,
                last: [0; 8],
            },
            1,
            threads,
        )
        .unwrap();
        let mut crc = Crc::new();
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            enc.write_all(&chunk[..n]).unwrap();
            crc.update(&chunk[..n]);
            left -= n as u64;
        }
        assert_eq!(enc.bytes_in(), total);
        let tail = enc.finish().unwrap();
        eprintln!(
            "4 GiB test: {total} bytes in, {} out, {:.1} s with {threads} threads",
            tail.count,
            start.elapsed().as_secs_f64()
        );
        assert_eq!(tail.last[..4], crc.sum().to_le_bytes());
        assert_eq!(tail.last[4..], (total as u32).to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(tail.last[4..].try_into().unwrap()),
            3 * (1 << 20) + 12_345
        );
    }

    #[test]
    fn size_close_to_single_stream() {
        let data = trace_text(8 << 20, 17);
        let mut single = flate2::write::GzEncoder::new(Vec::new(), Compression::new(6));
        single.write_all(&data).unwrap();
        let single = single.finish().unwrap().len() as f64;
        for block in [128 * 1024, DEFAULT_BLOCK_SIZE] {
            let ours = encode(&data, 6, 2, block);
            check_gzip(&ours, &data);
            let ratio = ours.len() as f64 / single;
            eprintln!(
                "block {block}: {} vs {single} bytes, ratio {ratio:.5}",
                ours.len()
            );
            assert!(ratio < 1.01, "block {block}: ratio {ratio}");
        }
    }

    #[test]
    #[ignore = "benchmark; run with --release --ignored --nocapture"]
    fn throughput_report() {
        let data = trace_text(200 << 20, 18);
        let mut single = flate2::write::GzEncoder::new(io::sink(), Compression::new(6));
        let start = Instant::now();
        single.write_all(&data).unwrap();
        single.finish().unwrap();
        let mbps = data.len() as f64 / 1e6 / start.elapsed().as_secs_f64();
        eprintln!("flate2 GzEncoder level 6 (one thread): {mbps:.1} MB/s");
        for level in [1, 3, 6, 9] {
            let mut one_thread = 0.0;
            for threads in [1, 2] {
                // Best of 3: the machine may be shared.
                let mut best = 0.0f64;
                let mut size = 0;
                for _ in 0..3 {
                    let start = Instant::now();
                    let mut enc = ParallelGzEncoder::new(io::sink(), level, threads).unwrap();
                    for part in data.chunks(256 * 1024) {
                        enc.write_all(part).unwrap();
                    }
                    let shared = Arc::clone(&enc.shared);
                    enc.finish().unwrap();
                    best = best.max(data.len() as f64 / 1e6 / start.elapsed().as_secs_f64());
                    size = shared.bytes_out.load(Ordering::Relaxed);
                }
                if threads == 1 {
                    one_thread = best;
                }
                eprintln!(
                    "level {level}, {threads} thread(s): {best:.1} MB/s ({:.2}x), {size} bytes",
                    best / one_thread
                );
            }
        }
        // Splicing: copying a slice's bytes through the pool to the writer. The bytes are not
        // decoded, so any bytes ending with the sync marker do.
        let mut slice = vec![7u8; 512 << 20];
        let end = slice.len() - 4;
        slice[end..].copy_from_slice(&[0, 0, 0xff, 0xff]); // slice.rs's SYNC_MARKER
        for threads in [1, 2] {
            let mut best = 0.0f64;
            for _ in 0..3 {
                let start = Instant::now();
                let mut enc = ParallelGzEncoder::new(io::sink(), 6, threads).unwrap();
                enc.write_all(&data[..1 << 20]).unwrap();
                enc.append_slice(slice.as_slice(), 1, 1).unwrap();
                enc.write_all(&data[..1 << 20]).unwrap();
                enc.finish().unwrap();
                best = best.max((512 << 20) as f64 / 1e6 / start.elapsed().as_secs_f64());
            }
            eprintln!("splice, {threads} thread(s): {best:.0} MB/s of slice bytes");
        }
    }
}
