//! Gzip member decoding: the decompressed bytes of a trace file that is plain JSON or gzip
//! with any number of members (recognised by the magic bytes, not the name), counting the
//! members and naming data after the last one that is not a member.

use std::io::{self, BufRead, Read};

use flate2::bufread::GzDecoder;

use crate::json::lexer::Decoded;

/// The two bytes every gzip member starts with.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The decompressed bytes of a trace file: plain, or gzip with any number of members
/// (counted, so the summary can warn about readers that stop after the first).
pub(crate) enum Source<R: BufRead> {
    Plain(R),
    Gzip(Box<Members<R>>),
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
        }
    }
}

impl<R: BufRead> Decoded for Source<R> {
    type Plain = R;

    fn plain(&mut self) -> Option<&mut R> {
        match self {
            Source::Plain(r) => Some(r),
            Source::Gzip(_) => None,
        }
    }
}

impl<R: BufRead> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(buf),
            Source::Gzip(m) => m.read(buf),
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
