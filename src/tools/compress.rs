//! `kinetrace compress`: re-encode a trace file (plain, or gzip of any number of members) as
//! ONE gzip member with the parallel encoder, streamed in constant memory and checked on the
//! way with the strict reader `split` and `filter` use ([`crate::read::events`]): what is not a
//! trace (truncated, NaN, a byte-order mark, invalid UTF-8, empty, endless) fails at the
//! offset of its first fault, and nothing is left.
//!
//! The text is kept byte for byte, whatever its form: a trace in the JSON Array Format
//! (`[event, ...]`, its `]` left off or not) stays one, as it loads in viewers as it is;
//! `kinetrace repair` is the tool that writes it as `{"traceEvents": [...]}`.

use std::path::Path;

use crate::error::Result;
use crate::output::sink::{Encoding, Sink};
use crate::read::events;

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
/// with the parallel encoder, checking it as a trace on the way (the faults of
/// [`events::read_trace`], as [`crate::error::Error::TraceFormat`] with the offset). The output
/// is atomic (see [`crate::output::sink`]): on any error, including `progress` failing, the
/// temporary file is removed and an existing `dst` is untouched; `dst` may be `src` itself.
pub(crate) fn recompress(
    src: &Path,
    dst: &Path,
    level: u32,
    threads: usize,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<RecompressStats> {
    let encoding = Encoding::Gzip { level, threads }.validate()?;
    // Opened once (a FIFO has one writer to meet), before the output exists: a missing
    // source leaves nothing to remove.
    let file = std::fs::File::open(src)
        .map_err(|e| crate::error::Error::io(format!("cannot open {}", src.display()), e))?;
    let mut sink = Sink::create(dst, encoding)?;
    let mut write = |bytes: &[u8]| sink.write_all(bytes);
    let (json_bytes, source_members) = events::check_through(src, file, &mut write, progress)?;
    let stats = sink.finish()?;
    debug_assert_eq!(stats.uncompressed_bytes, json_bytes);
    Ok(RecompressStats {
        json_bytes,
        file_bytes: stats.file_bytes,
        source_members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::testing::{entries, scratch};
    use std::io::{self, Read};

    const EVENT: &str = r#"{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":7,"tid":7,"ts":10.5,"dur":800.25,"args":{"External id": 1}}"#;

    /// A valid trace of `events` events.
    fn trace(events: usize) -> String {
        let body = vec![EVENT; events].join(",\n");
        format!(
            "{{\"schemaVersion\": 1, \"traceEvents\": [\n{body}\n], \"traceName\": \"t.json\"}}\n"
        )
    }

    fn no_progress() -> impl FnMut(u64) -> Result<()> {
        |_| Ok(())
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        crate::testing::gzip_member(data, 6)
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
        let doc = trace(200);
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
    fn what_is_not_a_trace_fails_at_its_offset_and_leaves_nothing() {
        let dir = scratch("recompress-invalid");
        let doc = trace(50);
        let dst = dir.join("out.json.gz");
        std::fs::write(&dst, b"old").unwrap();
        let cut = doc.len() / 2;
        let mut bad_utf8 = doc.clone().into_bytes();
        let at = doc.find("aten::mm").unwrap();
        bad_utf8[at] = 0xff;
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("truncated", doc.as_bytes()[..cut].to_vec(), "expected"),
            (
                "nan",
                doc.replacen("10.5", "NaN", 1).into_bytes(),
                "(traceEvents[0])",
            ),
            (
                "bom",
                [b"\xef\xbb\xbf", doc.as_bytes()].concat(),
                "offset 0:",
            ),
            ("utf8", bad_utf8, "UTF-8"),
            ("empty", Vec::new(), "empty file"),
            ("zeros", vec![0u8; 1 << 20], "offset 0:"),
            ("two", doc.repeat(2).into_bytes(), "extra data"),
        ];
        for (name, data, expected) in cases {
            let src = dir.join(format!("{name}.json"));
            std::fs::write(&src, &data).unwrap();
            match recompress(&src, &dst, 6, 2, &mut no_progress()) {
                Err(e @ Error::TraceFormat(_)) => {
                    let msg = e.to_string();
                    assert!(msg.contains("offset "), "{name}: {msg}");
                    assert!(msg.contains(expected), "{name}: {msg}");
                    assert!(msg.starts_with(&src.display().to_string()), "{msg}");
                }
                other => panic!("{name}: {other:?}"),
            }
            assert_eq!(std::fs::read(&dst).unwrap(), b"old");
            std::fs::remove_file(&src).unwrap();
            assert_eq!(entries(&dir), vec!["out.json.gz"], "{name}");
        }
    }

    #[test]
    fn a_member_or_event_too_large_is_refused_at_its_offset() {
        let dir = scratch("recompress-large");
        let big = "x".repeat(crate::read::events::MAX_VALUE + 1);
        let src = dir.join("big.json");
        let head = "{\"schemaVersion\": 1, ";
        std::fs::write(
            &src,
            format!("{head}\"blob\": \"{big}\", \"traceEvents\": []}}"),
        )
        .unwrap();
        let dst = dir.join("out.json.gz");
        match recompress(&src, &dst, 1, 1, &mut no_progress()) {
            Err(Error::TraceFormat(t)) => {
                assert_eq!(t.offset, Some(head.len() as u64));
                let msg = &t.message;
                assert!(msg.contains("too large"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(entries(&dir), vec!["big.json"]);
    }

    #[test]
    fn recompress_failure_leaves_nothing() {
        let dir = scratch("recompress-fail");
        let doc = trace(2000);
        let blob = gz(doc.as_bytes());
        let src = dir.join("cut.json.gz");
        std::fs::write(&src, &blob[..blob.len() / 2]).unwrap();
        let dst = dir.join("out.json.gz");
        std::fs::write(&dst, b"old").unwrap();
        match recompress(&src, &dst, 6, 2, &mut no_progress()) {
            Err(Error::TraceFormat(t)) => {
                assert!(t.message.contains("corrupt gzip data"), "{t:?}");
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
        std::fs::write(&big, trace(100_000)).unwrap();
        let r = recompress(&big, &dst, 1, 1, &mut |_| Err(Error::Interrupted));
        assert!(matches!(r, Err(Error::Interrupted)));
        assert_eq!(
            entries(&dir),
            vec!["big.json", "cut.json.gz", "out.json.gz"]
        );
    }
}
