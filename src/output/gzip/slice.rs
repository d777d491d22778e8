//! Slices: a slice encoder compresses a worker process's slice of the trace to raw deflate
//! (no header, no trailer, every block ending with a sync flush), and
//! [`append_slice`](ParallelGzEncoder::append_slice) splices such a slice into another
//! encoder's stream, folding its CRC-32 and length into the trailer (see the module docs of
//! `gzip`).

use std::io::{self, Read, Write};
use std::panic::{self, AssertUnwindSafe};

use super::encoder::{invalid_input, Mode, ParallelGzEncoder};
use super::pool::{take_error, Block};
use super::DEFAULT_BLOCK_SIZE;

/// Most bytes of a spliced slice read into one pooled block (less with a smaller block size).
const SLICE_CHUNK: usize = 1 << 20;

/// The end of a sync flush (an empty stored block): every slice made by a slice encoder ends
/// with it, unless the slice is empty.
pub(super) const SYNC_MARKER: [u8; 4] = [0, 0, 0xff, 0xff];

impl<W: Write + Send + 'static> ParallelGzEncoder<W> {
    /// A slice encoder: writes raw deflate only (no header, no trailer). Every block ends with a
    /// sync flush, including the last one, so the output is a byte-aligned, NON-final run of
    /// deflate blocks that can be spliced into another stream with
    /// [`append_slice`](Self::append_slice). The first block has no dictionary. An empty input
    /// gives an empty slice. End it with [`finish_slice`](Self::finish_slice).
    pub(crate) fn new_slice(inner: W, level: u32, threads: usize) -> io::Result<Self> {
        Self::slice_with_block_size(inner, level, threads, DEFAULT_BLOCK_SIZE)
    }

    /// [`new_slice`](Self::new_slice) with `block_size` bytes of input per block.
    pub(crate) fn slice_with_block_size(
        inner: W,
        level: u32,
        threads: usize,
        block_size: usize,
    ) -> io::Result<Self> {
        Self::build(inner, level, threads, block_size, Mode::Slice)
    }

    /// Ends a slice encoder: compresses what is buffered (ending it with a sync flush),
    /// waits for every thread, flushes the inner writer and returns it with the CRC-32 and the
    /// length of the slice's uncompressed text (spliced slices included), the `crc` and `len`
    /// to give [`append_slice`](Self::append_slice). On a gzip encoder this is an
    /// `InvalidInput` error and the output is discarded: use [`finish`](Self::finish).
    pub(crate) fn finish_slice(self) -> io::Result<(W, u32, u64)> {
        if self.mode != Mode::Slice {
            return Err(invalid_input(
                "finish_slice called on a gzip encoder; use finish".into(),
            ));
        }
        self.finish_stream()
    }

    /// Splices a raw deflate slice made by a slice encoder into this stream at the current
    /// position. `slice` yields the slice's bytes (what the slice encoder wrote); `crc` and
    /// `len` are the CRC-32 and length of its uncompressed text (what
    /// [`finish_slice`](Self::finish_slice) returned; `len` may exceed 4 GiB). Works on gzip
    /// and slice encoders alike.
    ///
    /// The pending partial block is ended first (sync flush). The slice is then read on this
    /// thread in chunks of up to 1 MiB into pooled blocks, which the writer thread writes in
    /// stream order (memory stays bounded, whatever the slice's size); this call returns once
    /// the whole slice is read and queued. The next block is compressed without a dictionary,
    /// since the decoder's window then holds the slice's text, which this encoder never saw.
    ///
    /// The slice is not decoded, but a non-empty one must end with a sync flush marker
    /// (`00 00 ff ff`), as every slice encoder's output does; this catches a truncated slice
    /// file. An error reading the slice, or a slice failing that check, stops the encoder like
    /// a write error: it is returned here and by every later call, `finish` included; so does
    /// a panic in the reader.
    /// `len == 0` with `crc != 0` is rejected with `InvalidInput` before anything happens.
    pub(crate) fn append_slice(
        &mut self,
        mut slice: impl Read,
        crc: u32,
        len: u64,
    ) -> io::Result<()> {
        self.check_error()?;
        if len == 0 && crc != 0 {
            return Err(invalid_input(format!(
                "a slice of empty text has CRC-32 0, got {crc:#010x}"
            )));
        }
        // End the pending block: the slice starts on the byte boundary of its sync flush.
        if let Some(block) = self.current.take() {
            if block.input_len() > 0 {
                self.dispatch(block, false)?;
            } else {
                // Primed with the old dictionary, and no input yet: back to the pool.
                self.shared.lock().free.push(block);
            }
        }
        // Back-references must never reach over the slice.
        self.window.clear();

        let chunk = self.block_size.min(SLICE_CHUNK);
        let mut tail = [0u8; 4];
        let mut slice_bytes: u64 = 0;
        loop {
            let mut block = self.take_free()?;
            block.data.clear();
            block.dict_len = 0;
            block.out.clear();
            block.out.resize(chunk, 0);
            // Part of the slice may be queued already: a panicking reader must stop the
            // encoder like a failing one, or a caller catching the panic could finish a
            // corrupt stream.
            let read =
                panic::catch_unwind(AssertUnwindSafe(|| read_full(&mut slice, &mut block.out)));
            let n = match read {
                Ok(Ok(n)) => n,
                Ok(Err(error)) => return Err(self.fail_now(error)),
                Err(payload) => {
                    return Err(self.fail_now(io::Error::other(format!(
                        "the gzip slice reader panicked: {}",
                        crate::error::panic_message(payload.as_ref())
                    ))))
                }
            };
            block.out.truncate(n);
            slice_bytes += n as u64;
            if n >= 4 {
                tail.copy_from_slice(&block.out[n - 4..]);
            } else {
                tail.rotate_left(n);
                tail[4 - n..].copy_from_slice(&block.out);
            }
            // A short chunk means the reader is exhausted.
            let end = n < chunk;
            if end {
                if slice_bytes > 0 && tail != SYNC_MARKER {
                    return Err(self.fail_now(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the deflate slice ({slice_bytes} bytes) does not end with a sync \
                             flush (truncated, or not made by a slice encoder?)"
                        ),
                    )));
                }
                // The whole slice's text rides on its last chunk.
                (block.crc, block.len) = (crc, len);
            } else {
                (block.crc, block.len) = (0, 0);
            }
            self.queue_raw(block)?;
            if end {
                break;
            }
        }
        self.bytes_in += len;
        Ok(())
    }

    /// Sends a chunk of a spliced slice (already in `block.out`) straight to the writer.
    fn queue_raw(&mut self, mut block: Block) -> io::Result<()> {
        block.seq = self.next_seq;
        block.last = false;
        block.finish = false;
        {
            let mut st = self.shared.lock();
            if st.abort {
                return Err(take_error(&mut st));
            }
            // The block came from the pool, so fewer than `done.len()` blocks are between
            // dispatch and write, and the slot of this `seq` is free (as for the workers).
            let slot = (block.seq % st.done.len() as u64) as usize;
            debug_assert!(st.done[slot].is_none());
            st.done[slot] = Some(block);
        }
        self.next_seq += 1;
        self.shared.writer_cv.notify_one();
        Ok(())
    }
}

