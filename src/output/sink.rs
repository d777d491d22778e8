//! Where the bytes go: an atomic output file, optionally through the parallel gzip encoder.
//!
//! A regular destination (or a new one) is written to a temporary file in the same
//! directory and renamed over the destination only when everything succeeded, so a failed
//! or interrupted export leaves no partial file and never clobbers an existing one. A
//! destination that exists and is not a regular file (a FIFO, `/dev/null`, `/dev/stdout`)
//! is written directly and never replaced.
//!
//! The temporary file is made by [`crate::output::temps`] (exclusive, unpredictable, a name that
//! fits wherever the destination's does; stale ones of killed processes are removed first).
//! A file that replaces an existing one gets its mode, and its owner and group where this
//! user may give them (root, or a group this user is in). A worker's output is no named file
//! at all: [`Sink::in_file`] writes into a file the caller created (an unlinked one).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::output::gzip::ParallelGzEncoder;

/// How the output is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Plain,
    Gzip {
        level: u32,
        threads: usize,
    },
    /// A raw deflate slice (no gzip header or trailer, byte-aligned, not final): a worker
    /// process's slice of the trace, spliced into the parent's gzip member afterwards.
    GzipSlice {
        level: u32,
        threads: usize,
    },
}

impl Encoding {
    /// Checks the gzip settings (level 0..=9, threads 1..=256).
    pub(crate) fn validate(self) -> Result<Self> {
        if let Encoding::Gzip { level, threads } | Encoding::GzipSlice { level, threads } = self {
            if level > 9 {
                return Err(Error::InvalidArgument(format!(
                    "compresslevel must be between 0 and 9, got {level}"
                )));
            }
            if !(1..=256).contains(&threads) {
                return Err(Error::InvalidArgument(format!(
                    "threads must be between 1 and 256, got {threads}"
                )));
            }
        }
        Ok(self)
    }
}

/// Byte counts of a finished output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SinkStats {
    /// Bytes of JSON text written (before compression).
    pub(crate) uncompressed_bytes: u64,
    /// Bytes that reached the file.
    pub(crate) file_bytes: u64,
    /// For a [`Encoding::GzipSlice`] output: the CRC-32 of the text it holds (its length is
    /// `uncompressed_bytes`).
    pub(crate) slice_crc: Option<u32>,
}

/// A file being written that is removed on drop unless it was committed.
#[derive(Debug)]
struct TempFile {
    path: PathBuf,
    /// What it is renamed to: the destination, or a symlink's resolved target.
    target: PathBuf,
    committed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Counts what reaches the file.
struct CountingFile {
    inner: BufWriter<File>,
    written: u64,
}

impl Write for CountingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

enum Writer {
    Plain(CountingFile),
    Gzip(ParallelGzEncoder<CountingFile>),
    Slice(ParallelGzEncoder<CountingFile>),
}

/// An output being written. Dropping it without [`Sink::finish`] discards it.
pub(crate) struct Sink {
    writer: Writer,
    temp: Option<TempFile>,
    destination: PathBuf,
    uncompressed: u64,
}

/// EISDIR, so Python raises `IsADirectoryError` for a directory given as the path.
fn is_a_directory() -> io::Error {
    #[cfg(unix)]
    return io::Error::from_raw_os_error(libc::EISDIR);
    #[cfg(not(unix))]
    return io::ErrorKind::IsADirectory.into();
}

/// ELOOP: too many levels of symbolic links.
fn too_many_links() -> io::Error {
    #[cfg(unix)]
    return io::Error::from_raw_os_error(libc::ELOOP);
    #[cfg(not(unix))]
    return io::Error::other("too many levels of symbolic links");
}

fn io_error(what: &str, path: &Path, err: io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), err)
}

impl Sink {
    /// Opens `path` for writing with `encoding` (see the module docs for where it writes).
    pub(crate) fn create(path: &Path, encoding: Encoding) -> Result<Sink> {
        let encoding = encoding.validate()?;
        let (file, temp) = open_destination(path)?;
        Self::build(file, temp, path, encoding)
    }

