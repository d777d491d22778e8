//! `kinetrace compress`: re-encode a trace file (plain, or gzip of any number of members) as
//! ONE gzip member with the parallel encoder, streamed in constant memory.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};
use crate::lexer::{BUF_SIZE, PROGRESS_EVERY};
use crate::members::Source;
use crate::sink::{Encoding, Sink};

/// Byte counts of [`recompress`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecompressStats {
    /// Decompressed bytes streamed through the encoder.
    pub json_bytes: u64,
    /// Bytes of the new gzip file.
    pub file_bytes: u64,
    /// Gzip members of the source (0 for plain JSON).
    pub source_members: u32,
}

/// Streams `src` (plain, or gzip with any number of members) into `dst` as ONE gzip member
/// with the parallel encoder. The output is atomic (see [`crate::sink`]): on any error,
/// including `progress` failing, the temporary file is removed and an existing `dst` is
/// untouched; `dst` may be `src` itself. The content is not validated.
pub fn recompress(
    src: &Path,
    dst: &Path,
    level: u32,
    threads: usize,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<RecompressStats> {
    let encoding = Encoding::Gzip { level, threads }.validate()?;
    let file =
        File::open(src).map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
    let read_error = |e: io::Error, done: u64| {
        if e.raw_os_error().is_some() {
            Error::io(format!("cannot read {}", src.display()), e)
        } else {
            // Corrupt or truncated gzip: an OSError without errno on the Python side, as
            // Python's gzip.BadGzipFile is.
            Error::io(
                format!(
                    "cannot decompress {} (after {done} bytes of output)",
                    src.display()
                ),
                io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
            )
        }
    };
    let mut source =
        Source::detect(BufReader::with_capacity(BUF_SIZE, file)).map_err(|e| read_error(e, 0))?;
    let mut sink = Sink::create(dst, encoding)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut next_progress = PROGRESS_EVERY;
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e, done)),
        };
        sink.write_all(&buf[..n])?;
        done += n as u64;
        if done >= next_progress {
            next_progress = done + PROGRESS_EVERY;
            progress(done)?;
        }
    }
    let stats = sink.finish()?;
    Ok(RecompressStats {
        json_bytes: stats.uncompressed_bytes,
        file_bytes: stats.file_bytes,
        source_members: source.members(),
    })
}