/// Reads until `buf` is full or the reader is exhausted; returns the number of bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            // `min`: a reader claiming more than it was given must not cause a panic.
            Ok(n) => filled += n.min(buf.len() - filled),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::gzip::encoder::MIN_BLOCK_SIZE;
    use crate::output::gzip::testing::{
        check_gzip, crc32, trace_text, with_timeout, FailingWriter, Rng, SlowWriter,
    };
    use crate::output::gzip::WINDOW;
    use flate2::{bufread, Crc, Status};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    /// Compresses `text` with a slice encoder; returns (slice, crc, len).
    fn make_slice(
        text: &[u8],
        level: u32,
        threads: usize,
        block: usize,
        chunk: usize,
    ) -> (Vec<u8>, u32, u64) {
        let mut enc =
            ParallelGzEncoder::slice_with_block_size(Vec::new(), level, threads, block).unwrap();
        for part in text.chunks(chunk.max(1)) {
            enc.write_all(part).unwrap();
        }
        assert_eq!(enc.bytes_in(), text.len() as u64);
        let (slice, crc, len) = enc.finish_slice().unwrap();
        assert_eq!((crc, len), (crc32(text), text.len() as u64));
        (slice, crc, len)
    }

    /// Inflates a raw deflate slice: it must hold `text`, be consumed whole, and not end the
    /// deflate stream.
    fn check_slice(slice: &[u8], text: &[u8]) {
        assert!(slice.is_empty() == text.is_empty());
        if !slice.is_empty() {
            assert_eq!(slice[slice.len() - 4..], SYNC_MARKER);
        }
        let mut inflate = flate2::Decompress::new(false);
        let mut out = Vec::with_capacity(text.len() + 1024);
        let status = inflate
            .decompress_vec(slice, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_ne!(
            status,
            Status::StreamEnd,
            "the slice ends the deflate stream"
        );
        assert_eq!(inflate.total_in(), slice.len() as u64);
        assert!(out == text, "slice decodes to other text");
    }

    #[test]
    fn slices_are_raw_non_final_and_deterministic() {
        let text = trace_text(9 * MIN_BLOCK_SIZE + 123, 22);
        for len in [
            0,
            1,
            1000,
            MIN_BLOCK_SIZE,
            MIN_BLOCK_SIZE + 1,
            3 * MIN_BLOCK_SIZE,
            text.len(),
        ] {
            for level in [0, 1, 6, 9] {
                let (reference, ..) = make_slice(&text[..len], level, 1, MIN_BLOCK_SIZE, 5000);
                check_slice(&reference, &text[..len]);
                for threads in [2, 4] {
                    let (slice, ..) = make_slice(&text[..len], level, threads, MIN_BLOCK_SIZE, 777);
                    assert!(
                        slice == reference,
                        "len {len}, level {level}, {threads} threads"
                    );
                }
            }
        }
        // An empty input gives an empty slice; a flush on it writes nothing either.
        let mut enc = ParallelGzEncoder::new_slice(Vec::new(), 6, 2).unwrap();
        enc.flush().unwrap();
        assert_eq!(enc.finish_slice().unwrap(), (Vec::new(), 0, 0));
        // Flushes inside a slice keep it valid.
        let mut enc =
            ParallelGzEncoder::slice_with_block_size(Vec::new(), 6, 3, MIN_BLOCK_SIZE).unwrap();
        for part in text.chunks(50_000) {
            enc.write_all(part).unwrap();
            enc.flush().unwrap();
        }
        let (slice, crc, len) = enc.finish_slice().unwrap();
        check_slice(&slice, &text);
        assert_eq!((crc, len), (crc32(&text), text.len() as u64));
        // The wrong ending is refused.
        let slice_enc = ParallelGzEncoder::new_slice(Vec::new(), 6, 1).unwrap();
        assert_eq!(
            slice_enc.finish().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let gz_enc = ParallelGzEncoder::new(Vec::new(), 6, 1).unwrap();
        assert_eq!(
            gz_enc.finish_slice().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let check = |r: io::Result<ParallelGzEncoder<Vec<u8>>>| {
            assert_eq!(r.err().unwrap().kind(), io::ErrorKind::InvalidInput);
        };
        check(ParallelGzEncoder::new_slice(Vec::new(), 10, 1));
        check(ParallelGzEncoder::new_slice(Vec::new(), 6, 0));
        check(ParallelGzEncoder::slice_with_block_size(
            Vec::new(),
            6,
            1,
            MIN_BLOCK_SIZE - 1,
        ));
    }

    /// One step of building a stream: text through the encoder, a splice, or a flush.
    #[derive(Clone)]
    enum Step {
        Write(Vec<u8>),
        Splice(Arc<Vec<u8>>, u32, u64),
        Flush,
    }

    /// Runs `steps` through a gzip encoder and returns the output.
    fn run_steps(steps: &[Step], level: u32, threads: usize, block: usize) -> Vec<u8> {
        let mut enc =
            ParallelGzEncoder::with_block_size(Vec::new(), level, threads, block).unwrap();
        for step in steps {
            match step {
                Step::Write(text) => enc.write_all(text).unwrap(),
                Step::Splice(slice, crc, len) => enc
                    .append_slice(io::Cursor::new(slice.as_slice()), *crc, *len)
                    .unwrap(),
                Step::Flush => enc.flush().unwrap(),
            }
        }
        let expected: u64 = steps
            .iter()
            .map(|step| match step {
                Step::Write(text) => text.len() as u64,
                Step::Splice(_, _, len) => *len,
                Step::Flush => 0,
            })
            .sum();
        assert_eq!(enc.bytes_in(), expected);
        enc.finish().unwrap()
    }

    /// The text `steps` stand for.
    fn steps_text(steps: &[Step], slices_text: &[Vec<u8>]) -> Vec<u8> {
        let mut text = Vec::new();
        let mut next_slice = slices_text.iter();
        for step in steps {
            match step {
                Step::Write(t) => text.extend_from_slice(t),
                Step::Splice(..) => text.extend_from_slice(next_slice.next().unwrap()),
                Step::Flush => {}
            }
        }
        text
    }

    #[test]
    fn spliced_slices_make_one_member() {
        let start = Instant::now();
        let mut rng = Rng(23);
        let mut cases = 0;
        for k in 1..=5usize {
            for round in 0..6 {
                let total = rng.below(6 * MIN_BLOCK_SIZE as u64) as usize;
                let text = trace_text(total, 100 + cases);
                // k parts at arbitrary cuts (empty parts included), then text after.
                let mut cuts: Vec<usize> = (0..k)
                    .map(|_| match rng.below(4) {
                        0 => 0,
                        1 => total,
                        _ => rng.below(total as u64 + 1) as usize,
                    })
                    .collect();
                cuts.push(0);
                cuts.push(total);
                cuts.sort_unstable();
                let parts: Vec<&[u8]> = cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect();
                assert_eq!(parts.len(), k + 1);
                let mut steps = vec![Step::Write(parts[0].to_vec())];
                let mut slices_text = Vec::new();
                for part in &parts[1..k] {
                    let level = rng.below(10) as u32;
                    let threads = 1 + rng.below(4) as usize;
                    let block = [MIN_BLOCK_SIZE, 40_000, 64 * 1024][rng.below(3) as usize];
                    let chunk = 1 + rng.below(100_000) as usize;
                    let (slice, crc, len) = make_slice(part, level, threads, block, chunk);
                    check_slice(&slice, part);
                    slices_text.push(part.to_vec());
                    steps.push(Step::Splice(Arc::new(slice), crc, len));
                    if round % 2 == 1 {
                        // Text or a flush between splices.
                        steps.push(match rng.below(3) {
                            0 => Step::Flush,
                            1 => Step::Write(Vec::new()),
                            _ => {
                                let n = rng.below(2 * MIN_BLOCK_SIZE as u64) as usize;
                                Step::Write(trace_text(n, 500 + cases))
                            }
                        });
                    }
                }
                steps.push(Step::Write(parts[k].to_vec()));
                let full = steps_text(&steps, &slices_text);
                if round % 2 == 0 {
                    assert!(full == text);
                }
                let level = [1, 6, 9][rng.below(3) as usize];
                let reference = run_steps(&steps, level, 1, MIN_BLOCK_SIZE);
                check_gzip(&reference, &full);
                // Splicing keeps the output independent of the thread count.
                for threads in [2, 5] {
                    let gz = run_steps(&steps, level, threads, MIN_BLOCK_SIZE);
                    assert!(gz == reference, "k {k}, round {round}, {threads} threads");
                }
                cases += 1;
            }
        }
        eprintln!(
            "{cases} splice cases in {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }

    // Long because one table of splicing edge cases (empty, tiny, window-sized and
    // multi-block slices at every position) checked against one decoder, case by case.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn splice_edge_cases() {
        let text = trace_text(5 * MIN_BLOCK_SIZE, 24);
        let (a_text, b_text) = (&text[..70_000], &text[70_000..]);
        let (a, a_crc, a_len) = make_slice(a_text, 6, 2, MIN_BLOCK_SIZE, 10_000);
        let (b, b_crc, b_len) = make_slice(b_text, 1, 3, MIN_BLOCK_SIZE, 10_000);
        let (empty, empty_crc, empty_len) = make_slice(b"", 6, 2, MIN_BLOCK_SIZE, 1);
        assert!(empty.is_empty());
        let a = Arc::new(a);
        let b = Arc::new(b);
        let empty = Arc::new(empty);
        let splice_a = Step::Splice(Arc::clone(&a), a_crc, a_len);
        let splice_b = Step::Splice(Arc::clone(&b), b_crc, b_len);
        let splice_empty = Step::Splice(Arc::clone(&empty), empty_crc, empty_len);
        let w = |t: &[u8]| Step::Write(t.to_vec());
        // (name, steps, the text of each spliced slice in order)
        type Case = (&'static str, Vec<Step>, Vec<Vec<u8>>);
        let cases: Vec<Case> = vec![
            (
                "only a slice",
                vec![splice_a.clone()],
                vec![a_text.to_vec()],
            ),
            (
                "only an empty slice",
                vec![splice_empty.clone()],
                vec![vec![]],
            ),
            (
                "at the start",
                vec![splice_a.clone(), w(b"after")],
                vec![a_text.to_vec()],
            ),
            (
                "after a flush",
                vec![w(b"before"), Step::Flush, splice_a.clone(), w(b"after")],
                vec![a_text.to_vec()],
            ),
            (
                "twice in a row",
                vec![w(b"x"), splice_a.clone(), splice_b.clone(), w(b"y")],
                vec![a_text.to_vec(), b_text.to_vec()],
            ),
            (
                "the same slice twice",
                vec![splice_a.clone(), splice_a.clone()],
                vec![a_text.to_vec(), a_text.to_vec()],
            ),
            (
                "empty slices everywhere",
                vec![
                    splice_empty.clone(),
                    w(&text[..50_000]),
                    splice_empty.clone(),
                    splice_empty.clone(),
                    w(b"z"),
                    Step::Flush,
                    splice_empty.clone(),
                ],
                vec![vec![]; 4],
            ),
            (
                "after exactly full blocks",
                vec![w(&text[..2 * MIN_BLOCK_SIZE]), splice_b.clone(), w(b"end")],
                vec![b_text.to_vec()],
            ),
            (
                "then a flush and finish",
                vec![w(b"x"), splice_a.clone(), Step::Flush],
                vec![a_text.to_vec()],
            ),
        ];
        for (name, steps, slices_text) in &cases {
            let full = steps_text(steps, slices_text);
            for threads in [1, 3] {
                let gz = run_steps(steps, 6, threads, MIN_BLOCK_SIZE);
                check_gzip(&gz, &full);
                eprintln!("{name}: {} bytes -> {}", full.len(), gz.len());
            }
        }

        // Splicing into a slice encoder, then that slice into a gzip stream.
        let mut outer =
            ParallelGzEncoder::slice_with_block_size(Vec::new(), 6, 2, MIN_BLOCK_SIZE).unwrap();
        outer.append_slice(io::empty(), 0, 0).unwrap();
        outer.write_all(b"head ").unwrap();
        outer
            .append_slice(io::Cursor::new(a.to_vec()), a_crc, a_len)
            .unwrap();
        outer.write_all(&text[..40_000]).unwrap();
        outer
            .append_slice(io::Cursor::new(b.to_vec()), b_crc, b_len)
            .unwrap();
        let (nested, crc, len) = outer.finish_slice().unwrap();
        let mut nested_text = b"head ".to_vec();
        nested_text.extend_from_slice(a_text);
        nested_text.extend_from_slice(&text[..40_000]);
        nested_text.extend_from_slice(b_text);
        assert_eq!((crc, len), (crc32(&nested_text), nested_text.len() as u64));
        check_slice(&nested, &nested_text);
        let steps = [
            w(&text[..1000]),
            Step::Splice(Arc::new(nested), crc, len),
            w(&text[..1000]),
        ];
        let full = steps_text(&steps, &[nested_text]);
        check_gzip(&run_steps(&steps, 9, 2, MIN_BLOCK_SIZE), &full);

        // A `File`, the way the exporter passes slices.
        let path =
            std::env::temp_dir().join(format!("kinetrace-gzip-slice-{}", std::process::id()));
        std::fs::write(&path, a.as_slice()).unwrap();
        let mut enc = ParallelGzEncoder::new(Vec::new(), 6, 2).unwrap();
        enc.write_all(b"[").unwrap();
        enc.append_slice(std::fs::File::open(&path).unwrap(), a_crc, a_len)
            .unwrap();
        enc.write_all(b"]").unwrap();
        let gz = enc.finish().unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut full = b"[".to_vec();
        full.extend_from_slice(a_text);
        full.push(b']');
        check_gzip(&gz, &full);

        // Dropping an encoder with splices queued behind a slow writer does not hang.
        with_timeout(60, move || {
            let mut enc =
                ParallelGzEncoder::with_block_size(SlowWriter, 1, 2, MIN_BLOCK_SIZE).unwrap();
            enc.write_all(&text).unwrap();
            enc.append_slice(io::Cursor::new(a.to_vec()), a_crc, a_len)
                .unwrap();
            enc.write_all(&text).unwrap();
            let start = Instant::now();
            drop(enc);
            assert!(start.elapsed() < Duration::from_secs(5));
        });
    }

    #[test]
    fn no_dictionary_across_a_splice() {
        // After the splice the encoder writes text it wrote just before the slice. With its
        // old window as the dictionary it would find long matches there and encode them as
        // back-references whose distances skip the slice; the decoder's window holds the slice
        // (letters the rest never contains), so they would decode to slice bytes.
        let before = trace_text(100_000, 25);
        let mut rng = Rng(26);
        for slice_len in [1, 100, 5000, 20_000, WINDOW - 1, WINDOW, 50_000] {
            let slice_text: Vec<u8> = (0..slice_len).map(|_| b'A' + rng.below(26) as u8).collect();
            for level in [1, 6, 9] {
                let (slice, crc, len) = make_slice(&slice_text, level, 2, MIN_BLOCK_SIZE, 4096);
                for repeat in [10, 1000, 20_000, WINDOW] {
                    let again = before[before.len() - repeat..].to_vec();
                    let steps = [
                        Step::Write(before.clone()),
                        Step::Splice(Arc::new(slice.clone()), crc, len),
                        Step::Write(again),
                    ];
                    let full = steps_text(&steps, std::slice::from_ref(&slice_text));
                    let gz = run_steps(&steps, level, 2, MIN_BLOCK_SIZE);
                    check_gzip(&gz, &full);
                }
            }
        }
    }

    /// Yields `data`, failing with EIO (or `Interrupted`, which is retried) at `fail_at`.
    struct FailingReader {
        data: Vec<u8>,
        pos: usize,
        fail_at: usize,
        interrupted: bool,
    }

    impl Read for FailingReader {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.pos == self.fail_at {
                if self.interrupted {
                    self.interrupted = false;
                    return Err(io::ErrorKind::Interrupted.into());
                }
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let end = self.fail_at.min(self.data.len()).min(self.pos + buf.len());
            let n = end - self.pos;
            buf[..n].copy_from_slice(&self.data[self.pos..end]);
            self.pos = end;
            Ok(n)
        }
    }

    // Long because every way a slice can be refused, each a few lines against one encoder
    // set-up, read in order.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn slice_errors_come_back() {
        let text = trace_text(20 * MIN_BLOCK_SIZE, 27);
        let (slice, crc, len) = make_slice(&text, 0, 2, MIN_BLOCK_SIZE, 1 << 20);
        let slice = Arc::new(slice);
        // The reader fails at the start, mid-chunk, at a chunk boundary and just before EOF;
        // each with a fast and a slow inner writer, so the pool may be full when it happens.
        for fail_at in [
            0,
            10,
            MIN_BLOCK_SIZE,
            3 * MIN_BLOCK_SIZE + 5,
            slice.len() - 1,
        ] {
            for slow in [false, true] {
                let slice = Arc::clone(&slice);
                let text = text.clone();
                with_timeout(60, move || {
                    let inner: Box<dyn Write + Send> = if slow {
                        Box::new(SlowWriter)
                    } else {
                        Box::new(io::sink())
                    };
                    let mut enc =
                        ParallelGzEncoder::with_block_size(inner, 6, 2, MIN_BLOCK_SIZE).unwrap();
                    enc.write_all(&text[..100_000]).unwrap();
                    let reader = FailingReader {
                        data: slice.to_vec(),
                        pos: 0,
                        fail_at,
                        interrupted: false,
                    };
                    let e = enc.append_slice(reader, crc, len).unwrap_err();
                    assert_eq!(e.raw_os_error(), Some(libc::EIO), "fail at {fail_at}");
                    // Later calls keep reporting it, and nothing hangs.
                    let e = enc.write_all(b"more").unwrap_err();
                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                    let e = enc.flush().unwrap_err();
                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                    let e = enc
                        .append_slice(io::Cursor::new(slice.to_vec()), crc, len)
                        .unwrap_err();
                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                    let e = enc.finish().err().unwrap();
                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                });
            }
        }
        // A panicking reader.
        struct PanickingReader(usize);
        impl Read for PanickingReader {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    panic!("injected reader panic");
                }
                let n = buf.len().min(self.0);
                buf[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        for before_panic in [0, 100, 3 * MIN_BLOCK_SIZE] {
            let mut enc =
                ParallelGzEncoder::with_block_size(Vec::new(), 6, 2, MIN_BLOCK_SIZE).unwrap();
            enc.write_all(b"x").unwrap();
            let e = enc
                .append_slice(PanickingReader(before_panic), 1, 1)
                .unwrap_err();
            assert!(e.to_string().contains("slice reader panicked"), "{e}");
            assert!(enc.finish().unwrap_err().to_string().contains("panic"));
        }

        // `Interrupted` is retried, not an error.
        let reader = FailingReader {
            data: slice.to_vec(),
            pos: 0,
            fail_at: 1000,
            interrupted: true,
        };
        let mut enc = ParallelGzEncoder::with_block_size(Vec::new(), 6, 2, MIN_BLOCK_SIZE).unwrap();
        let e = enc.append_slice(reader, crc, len).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO)); // the real error after the retry
        drop(enc);

        // A truncated slice (a worker that died mid-write) is refused.
        for cut in [1, 2, 100, 3 * MIN_BLOCK_SIZE] {
            let truncated = slice[..slice.len() - cut].to_vec();
            let mut enc = ParallelGzEncoder::new(Vec::new(), 6, 2).unwrap();
            enc.write_all(b"x").unwrap();
            let e = enc
                .append_slice(io::Cursor::new(truncated), crc, len)
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert_eq!(enc.finish().unwrap_err().kind(), io::ErrorKind::InvalidData);
        }

        // An impossible CRC for an empty text is refused before anything happens: the encoder
        // stays usable.
        let mut enc = ParallelGzEncoder::new(Vec::new(), 6, 2).unwrap();
        enc.write_all(b"abc").unwrap();
        let e = enc.append_slice(io::empty(), 1, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        enc.write_all(b"def").unwrap();
        check_gzip(&enc.finish().unwrap(), b"abcdef");

        // An inner writer failing while a slice is being spliced.
        with_timeout(60, move || {
            let inner = FailingWriter {
                written: 0,
                limit: 3 * MIN_BLOCK_SIZE,
                fail_flush: false,
            };
            let mut enc = ParallelGzEncoder::with_block_size(inner, 6, 2, MIN_BLOCK_SIZE).unwrap();
            let mut result = enc.write_all(&text[..1000]);
            for _ in 0..50 {
                if result.is_err() {
                    break;
                }
                result = enc.append_slice(io::Cursor::new(slice.to_vec()), crc, len);
            }
            assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
            assert_eq!(
                enc.finish().err().unwrap().raw_os_error(),
                Some(libc::ENOSPC)
            );
        });
    }

    /// CRC-32 of `n` zero bytes, computed byte by byte through `flate2::Crc` (not with
    /// `crc32_combine`).
    fn crc32_of_zeros(crc: &mut Crc, mut n: u64) {
        let zeros = vec![0u8; 1 << 20];
        while n > 0 {
            let k = n.min(zeros.len() as u64) as usize;
            crc.update(&zeros[..k]);
            n -= k as u64;
        }
    }

    /// A spliced slice whose text is longer than 4 GiB: the slice's bytes are left out (an
    /// empty reader), only its CRC and length are folded, and the trailer is checked against a
    /// CRC computed straight through the whole text (about 0.5 s in release mode).
    #[test]
    #[cfg_attr(
        debug_assertions,
        ignore = "computes a CRC-32 over more than 4 GiB; run with --release"
    )]
    fn spliced_length_above_4_gib() {
        let start = Instant::now();
        let slice_len: u64 = (1 << 32) + 7 * (1 << 20) + 321;
        let mut slice_crc = Crc::new();
        crc32_of_zeros(&mut slice_crc, slice_len);
        let (before, after) = (trace_text(100_000, 28), trace_text(50_000, 29));
        let mut enc = ParallelGzEncoder::with_block_size(Vec::new(), 6, 2, MIN_BLOCK_SIZE).unwrap();
        enc.write_all(&before).unwrap();
        enc.append_slice(io::empty(), slice_crc.sum(), slice_len)
            .unwrap();
        enc.write_all(&after).unwrap();
        let total = before.len() as u64 + slice_len + after.len() as u64;
        assert_eq!(enc.bytes_in(), total);
        let gz = enc.finish().unwrap();
        let mut straight = Crc::new();
        straight.update(&before);
        crc32_of_zeros(&mut straight, slice_len);
        straight.update(&after);
        let trailer = &gz[gz.len() - 8..];
        assert_eq!(trailer[..4], straight.sum().to_le_bytes());
        assert_eq!(trailer[4..], (total as u32).to_le_bytes());
        assert_eq!(total as u32, 7 * (1 << 20) + 321 + 150_000);
        // Same through a slice encoder (finish_slice's length is 64-bit).
        let mut enc = ParallelGzEncoder::new_slice(Vec::new(), 6, 2).unwrap();
        enc.write_all(&before).unwrap();
        enc.append_slice(io::empty(), slice_crc.sum(), slice_len)
            .unwrap();
        enc.write_all(&after).unwrap();
        let (_, crc, len) = enc.finish_slice().unwrap();
        assert_eq!((crc, len), (straight.sum(), total));
        eprintln!("4 GiB splice test: {:.2} s", start.elapsed().as_secs_f64());
    }

    /// End to end: a real slice of more than 4 GiB of text (zeros and trace text) spliced
    /// between text, decoded by flate2's single-member decoder, which checks CRC-32 and ISIZE.
    #[test]
    #[ignore = "compresses and decodes more than 4 GiB; run with --release --ignored"]
    fn real_slice_above_4_gib() {
        let start = Instant::now();
        let threads = thread::available_parallelism().map_or(2, |n| n.get());
        let mut chunk = vec![0u8; 1 << 20];
        chunk[..100_000].copy_from_slice(&trace_text(100_000, 30));
        let slice_len: u64 = (1 << 32) + 3 * (1 << 20) + 999;
        let mut enc = ParallelGzEncoder::new_slice(Vec::new(), 1, threads).unwrap();
        let mut left = slice_len;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            enc.write_all(&chunk[..n]).unwrap();
            left -= n as u64;
        }
        let (slice, crc, len) = enc.finish_slice().unwrap();
        assert_eq!(len, slice_len);
        let compressed = start.elapsed().as_secs_f64();
        let (before, after) = (trace_text(70_000, 31), trace_text(90_000, 32));
        let mut enc = ParallelGzEncoder::new(Vec::new(), 6, threads).unwrap();
        enc.write_all(&before).unwrap();
        enc.append_slice(io::Cursor::new(slice), crc, len).unwrap();
        enc.write_all(&after).unwrap();
        let gz = enc.finish().unwrap();
        // Decode, comparing as it goes, without holding 4 GiB.
        let mut decoder = bufread::GzDecoder::new(gz.as_slice());
        let slice_end = before.len() as u64 + slice_len;
        let mut pos: u64 = 0;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = decoder.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            for &byte in &buf[..n] {
                let want = if pos < before.len() as u64 {
                    before[pos as usize]
                } else if pos < slice_end {
                    chunk[((pos - before.len() as u64) % chunk.len() as u64) as usize]
                } else {
                    after[(pos - slice_end) as usize]
                };
                assert_eq!(byte, want, "byte {pos}");
                pos += 1;
            }
        }
        assert!(decoder.into_inner().is_empty());
        assert_eq!(pos, before.len() as u64 + slice_len + after.len() as u64);
        eprintln!(
            "real 4 GiB splice: slice {compressed:.1} s, total {:.1} s, {} gz bytes",
            start.elapsed().as_secs_f64(),
            gz.len()
        );
    }
}
