//! The parallel gzip encoder: multithreaded compression that writes exactly one gzip member
//! (pigz's scheme).
//!
//! Several trace readers stop after the first member of a gzip file, so the output must be one
//! member even though it is compressed in parallel. The input is cut into *blocks*; every block
//! is raw-deflated on its own by a pool of worker threads, primed with the previous 32 KiB of
//! input as the dictionary (so the cut costs almost nothing in size), and ended with a
//! byte-aligning sync flush, except the last block, which ends the deflate stream. Byte-aligned
//! block outputs concatenate into one valid deflate stream. Each worker also computes its
//! block's CRC-32; a single writer thread writes the header, the block outputs in order and the
//! trailer, folding the CRCs together with `crc32_combine`.
//!
//! Memory stays bounded whatever the input size: the encoder owns a fixed pool of
//! `2 * threads + 2` blocks (input + output buffers), and `write` waits when none is free.
//!
//! The bytes produced depend only on the input, the level, the block size and where `flush` was
//! called, never on the number of threads or on scheduling.
//!
//! # Slices and splicing (multi-process export)
//!
//! A *slice* is a worker process's part of the trace. A *slice encoder*
//! ([`ParallelGzEncoder::new_slice`]) compresses it to raw deflate only: no header, no trailer,
//! and every block, the last one included, ends with a sync flush, so its output is a
//! byte-aligned, non-final run of deflate blocks that refers to nothing before its own start.
//! [`ParallelGzEncoder::finish_slice`] returns the CRC-32 and length of its input.
//!
//! [`ParallelGzEncoder::append_slice`] splices such a slice into a stream: the pending block is
//! sync-flushed, the slice's bytes are read in chunks into pooled blocks on the caller's thread
//! and queued for the writer thread in stream order like compressed blocks (they need no
//! worker), its CRC-32 and length are folded into the trailer with a 64-bit-length
//! `crc32_combine`, and the next block gets no dictionary: the decoder's window then holds the
//! slice's text, which this encoder never saw. Output with splices is as deterministic as
//! without: it depends on the input, the slices and where they were spliced, not on threads.
//!
//! ```text
//! writer thread:  header | block 0 | block 1 (sync) | slice chunk | slice chunk | block 2 (no dict) | ... | trailer
//! ```
//!
//! # Layout
//!
//! - `encoder`: [`ParallelGzEncoder`], the API (`write`, `flush`, `finish`) and the producer's
//!   side: filling blocks and dispatching them;
//! - `slice`: slice encoders and splicing;
//! - `pool`: the blocks and the state the threads share under one lock;
//! - `worker`: the deflate worker threads;
//! - `writer`: the ordered writer thread, the gzip header and trailer;
//! - `crc`: the CRC-32 algebra that folds per-block CRCs of any length.

mod crc;
mod encoder;
mod pool;
mod slice;
mod worker;
mod writer;

#[cfg(test)]
mod testing;

pub(crate) use encoder::ParallelGzEncoder;

/// Default amount of input compressed as one independent block.
///
/// With the 32 KiB dictionary a cut costs only a few bytes (the sync marker and a fresh Huffman
/// table). Measured on trace-like JSON at level 6: +0.37% over single-stream gzip at 64 KiB
/// blocks, +0.14% at 128 KiB, +0.02% at 1 MiB, +0.005% at 2 MiB. 1 MiB gives every thread work
/// once a few MiB have arrived and keeps the pool at about `(2 * threads + 2) * 1.3 MiB`.
pub(crate) const DEFAULT_BLOCK_SIZE: usize = 1 << 20;

/// The deflate window: how much earlier input a block may refer to.
pub(super) const WINDOW: usize = 32 * 1024;