    /// Writes into `file` from its current position, in place (nothing is renamed or
    /// removed): for an anonymous file the caller made. `label` names it in errors.
    pub(crate) fn in_file(file: File, label: &Path, encoding: Encoding) -> Result<Sink> {
        Self::build(file, None, label, encoding.validate()?)
    }

    fn build(file: File, temp: Option<TempFile>, path: &Path, encoding: Encoding) -> Result<Sink> {
        let file = CountingFile {
            inner: BufWriter::with_capacity(1 << 20, file),
            written: 0,
        };
        let writer = match encoding {
            Encoding::Plain => Writer::Plain(file),
            Encoding::Gzip { level, threads } => Writer::Gzip(
                ParallelGzEncoder::new(file, level, threads)
                    .map_err(|e| io_error("cannot start gzip for", path, e))?,
            ),
            Encoding::GzipSlice { level, threads } => Writer::Slice(
                ParallelGzEncoder::new_slice(file, level, threads)
                    .map_err(|e| io_error("cannot start gzip for", path, e))?,
            ),
        };
        Ok(Sink {
            writer,
            temp,
            destination: path.to_path_buf(),
            uncompressed: 0,
        })
    }

    pub(crate) fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let result = match &mut self.writer {
            Writer::Plain(w) => w.write_all(buf),
            Writer::Gzip(w) | Writer::Slice(w) => w.write_all(buf),
        };
        result.map_err(|e| io_error("cannot write", &self.destination, e))?;
        self.uncompressed += buf.len() as u64;
        Ok(())
    }

    /// Whether the destination is written directly (an existing FIFO or device) rather
    /// than through a temporary file.
    pub(crate) fn writes_in_place(&self) -> bool {
        self.temp.is_none()
    }

    /// Pushes everything written so far to the file (a sync flush for gzip).
    pub(crate) fn flush(&mut self) -> Result<()> {
        let result = match &mut self.writer {
            Writer::Plain(w) => w.flush(),
            Writer::Gzip(w) | Writer::Slice(w) => w.flush(),
        };
        result.map_err(|e| io_error("cannot write", &self.destination, e))
    }

    /// Appends the output of a worker's slice: its text for plain output, its raw deflate
    /// slice for gzip. `text_len` is the length of the text either way; `text_crc` is the
    /// CRC-32 of the text, given for a gzip slice only.
    pub(crate) fn append_slice(
        &mut self,
        mut src: File,
        text_len: u64,
        text_crc: Option<u32>,
    ) -> Result<()> {
        let dest = self.destination.clone();
        let result = match (&mut self.writer, text_crc) {
            (Writer::Plain(w), None) => w.inner.flush().and_then(|_| {
                // File to file: std copies in the kernel (copy_file_range) where it can.
                let copied = io::copy(&mut src, w.inner.get_mut())?;
                w.written += copied;
                if copied == text_len {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("worker output has {copied} bytes, expected {text_len}"),
                    ))
                }
            }),
            (Writer::Gzip(w) | Writer::Slice(w), Some(crc)) => w.append_slice(src, crc, text_len),
            _ => {
                return Err(Error::State(
                    "a worker's output does not match this output's encoding".into(),
                ))
            }
        };
        result.map_err(|e| io_error("cannot write", &dest, e))?;
        self.uncompressed += text_len;
        Ok(())
    }

    /// Flushes everything, then moves the temporary file into place.
    pub(crate) fn finish(mut self) -> Result<SinkStats> {
        let dest = self.destination.clone();
        let mut slice_crc = None;
        let file = match self.writer {
            Writer::Plain(w) => w,
            Writer::Gzip(w) => w.finish().map_err(|e| io_error("cannot write", &dest, e))?,
            Writer::Slice(w) => {
                let (file, crc, len) = w
                    .finish_slice()
                    .map_err(|e| io_error("cannot write", &dest, e))?;
                debug_assert_eq!(len, self.uncompressed);
                slice_crc = Some(crc);
                file
            }
        };
        let file_bytes = file.written;
        let file = file
            .inner
            .into_inner()
            .map_err(|e| io_error("cannot write", &dest, e.into_error()))?;
        drop(file);
        if let Some(temp) = &mut self.temp {
            fs::rename(&temp.path, &temp.target)
                .map_err(|e| io_error("cannot replace", &dest, e))?;
            temp.committed = true;
        }
        Ok(SinkStats {
            uncompressed_bytes: self.uncompressed,
            file_bytes,
            slice_crc,
        })
    }
}

