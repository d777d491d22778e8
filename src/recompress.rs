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
pub(crate) struct RecompressStats {
    /// Decompressed bytes streamed through the encoder.
    pub(crate) json_bytes: u64,
    /// Bytes of the new gzip file.
    pub(crate) file_bytes: u64,
    /// Gzip members of the source (0 for plain JSON).
    pub(crate) source_members: u32,
}

/// Streams `src` (plain, or gzip with any number of members) into `dst` as ONE gzip member
/// with the parallel encoder. The output is atomic (see [`crate::sink`]): on any error,
/// including `progress` failing, the temporary file is removed and an existing `dst` is
/// untouched; `dst` may be `src` itself. The content is not validated.
pub(crate) fn recompress(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::scratch;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    const GOOD: &str = r#"{"schemaVersion": 1, "traceEvents": [
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":7,"tid":7,"ts":10.5,"dur":800.25,"args":{"External id": 1}}
], "traceName": "t.json"}
"#;

    fn no_progress() -> impl FnMut(u64) -> Result<()> {
        |_| Ok(())
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::new(6));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn single_member(blob: &[u8]) -> Vec<u8> {
        let mut d = flate2::read::GzDecoder::new(blob);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        // The one member consumed everything.
        let mut rest = Vec::new();
        d.into_inner().read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "more than one member");
        out
    }

    #[test]
    fn recompress_plain_and_multi_member() {
        let dir = scratch("recompress");
        let doc = GOOD.repeat(200);
        let plain = dir.join("t.json");
        std::fs::write(&plain, &doc).unwrap();
        let out = dir.join("t.json.gz");
        let stats = recompress(&plain, &out, 6, 2, &mut no_progress()).unwrap();
        assert_eq!(stats.json_bytes, doc.len() as u64);
        assert_eq!(stats.source_members, 0);
        let blob = std::fs::read(&out).unwrap();
        assert_eq!(stats.file_bytes, blob.len() as u64);
        assert_eq!(single_member(&blob), doc.as_bytes());

        // Several members, rewritten in place.
        let multi = dir.join("m.json.gz");
        let mut data = gz(&doc.as_bytes()[..1000]);
        data.extend_from_slice(&gz(&doc.as_bytes()[1000..]));
        std::fs::write(&multi, &data).unwrap();
        let stats = recompress(&multi, &multi, 1, 3, &mut no_progress()).unwrap();
        assert_eq!(stats.source_members, 2);
        assert_eq!(
            single_member(&std::fs::read(&multi).unwrap()),
            doc.as_bytes()
        );
        assert_eq!(entries(&dir), vec!["m.json.gz", "t.json", "t.json.gz"]);
    }

    #[test]
    fn recompress_failure_leaves_nothing() {
        let dir = scratch("recompress-fail");
        let doc = GOOD.repeat(2000);
        let blob = gz(doc.as_bytes());
        let src = dir.join("cut.json.gz");
        std::fs::write(&src, &blob[..blob.len() / 2]).unwrap();
        let dst = dir.join("out.json.gz");
        std::fs::write(&dst, b"old").unwrap();
        match recompress(&src, &dst, 6, 2, &mut no_progress()) {
            Err(Error::Io { context, source }) => {
                assert!(context.contains("cannot decompress"), "{context}");
                assert_eq!(source.kind(), io::ErrorKind::InvalidData);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read(&dst).unwrap(), b"old");
        // In place: the source is untouched.
        assert!(recompress(&src, &src, 6, 2, &mut no_progress()).is_err());
        assert_eq!(std::fs::read(&src).unwrap(), &blob[..blob.len() / 2]);
        assert_eq!(entries(&dir), vec!["cut.json.gz", "out.json.gz"]);
        // Bad settings and a missing source.
        assert!(matches!(
            recompress(&src, &dst, 10, 1, &mut no_progress()),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            recompress(&src, &dst, 6, 0, &mut no_progress()),
            Err(Error::InvalidArgument(_))
        ));
        match recompress(&dir.join("nope"), &dst, 6, 1, &mut no_progress()) {
            Err(Error::Io { source, .. }) => assert_eq!(source.kind(), io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        // Interrupted through the callback.
        let big = dir.join("big.json");
        std::fs::write(&big, GOOD.repeat(40_000)).unwrap();
        let r = recompress(&big, &dst, 1, 1, &mut |_| Err(Error::Interrupted));
        assert!(matches!(r, Err(Error::Interrupted)));
        assert_eq!(
            entries(&dir),
            vec!["big.json", "cut.json.gz", "out.json.gz"]
        );
    }
}
