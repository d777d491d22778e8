//! The source's decompressed text for both passes that read it as text ([`Forgiving`]:
//! it ends where gzip data is damaged instead of failing), and the copy of a source that
//! loads as it is ([`copy_text`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};
use crate::json::lexer::{BUF_SIZE, PROGRESS_EVERY};
use crate::output::sink::Sink;
use crate::read::members::Source;

/// The decompressed text of a file, ending (instead of failing) where gzip data is corrupt
/// or truncated, or is followed by data that is not gzip; I/O errors still fail.
pub(super) struct Forgiving<R: BufRead> {
    pub(super) inner: Source<R>,
    pub(super) read: u64,
    /// Why it ended early.
    pub(super) stopped: Option<String>,
}

impl<R: BufRead> Read for Forgiving<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stopped.is_some() {
            return Ok(0);
        }
        loop {
            match self.inner.read(buf) {
                Ok(n) => {
                    self.read += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error().is_some() => return Err(e),
                Err(e) => {
                    self.stopped = Some(e.to_string());
                    return Ok(0);
                }
            }
        }
    }
}

/// Opens `path` as its decompressed text, ending where gzip data is damaged.
pub(super) fn open_forgiving(path: &Path) -> Result<Forgiving<BufReader<File>>> {
    let file =
        File::open(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    let source = Source::detect(BufReader::with_capacity(BUF_SIZE, file))
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    Ok(Forgiving {
        inner: source,
        read: 0,
        stopped: None,
    })
}

/// Copies the decompressed text of `src` into `out` unchanged (plain text into plain output
/// file to file, in the kernel where it can).
pub(super) fn copy_text(
    src: &Path,
    mut out: Sink,
    plain: bool,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(u64, u64)> {
    if plain {
        let file =
            File::open(src).map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot read {}", src.display()), e))?
            .len();
        progress(0)?;
        out.append_slice(file, len, None)?;
        let stats = out.finish()?;
        return Ok((len, stats.uncompressed_bytes));
    }
    let mut input = open_forgiving(src)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut next = PROGRESS_EVERY;
    loop {
        let n = input
            .read(&mut buf)
            .map_err(|e| Error::io(format!("cannot read {}", src.display()), e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        done += n as u64;
        if done >= next {
            next = done + PROGRESS_EVERY;
            progress(done)?;
        }
    }
    if let Some(why) = input.stopped {
        // The check found the file loads, so this cannot happen unless it changed since.
        return Err(Error::InvalidArgument(format!(
            "{}: changed while being repaired ({why})",
            src.display()
        )));
    }
    let stats = out.finish()?;
    Ok((done, stats.uncompressed_bytes))
}