/// Checks that `file` is the worker output its parent made: the regular file with the
/// `identity` (device, inode) recorded when it was created, `len` bytes long as the worker
/// reported. Anything else is an error, never spliced.
#[cfg(unix)]
pub(crate) fn check_worker_output(
    file: &File,
    identity: (u64, u64),
    len: u64,
    dest: &Path,
) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = file
        .metadata()
        .map_err(|e| io_error("cannot read a worker's output for", dest, e))?;
    let problem = if !meta.is_file() {
        "is not a regular file".to_string()
    } else if (meta.dev(), meta.ino()) != identity {
        format!(
            "is not the file made for it (device {} inode {}, expected {} {})",
            meta.dev(),
            meta.ino(),
            identity.0,
            identity.1
        )
    } else if meta.len() != len {
        format!("has {} bytes, the worker reported {len}", meta.len())
    } else {
        return Ok(());
    };
    Err(Error::State(format!(
        "a worker's output for {} {problem}",
        dest.display()
    )))
}

/// Without device and inode numbers, only the length is checked.
#[cfg(not(unix))]
pub(crate) fn check_worker_output(
    file: &File,
    _identity: (u64, u64),
    len: u64,
    dest: &Path,
) -> Result<()> {
    let meta = file
        .metadata()
        .map_err(|e| io_error("cannot read a worker's output for", dest, e))?;
    if meta.len() == len {
        return Ok(());
    }
    Err(Error::State(format!(
        "a worker's output for {} has {} bytes, the worker reported {len}",
        dest.display(),
        meta.len()
    )))
}

