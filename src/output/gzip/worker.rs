//! The deflate workers: threads that take filled blocks from the pool's `jobs`, raw-deflate
//! each on its own (primed with its dictionary, ended with a sync flush or, for the stream's
//! last block, a final block), compute its CRC-32 and put it in `done` for the writer.
//!
//! A block's output depends on the block alone (its dictionary, input, level and whether it
//! ends the stream), never on which worker compressed it or what that worker did before:
//! that is what makes the encoder's output independent of the thread count.

use std::io;
use std::panic::{self, AssertUnwindSafe};
#[cfg(test)]
use std::sync::atomic::Ordering;

use flate2::{Compress, Compression, Crc, FlushCompress, Status};

use super::pool::{panic_error, Block, Shared};

/// Output space given to each call into the compressor.
const OUT_CHUNK: usize = 64 * 1024;

/// Runs one worker until the encoder closes or stops; a panic becomes the encoder's error.
pub(super) fn worker_thread(shared: &Shared, level: u32) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| worker_loop(shared, level))) {
        shared.fail(panic_error("deflate worker", payload.as_ref()));
    }
}

fn worker_loop(shared: &Shared, level: u32) {
    let level = Compression::new(level);
    loop {
        let mut block = {
            let mut st = shared.lock();
            loop {
                if st.abort {
                    return;
                }
                if let Some(block) = st.jobs.pop_front() {
                    break block;
                }
                if st.closing {
                    return;
                }
                st = Shared::wait(&shared.worker_cv, st);
            }
        };
        #[cfg(test)]
        if block.seq == shared.panic_at_seq.load(Ordering::Relaxed) {
            panic!("injected test panic at block {}", block.seq);
        }
        if let Err(error) = compress_block(level, &mut block) {
            shared.fail(error);
            return;
        }
        {
            let mut st = shared.lock();
            let slot = (block.seq % st.done.len() as u64) as usize;
            debug_assert!(st.done[slot].is_none());
            st.done[slot] = Some(block);
        }
        shared.writer_cv.notify_one();
    }
}

/// Raw-deflates one block into `block.out` and computes its CRC.
fn compress_block(level: Compression, block: &mut Block) -> io::Result<()> {
    let Block {
        data,
        dict_len,
        out,
        crc,
        len,
        finish,
        ..
    } = block;
    let (dict, input) = data.split_at(*dict_len);
    let mut input_crc = Crc::new();
    input_crc.update(input);
    *crc = input_crc.sum();
    *len = input.len() as u64;
    out.clear();
    if input.is_empty() && !*finish {
        // Only a slice encoder's last block can be empty without ending the stream: the
        // blocks before it already end byte-aligned, so it needs no bytes at all.
        return Ok(());
    }

    // A fresh compressor per block, not a reused one: zlib-rs's `reset` keeps the old window
    // and hash chains, and they change which matches are found, so a reused compressor's output
    // would depend on which blocks that worker compressed before. A new one is zeroed and costs
    // a few microseconds, against milliseconds to compress a block.
    let mut deflate = Compress::new(level, false);
    if !dict.is_empty() {
        deflate.set_dictionary(dict).map_err(io::Error::other)?;
    }
    let flush = if *finish {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    // zlib-rs's output depends on how much output space each call gets, so every call gets
    // exactly OUT_CHUNK bytes, whatever the capacity of this pooled buffer: the output is then
    // a function of the block alone, not of which buffer it landed in.
    let mut rest = input;
    loop {
        let start = out.len();
        out.resize(start + OUT_CHUNK, 0);
        let (in_before, out_before) = (deflate.total_in(), deflate.total_out());
        let status = deflate.compress(rest, &mut out[start..], flush);
        let produced = (deflate.total_out() - out_before) as usize;
        out.truncate(start + produced);
        let status = status.map_err(io::Error::other)?;
        let consumed = (deflate.total_in() - in_before) as usize;
        rest = &rest[consumed..];
        let complete = if *finish {
            status == Status::StreamEnd
        } else {
            // zlib's contract: output space left over means the flush is complete.
            rest.is_empty() && produced < OUT_CHUNK
        };
        if complete {
            return Ok(());
        }
        if consumed == 0 && produced == 0 {
            // Cannot happen with OUT_CHUNK bytes of space; never spin.
            return Err(io::Error::other("deflate made no progress"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::gzip::testing::{crc32, trace_text};
    use crate::output::gzip::WINDOW;

    /// A block of `data` as the producer would fill it.
    fn block_of(data: &[u8], start: usize, len: usize, last: bool) -> Block {
        let dict_start = start.saturating_sub(WINDOW);
        let mut block = Block::new();
        block.data.extend_from_slice(&data[dict_start..start + len]);
        block.dict_len = start - dict_start;
        block.last = last;
        block.finish = last;
        block
    }

    #[test]
    fn block_output_depends_only_on_the_block() {
        // zlib-rs's output depends on the output space given to each call and (with a reset
        // compressor) on what it compressed before; neither may leak into a block's output.
        // With a compressor reused through `reset`, block 9 of this text differs after block 2.
        let bs = 1 << 20;
        let data = trace_text(10 * bs, 18);
        for level in [1, 6] {
            let level = Compression::new(level);
            for order in [[2, 9], [9, 2]] {
                for i in order {
                    let mut a = block_of(&data, i * bs, bs, false);
                    compress_block(level, &mut a).unwrap();
                    // A pooled block whose buffers are bigger from earlier use.
                    let mut b = block_of(&data, i * bs, bs, false);
                    b.out.reserve(3 * bs);
                    compress_block(level, &mut b).unwrap();
                    assert!(a.out == b.out, "block {i}");
                    assert_eq!(a.crc, crc32(&data[i * bs..(i + 1) * bs]));
                    assert_eq!(a.len, bs as u64);
                }
            }
        }
        // Short blocks, compressed after long ones and alone.
        let level = Compression::new(6);
        let mut alone = block_of(&data, 5 * bs + 1000, 300, true);
        compress_block(level, &mut alone).unwrap();
        let mut long = block_of(&data, bs, bs, false);
        compress_block(level, &mut long).unwrap();
        let mut after = block_of(&data, 5 * bs + 1000, 300, true);
        compress_block(level, &mut after).unwrap();
        assert!(alone.out == after.out);
    }
}
