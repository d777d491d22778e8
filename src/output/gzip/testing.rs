//! Helpers shared by the gzip tests: trace-like text, reference encodings and checks, and
//! writers that fail, panic or crawl.

use std::io::{self, Read, Write};
use std::panic;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use flate2::{bufread, Crc};

use super::ParallelGzEncoder;

pub(super) const SMALL_BLOCK: usize = 64 * 1024;

/// A small deterministic PRNG (splitmix64).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Trace-like JSON text, `len` bytes.
pub(super) fn trace_text(len: usize, seed: u64) -> Vec<u8> {
    const NAMES: [&str; 8] = [
        "aten::add",
        "aten::mul",
        "aten::linear",
        "aten::addmm",
        "cudaLaunchKernel",
        "aten::empty",
        "aten::copy_",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    ];
    const CATS: [&str; 4] = ["cpu_op", "cuda_runtime", "kernel", "user_annotation"];
    let mut rng = Rng(seed);
    let mut out = String::with_capacity(len + 512);
    let mut ts = 1_700_000_000_000.0f64;
    let mut id = 1u64;
    while out.len() < len {
        ts += rng.below(5000) as f64 / 1000.0;
        id += 1 + rng.below(3);
        let name = NAMES[rng.below(NAMES.len() as u64) as usize];
        let cat = CATS[rng.below(CATS.len() as u64) as usize];
        let tid = 100 + rng.below(4);
        let dur = rng.below(100_000) as f64 / 1000.0;
        out.push_str(&format!(
            "{{\"ph\":\"X\",\"cat\":\"{cat}\",\"name\":\"{name}\",\"pid\":4242,\"tid\":{tid},\
             \"ts\":{ts:.3},\"dur\":{dur:.3},\"args\":{{\"External id\": {id}, \
             \"Record function id\": {}, \"Ev Idx\": {}}}}},\n",
            id + 7,
            id * 2
        ));
    }
    out.truncate(len);
    out.into_bytes()
}

pub(super) fn crc32(data: &[u8]) -> u32 {
    let mut crc = Crc::new();
    crc.update(data);
    crc.sum()
}

/// Runs `f` on its own thread and fails the test if it does not end within `secs`.
pub(super) fn with_timeout<T: Send + 'static>(
    secs: u64,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(value) => {
            handle.join().unwrap();
            value
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {secs} s (hang?)"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The closure panicked: re-raise its panic.
            panic::resume_unwind(handle.join().unwrap_err())
        }
    }
}

pub(super) fn encode_chunks(
    data: &[u8],
    level: u32,
    threads: usize,
    block: usize,
    chunk: usize,
) -> Vec<u8> {
    let mut enc = ParallelGzEncoder::with_block_size(Vec::new(), level, threads, block).unwrap();
    for part in data.chunks(chunk.max(1)) {
        enc.write_all(part).unwrap();
    }
    assert_eq!(enc.bytes_in(), data.len() as u64);
    let out_before = enc.bytes_out();
    let out = enc.finish().unwrap();
    assert!(out_before <= out.len() as u64);
    out
}

pub(super) fn encode(data: &[u8], level: u32, threads: usize, block: usize) -> Vec<u8> {
    encode_chunks(data, level, threads, block, 1 << 20)
}

/// Checks that `gz` is exactly one gzip member holding `data`.
pub(super) fn check_gzip(gz: &[u8], data: &[u8]) {
    assert!(gz.len() >= 18, "too short: {} bytes", gz.len());
    assert_eq!(&gz[..3], &[0x1f, 0x8b, 8]);
    // Single-member decoder: it must yield everything and end exactly at the end.
    let mut decoder = bufread::GzDecoder::new(gz);
    let mut decoded = Vec::with_capacity(data.len());
    decoder.read_to_end(&mut decoded).unwrap();
    assert!(
        decoded == data,
        "decoded data differs ({} vs {} bytes)",
        decoded.len(),
        data.len()
    );
    assert!(
        decoder.into_inner().is_empty(),
        "bytes after the first member"
    );
    // The raw deflate stream ends exactly before the trailer.
    let body = &gz[10..gz.len() - 8];
    let mut inflate = bufread::DeflateDecoder::new(body);
    let mut raw = Vec::with_capacity(data.len());
    inflate.read_to_end(&mut raw).unwrap();
    assert!(raw == data);
    assert!(
        inflate.into_inner().is_empty(),
        "data after the end of the deflate stream"
    );
    let trailer = &gz[gz.len() - 8..];
    assert_eq!(trailer[..4], crc32(data).to_le_bytes());
    assert_eq!(trailer[4..], (data.len() as u32).to_le_bytes());
}

/// Accepts `limit` bytes, then fails every write with ENOSPC (or fails `flush`).
pub(super) struct FailingWriter {
    pub(super) written: usize,
    pub(super) limit: usize,
    pub(super) fail_flush: bool,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written >= self.limit {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let n = buf.len().min(self.limit - self.written);
        self.written += n;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.fail_flush {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "flush failed"))
        } else {
            Ok(())
        }
    }
}

/// A writer that writes slowly, so that the pool fills up.
pub(super) struct SlowWriter;

impl Write for SlowWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        thread::sleep(Duration::from_millis(20));
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