/// Follows symlinks by hand (as `open` would), so that a dangling link gets its target
/// created rather than being replaced by a regular file. Returns the final path and its
/// metadata, if it exists.
fn resolve_links(path: &Path) -> Result<(PathBuf, Option<fs::Metadata>)> {
    const MAX_LINKS: usize = 40; // Linux's own limit
    let mut target = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link =
                    fs::read_link(&target).map_err(|e| io_error("cannot resolve", path, e))?;
                target = match target.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            Ok(meta) => return Ok((target, Some(meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((target, None)),
            Err(e) => return Err(io_error("cannot open", path, e)),
        }
    }
    Err(io_error("cannot resolve", path, too_many_links()))
}

/// Where a destination is written.
pub(crate) enum Destination {
    /// In place: it exists and is not a regular file (a FIFO, a device).
    InPlace,
    /// Through a new file renamed over `target` (the destination, or the file its symlink
    /// names), which is in `dir`; `existing`: the file there now.
    Replace {
        target: PathBuf,
        dir: PathBuf,
        existing: Option<Box<fs::Metadata>>,
    },
}

/// Where `path` is written (see [`Destination`]): a directory is refused, and so is an
/// existing file the caller may not write (mode 0444), with the kernel's own check.
pub(crate) fn resolve_destination(path: &Path) -> Result<Destination> {
    let (target, existing) = resolve_links(path)?;
    match &existing {
        Some(meta) if meta.is_dir() => {
            return Err(io_error("cannot write", path, is_a_directory()));
        }
        Some(meta) if !meta.is_file() => return Ok(Destination::InPlace),
        Some(_) => {
            // The rename would replace a file the caller may not write: refuse as opening
            // it for writing would.
            OpenOptions::new()
                .write(true)
                .open(&target)
                .map_err(|e| io_error("cannot write", path, e))?;
        }
        None => {}
    }
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(Destination::Replace {
        target,
        dir,
        existing: existing.map(Box::new),
    })
}

/// The directory a temporary file for `path` goes to: its symbolic links' final target's
/// (`.` for a bare name). Best effort: a link that cannot be read leaves `path`'s own.
pub(crate) fn target_dir(path: &Path) -> PathBuf {
    let target = resolve_links(path).map_or_else(|_| path.to_path_buf(), |(t, _)| t);
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Opens the file to write: the destination itself when it exists and is not a regular
/// file, else a new temporary file beside the destination (beside a symlink's target, so
/// the link keeps pointing at the trace). A file that will replace an existing one gets
/// that file's owner (as far as allowed) and permissions.
fn open_destination(path: &Path) -> Result<(File, Option<TempFile>)> {
    let (target, dir, existing) = match resolve_destination(path)? {
        Destination::InPlace => {
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| io_error("cannot open", path, e))?;
            return Ok((file, None));
        }
        Destination::Replace {
            target,
            dir,
            existing,
        } => (target, dir, existing),
    };
    let file_name = target
        .file_name()
        .ok_or_else(|| Error::InvalidArgument(format!("not a file path: {}", path.display())))?;
    let (file, temp_path) = crate::output::temps::create(&dir, file_name)
        .map_err(|e| io_error("cannot create a temporary file for", path, e))?;
    let temp = TempFile {
        path: temp_path,
        target,
        committed: false,
    };
    if let Some(meta) = &existing {
        keep_owner(&file, meta);
        file.set_permissions(meta.permissions())
            .map_err(|e| io_error("cannot set permissions of", path, e))?;
    }
    Ok((file, Some(temp)))
}

/// Gives `file` the owner and group of the file it replaces, as far as this user may:
/// root may give any, an owner may give its file a group it is in. Otherwise the file
/// stays this user's (what the kernel allows is the rule; nothing is raised). Before the
/// mode is set: a change of owner clears the set-user-ID bits.
#[cfg(unix)]
pub(crate) fn keep_owner(file: &File, old: &fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let Ok(new) = file.metadata() else { return };
    if (new.uid(), new.gid()) == (old.uid(), old.gid()) {
        return;
    }
    // SAFETY: a valid open descriptor; fchown only changes the inode's owner.
    let rc = unsafe { libc::fchown(file.as_raw_fd(), old.uid(), old.gid()) };
    if rc != 0 {
        // Not allowed to give the owner: keep at least the group where that is allowed.
        // SAFETY: as above; uid -1 leaves the owner as it is.
        unsafe { libc::fchown(file.as_raw_fd(), u32::MAX, old.gid()) };
    }
}

#[cfg(not(unix))]
pub(crate) fn keep_owner(_file: &File, _old: &fs::Metadata) {}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::{entries, scratch};

    #[test]
    fn writes_atomically() {
        let dir = scratch("atomic");
        let dest = dir.join("t.json");
        fs::write(&dest, b"old").unwrap();
        let mut sink = Sink::create(&dest, Encoding::Plain).unwrap();
        sink.write_all(b"new content").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"old");
        let stats = sink.finish().unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"new content");
        assert_eq!(stats.uncompressed_bytes, 11);
        assert_eq!(stats.file_bytes, 11);
        assert_eq!(entries(&dir), vec!["t.json"]);
    }

    #[test]
    fn dropped_sink_leaves_nothing_and_keeps_the_old_file() {
        let dir = scratch("drop");
        let dest = dir.join("t.json");
        fs::write(&dest, b"old").unwrap();
        let mut sink = Sink::create(&dest, Encoding::Plain).unwrap();
        sink.write_all(&[b'x'; 100_000]).unwrap();
        drop(sink);
        assert_eq!(fs::read(&dest).unwrap(), b"old");
        assert_eq!(entries(&dir), vec!["t.json"]);
    }

    #[test]
    fn errors_name_the_destination() {
        let dir = scratch("errors");
        let missing = dir.join("no/such/dir/t.json");
        let err = Sink::create(&missing, Encoding::Plain).err().unwrap();
        match err {
            Error::Io { context, source } => {
                assert!(context.contains("no/such/dir/t.json"), "{context}");
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        let err = Sink::create(&dir, Encoding::Plain).err().unwrap();
        assert!(
            matches!(err, Error::Io { ref source, .. } if source.raw_os_error() == is_a_directory().raw_os_error())
        );
        let bad = Encoding::Gzip {
            level: 10,
            threads: 1,
        };
        assert!(matches!(
            Sink::create(&dir.join("x.gz"), bad),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn special_files_are_written_in_place() {
        let mut sink = Sink::create(Path::new("/dev/null"), Encoding::Plain).unwrap();
        sink.write_all(b"discarded").unwrap();
        sink.finish().unwrap();
        assert!(Path::new("/dev/null").exists());
    }

    #[test]
    fn full_device_reports_enospc() {
        let path = Path::new("/dev/full");
        if !path.exists() {
            return;
        }
        let mut sink = Sink::create(path, Encoding::Plain).unwrap();
        let big = vec![b'x'; 4 << 20];
        let err = sink.write_all(&big).and_then(|_| sink.finish().map(|_| ()));
        match err {
            Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ENOSPC)),
            other => panic!("expected ENOSPC, got {other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn dangling_symlink_gets_its_target_created() {
        let dir = scratch("dangling");
        fs::create_dir(dir.join("runs")).unwrap();
        let link = dir.join("latest.json");
        std::os::unix::fs::symlink("runs/trace.json", &link).unwrap();
        let mut sink = Sink::create(&link, Encoding::Plain).unwrap();
        sink.write_all(b"new").unwrap();
        sink.finish().unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(dir.join("runs/trace.json")).unwrap(), b"new");
    }

    #[test]
    fn in_file_writes_in_place_from_the_current_position() {
        let dir = scratch("in-file");
        let path = dir.join("anonymous");
        let mut file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.write_all(b"kept:").unwrap();
        let mut sink = Sink::in_file(file, Path::new("label.json"), Encoding::Plain).unwrap();
        assert!(sink.writes_in_place());
        sink.write_all(b"slice").unwrap();
        let stats = sink.finish().unwrap();
        assert_eq!(stats.file_bytes, 5);
        assert_eq!(fs::read(&path).unwrap(), b"kept:slice");
        assert_eq!(entries(&dir), vec!["anonymous"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_worker_output_is_checked_before_splicing() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch("worker-output");
        let path = dir.join("out");
        fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        let identity = (meta.dev(), meta.ino());
        let dest = Path::new("t.json");
        check_worker_output(&file, identity, 10, dest).unwrap();
        let wrong = (identity.0, identity.1 + 1);
        let err = check_worker_output(&file, wrong, 10, dest).unwrap_err();
        assert!(
            err.to_string().contains("not the file made for it"),
            "{err}"
        );
        let err = check_worker_output(&file, identity, 11, dest).unwrap_err();
        assert!(err.to_string().contains("t.json has 10 bytes"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn temporary_files_get_unpredictable_names() {
        let dir = scratch("names");
        let dest = dir.join("t.json");
        let a = Sink::create(&dest, Encoding::Plain).unwrap();
        let b = Sink::create(&dest, Encoding::Plain).unwrap();
        let names = entries(&dir);
        assert_eq!(names.len(), 2, "{names:?}");
        assert_ne!(names[0], names[1]);
        let prefix = format!(".t.json.{}.", std::process::id());
        for name in &names {
            assert!(name.starts_with(&prefix), "{name}");
            assert_eq!(
                crate::output::temps::parse(name.as_bytes()),
                Some((std::process::id(), crate::output::temps::host_tag()))
            );
        }
        drop((a, b));
        assert!(entries(&dir).is_empty());
    }

    #[test]
    fn a_destination_name_of_255_bytes_works() {
        let dir = scratch("long");
        for len in [217, 218, 240, 255] {
            let dest = dir.join("x".repeat(len));
            let mut sink = Sink::create(&dest, Encoding::Plain).unwrap();
            sink.write_all(b"new").unwrap();
            sink.finish().unwrap();
            assert_eq!(fs::read(&dest).unwrap(), b"new");
        }
        assert_eq!(entries(&dir).len(), 4);
    }

    #[cfg(unix)]
    #[test]
    fn replacing_keeps_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("perms");
        let dest = dir.join("t.json");
        fs::write(&dest, b"old").unwrap();
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o600)).unwrap();
        let mut sink = Sink::create(&dest, Encoding::Plain).unwrap();
        sink.write_all(b"new").unwrap();
        sink.finish().unwrap();
        assert_eq!(
            fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_destination_keeps_its_link() {
        let dir = scratch("symlink");
        let real = dir.join("real.json");
        fs::write(&real, b"old").unwrap();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut sink = Sink::create(&link, Encoding::Plain).unwrap();
        sink.write_all(b"new").unwrap();
        sink.finish().unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
    }
}
