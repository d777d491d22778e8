//! The ordered writer: one thread that writes the gzip header, every block's output in stream
//! order (`seq`), whichever worker finished first, and the trailer, folding the blocks' CRCs
//! together as it goes. It also answers the producer's flush requests and hands written
//! blocks back to the pool.

use std::io::{self, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use super::crc::crc32_combine;
use super::pool::{panic_error, Block, Shared};

/// The 10-byte gzip header: deflate, no name, no mtime, OS unknown.
pub(super) fn gzip_header(level: u32) -> [u8; 10] {
    // XFL as zlib sets it: 2 = best compression, 4 = fastest.
    let xfl = match level {
        9 => 2,
        0 | 1 => 4,
        _ => 0,
    };
    [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255]
}

/// The 8-byte gzip trailer: CRC-32 and the input length modulo 2^32, little-endian.
fn gzip_trailer(crc: u32, total_len: u64) -> [u8; 8] {
    let mut trailer = [0; 8];
    trailer[..4].copy_from_slice(&crc.to_le_bytes());
    // ISIZE is the length modulo 2^32: the truncation is the format.
    trailer[4..].copy_from_slice(&(total_len as u32).to_le_bytes());
    trailer
}

/// Runs the writer; `header` is `None` for a slice (no header, no trailer).
pub(super) fn writer_thread<W: Write>(
    shared: &Shared,
    mut inner: W,
    header: Option<[u8; 10]>,
) -> Option<(W, u32, u64)> {
    let result =
        match panic::catch_unwind(AssertUnwindSafe(|| write_loop(shared, &mut inner, header))) {
            Ok(Ok(Some((crc, len)))) => Some((inner, crc, len)),
            Ok(Ok(None)) => None,
            Ok(Err(error)) => {
                shared.fail(error);
                None
            }
            Err(payload) => {
                shared.fail(panic_error("writer", payload.as_ref()));
                None
            }
        };
    shared.lock().writer_done = true;
    shared.producer_cv.notify_all();
    result
}

/// Writes the header, the block outputs in order and the trailer (the header and trailer
/// only with a `header`). Returns the CRC-32 and length of the whole text, or `Ok(None)`
/// when stopped before the end.
fn write_loop<W: Write>(
    shared: &Shared,
    inner: &mut W,
    mut header: Option<[u8; 10]>,
) -> io::Result<Option<(u32, u64)>> {
    enum Task {
        Write(Block),
        Flush,
    }
    let trailer = header.is_some();
    let mut crc: u32 = 0;
    let mut total_len: u64 = 0;
    // The header is written with the first block, so an encoder dropped early writes nothing.
    let put = |inner: &mut W, bytes: &[u8]| -> io::Result<()> {
        inner.write_all(bytes)?;
        shared
            .bytes_out
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    };
    loop {
        let task = {
            let mut st = shared.lock();
            loop {
                if st.abort {
                    return Ok(None);
                }
                let slot = (st.next_write % st.done.len() as u64) as usize;
                if let Some(block) = st.done[slot].take() {
                    debug_assert_eq!(block.seq, st.next_write);
                    break Task::Write(block);
                }
                if st.flush_to.is_some_and(|to| st.next_write >= to) {
                    break Task::Flush;
                }
                st = Shared::wait(&shared.writer_cv, st);
            }
        };
        match task {
            Task::Flush => {
                inner.flush()?;
                shared.lock().flush_to = None;
                shared.producer_cv.notify_all();
            }
            Task::Write(mut block) => {
                if let Some(header) = header.take() {
                    put(inner, &header)?;
                }
                put(inner, &block.out)?;
                crc = crc32_combine(crc, block.crc, block.len);
                total_len += block.len;
                let last = block.last;
                block.out.clear();
                {
                    let mut st = shared.lock();
                    st.next_write += 1;
                    st.free.push(block);
                }
                shared.producer_cv.notify_all();
                if last {
                    if trailer {
                        put(inner, &gzip_trailer(crc, total_len))?;
                    }
                    inner.flush()?;
                    return Ok(Some((crc, total_len)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::gzip::testing::{crc32, trace_text, SMALL_BLOCK};
    use flate2::Crc;

    #[test]
    fn trailer_wraps_the_length() {
        let trailer = gzip_trailer(0xdead_beef, (1 << 32) + 5);
        assert_eq!(trailer, [0xef, 0xbe, 0xad, 0xde, 5, 0, 0, 0]);
        assert_eq!(gzip_trailer(1, u64::MAX)[4..], [0xff; 4]);
        assert_eq!(gzip_trailer(1, 1 << 33)[4..], [0; 4]);
        // CRC folding over more than 4 GiB: combining per-block CRCs whose total length passes
        // 2^32 equals CRC-32 computed straight through (checked on a smaller scale with the
        // same folding code path).
        let data = trace_text(3 * SMALL_BLOCK + 3, 15);
        let mut folded = Crc::new();
        for part in data.chunks(SMALL_BLOCK) {
            let mut c = Crc::new();
            c.update(part);
            folded.combine(&c);
        }
        assert_eq!(folded.sum(), crc32(&data));
    }
}
