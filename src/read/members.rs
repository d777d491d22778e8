//! Gzip member decoding: the decompressed bytes of a trace file that is plain JSON or gzip
//! with any number of members (recognised by the magic bytes, not the name), counting the
//! members and naming data after the last one that is not a member.
//!
//! Inflating is serial (a gzip member cannot be entered in the middle), so on a machine
//! with a core to spare [`Source::inflate_ahead`] moves it to a thread of its own, a few
//! blocks ahead of the reader: the reader's scanning then overlaps the inflating, and a
//! `.json.gz` is read at about the speed it inflates instead of at the two speeds' sum.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;

use flate2::bufread::GzDecoder;

use crate::json::lexer::Decoded;

/// The two bytes every gzip member starts with.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The decompressed bytes of a trace file: plain, or gzip with any number of members
/// (counted, so the summary can warn about readers that stop after the first).
pub(crate) enum Source<R: BufRead> {
    Plain(R),
    Gzip(Box<Members<R>>),
    /// Gzip inflated on a thread of its own ([`Source::inflate_ahead`]).
    Inflating(Box<Inflated>),
}

impl<R: BufRead> Source<R> {
    /// Looks at the first byte: gzip if it starts the gzip magic (JSON never starts with
    /// 0x1f, a control character), plain otherwise.
    pub(crate) fn detect(mut reader: R) -> io::Result<Self> {
        let head = loop {
            match reader.fill_buf() {
                Ok(head) => break head,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if head.first() == Some(&GZIP_MAGIC[0]) {
            Ok(Source::Gzip(Box::new(Members {
                decoder: Some(GzDecoder::new(reader)),
                members: 1,
            })))
        } else {
            Ok(Source::Plain(reader))
        }
    }

    /// Gzip members started so far (0 for plain input).
    pub(crate) fn members(&self) -> u32 {
        match self {
            Source::Plain(_) => 0,
            Source::Gzip(m) => m.members,
            Source::Inflating(i) => i.members.load(Ordering::Acquire),
        }
    }

    /// Whether the bytes are decompressed from gzip.
    pub(crate) fn is_gzip(&self) -> bool {
        !matches!(self, Source::Plain(_))
    }
}

impl<R: BufRead + Send + 'static> Source<R> {
    /// Gzip input inflated on a thread of its own, at most [`BLOCKS_AHEAD`] blocks of
    /// [`BLOCK`] bytes ahead of the reader; plain input as it is. The bytes, the errors
    /// (each where the sequential read would meet it) and the member count are those of
    /// the sequential read. The thread ends at the end of the input, at an error, or when
    /// the reader is dropped.
    pub(crate) fn inflate_ahead(self) -> Self {
        let Source::Gzip(members) = self else {
            return self;
        };
        let (blocks, received) = mpsc::sync_channel(BLOCKS_AHEAD);
        let (spare, spares) = mpsc::sync_channel(BLOCKS_AHEAD + 2);
        let count = Arc::new(AtomicU32::new(members.members));
        let counted = Arc::clone(&count);
        let spawned = std::thread::Builder::new()
            .name("kinetrace-inflate".into())
            .spawn(move || inflate_blocks(*members, &blocks, &spares, &counted));
        match spawned {
            Ok(_) => Source::Inflating(Box::new(Inflated {
                blocks: received,
                spare,
                block: Vec::new(),
                pos: 0,
                members: count,
                ended: false,
            })),
            // No thread to be had: the caller gets an error it can name, as for any read.
            Err(e) => Source::Inflating(Box::new(Inflated::failed(e, count))),
        }
    }
}

/// Bytes per block inflated ahead.
pub(crate) const BLOCK: usize = 256 << 10;

/// Blocks inflated ahead of the reader, at most (memory: about `BLOCKS_AHEAD + 3` blocks).
const BLOCKS_AHEAD: usize = 4;

/// The inflating thread: fills blocks from `members` (reusing those the reader hands back
/// on `spares`) and sends them, then the error or the empty block that ends the input.
fn inflate_blocks<R: BufRead>(
    mut members: Members<R>,
    blocks: &SyncSender<io::Result<Vec<u8>>>,
    spares: &Receiver<Vec<u8>>,
    count: &AtomicU32,
) {
    loop {
        let mut block = spares.try_recv().unwrap_or_default();
        block.resize(BLOCK, 0);
        let mut filled = 0;
        let failure = loop {
            match members.read(&mut block[filled..]) {
                Ok(0) => break None,
                Ok(n) => {
                    filled += n;
                    if filled == BLOCK {
                        break None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        block.truncate(filled);
        count.store(members.members, Ordering::Release);
        let last = filled < BLOCK || failure.is_some();
        if filled > 0 && blocks.send(Ok(block)).is_err() {
            return; // the reader is gone
        }
        if last {
            let _ = blocks.send(failure.map_or(Ok(Vec::new()), Err));
            return;
        }
    }
}

/// The reading side of [`Source::inflate_ahead`].
pub(crate) struct Inflated {
    blocks: Receiver<io::Result<Vec<u8>>>,
    spare: SyncSender<Vec<u8>>,
    block: Vec<u8>,
    pos: usize,
    members: Arc<AtomicU32>,
    ended: bool,
}

impl Inflated {
    /// A reader whose first read fails with `e`.
    fn failed(e: io::Error, members: Arc<AtomicU32>) -> Self {
        let (blocks, received) = mpsc::sync_channel(1);
        let _ = blocks.send(Err(e));
        let (spare, _) = mpsc::sync_channel(0);
        Inflated {
            blocks: received,
            spare,
            block: Vec::new(),
            pos: 0,
            members,
            ended: false,
        }
    }
}

impl Read for Inflated {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.block.len() && !self.ended && !buf.is_empty() {
            let next = match self.blocks.recv() {
                Ok(Ok(block)) => block,
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(_) => return Err(io::Error::other("the thread inflating the trace stopped")),
            };
            if next.is_empty() {
                self.ended = true;
            }
            let old = std::mem::replace(&mut self.block, next);
            self.pos = 0;
            let _ = self.spare.try_send(old);
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl<R: BufRead> Decoded for Source<R> {
    type Plain = R;

    fn plain(&mut self) -> Option<&mut R> {
        match self {
            Source::Plain(r) => Some(r),
            Source::Gzip(_) | Source::Inflating(_) => None,
        }
    }
}

impl<R: BufRead> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(buf),
            Source::Gzip(m) => m.read(buf),
            Source::Inflating(i) => i.read(buf),
        }
    }
}

/// Gzip members one after the other (what `flate2::bufread::MultiGzDecoder` does), counting
/// them and naming non-gzip data after a member as such.
pub(crate) struct Members<R: BufRead> {
    decoder: Option<GzDecoder<R>>,
    members: u32,
}

impl<R: BufRead> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(decoder) = self.decoder.as_mut() else {
                return Ok(0);
            };
            let n = decoder.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // The member ended with a good trailer: another one may follow.
            let mut reader = self.decoder.take().expect("checked above").into_inner();
            let next = loop {
                match reader.fill_buf() {
                    Ok(next) => break next,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            match next.first() {
                None => return Ok(0),
                Some(&b) if b == GZIP_MAGIC[0] => {
                    self.members += 1;
                    self.decoder = Some(GzDecoder::new(reader));
                }
                Some(_) => {
                    let zeros = next.iter().all(|&b| b == 0);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        if zeros {
                            format!(
                                "zero padding after gzip member {} (not a gzip member)",
                                self.members
                            )
                        } else {
                            format!(
                                "trailing data after gzip member {} is not a gzip member",
                                self.members
                            )
                        },
                    ));
                }
            }
        }
    }
}
