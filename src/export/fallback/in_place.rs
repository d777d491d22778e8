//! In place: the fallback's path to a plain `.json` file. Kineto writes its trace straight
//! into a private file beside the destination, as fast as it writes any file; a thread reads
//! that file while it grows and validates it ([`Validator`]: the strict check, the quote
//! repairs, the event count), so little is left to do once `save` returns. Then the file is
//! edited where it lies ([`apply_edits`]: the inner quotes escaped, the metadata members
//! inserted, `traceName` rewritten; only the text from the first edit on is moved, and with
//! no metadata and no repair that is the last few hundred bytes) and moved over the
//! destination ([`replace`]).
//!
//! The caller makes the private directory (mode 0700, beside the destination's target, so
//! the rename stays on one filesystem) and removes it afterwards; nobody else can create
//! anything in it. Kineto writes `trace.json.tmp` there and renames it over `trace.json`
//! (torch 2.11 to 2.15), or writes `trace.json` itself (older Kineto): the reader opens
//! whichever appears first, as Kineto creates it, and follows it through its own descriptor
//! (the name may change under it). Kineto creates the file itself: a file made beforehand
//! would be truncated by Kineto's open, which on ext4 makes the kernel write the whole file
//! out when Kineto closes it (its defence for files rewritten in place), a cost stock torch
//! never pays. Kineto never waits for the reader (unlike a FIFO). A file the reader missed
//! (written after the names were last looked at, or under a name replaced meanwhile) is read
//! after `save`.
//!
//! Nothing is moved until the whole text was checked and edited, so a failed or interrupted
//! export leaves the destination as it was; [`InPlace::abort`] (also on drop) stops the
//! thread and removes the private files.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::stream::StreamStats;
use super::text::{head_members, TraceNameRewrite};
use super::validator::{not_strict, Validator};
use crate::error::{panic_message, Error, Result};
use crate::output::interrupt::{self, Interrupted};
use crate::output::sink::{keep_owner, resolve_destination, Destination};

/// Read size: what the page cache holds, read into a buffer that stays in a core's cache
/// while the validator goes through it.
const CHUNK: usize = 256 << 10;

/// How long the reader sleeps when it has caught up with Kineto (or Kineto has not created
/// its file yet): it is woken at once when `save` returns, so this only sets how many
/// wake-ups the export costs (Kineto writes a few hundred KB in this time; the reader goes
/// through them in well under a millisecond).
const CAUGHT_UP: Duration = Duration::from_millis(4);

/// What the reader and the export share.
struct Shared {
    /// `save` has returned: the files hold everything they will hold.
    saved: AtomicBool,
    /// Stop at once (abort, drop).
    cancel: AtomicBool,
}

/// The file the reader followed, checked to its end.
struct Found {
    file: File,
    validator: Validator,
}

/// One export through a private file (see the module docs).
pub(crate) struct InPlace {
    /// The names Kineto may write (`trace.json`, `trace.json.tmp`).
    names: [PathBuf; 2],
    /// Moved over when done: the destination, or the file its symlink names.
    target: PathBuf,
    /// The destination as given, for messages.
    destination: PathBuf,
    /// An existing destination: its owner (as far as allowed) and permissions go to the
    /// file that replaces it.
    existing: Option<Box<fs::Metadata>>,
    head: Vec<u8>,
    rewrite: Option<TraceNameRewrite>,
    shared: Arc<Shared>,
    rx: Receiver<Result<Option<Found>>>,
    handle: Option<JoinHandle<()>>,
    committed: bool,
}

/// The directory the private directory for `dst` goes in (its target's, so the rename
/// stays on one filesystem); `None` when the destination is written in place (an existing
/// FIFO or device), which this path cannot do. Errors name `dst`: a directory given, an
/// existing file that cannot be written, a missing directory.
pub(crate) fn directory_for(dst: &Path) -> Result<Option<PathBuf>> {
    let Destination::Replace { target, dir, .. } = resolve_destination(dst)? else {
        return Ok(None);
    };
    if target.file_name().is_none() {
        return Err(Error::InvalidArgument(format!(
            "not a file path: {}",
            dst.display()
        )));
    }
    match fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => Ok(Some(dir)),
        Ok(_) => Err(Error::io(
            format!("cannot write {}", dst.display()),
            io::Error::from(io::ErrorKind::NotADirectory),
        )),
        Err(e) => Err(Error::io(format!("cannot write {}", dst.display()), e)),
    }
}

#[cfg(target_os = "linux")]
const NOATIME: i32 = libc::O_NOATIME;
#[cfg(all(unix, not(target_os = "linux")))]
const NOATIME: i32 = 0;

/// Opens Kineto's file at `path` (never through a link; on Linux without access-time
/// updates: each read of a file being written would otherwise update its access time, a
/// journal transaction that contends with Kineto's writes). `edit`: for reading and writing.
fn open_private(path: &Path, edit: bool) -> io::Result<File> {
    let open = |noatime: bool| {
        let mut options = OpenOptions::new();
        options.read(true).write(edit);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NOFOLLOW | if noatime { NOATIME } else { 0 });
        }
        options.open(path)
    };
    let file = match open(true) {
        // O_NOATIME needs the file's owner: a file system that maps owners otherwise.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => open(false)?,
        other => other?,
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Identity of a file: (device, inode) where there are such numbers.
#[cfg(unix)]
fn identity(meta: &fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(_meta: &fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// Moves `from` over `to`, atomically: whoever opens `to` finds the old file or the new one.
///
/// On Linux an existing regular file is exchanged with the new one (`renameat2` with
/// `RENAME_EXCHANGE`) and then removed from the private directory, rather than replaced by a
/// plain rename: ext4 makes a rename that replaces a file write the new file out first (so
/// that a crash cannot leave an empty file), tens of milliseconds for a trace that would
/// otherwise be written back later at no cost to the export. Anything else (no file there,
/// no `renameat2`, another kind of file) is a plain rename.
fn replace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if fs::symlink_metadata(to).is_ok_and(|m| m.is_file()) && exchange(from, to).is_ok() {
        if fs::symlink_metadata(from).is_ok_and(|m| m.is_file()) {
            let _ = fs::remove_file(from); // the old file; the caller's cleanup retries
            return Ok(());
        }
        // Something else was put there meanwhile: put it back, and let rename say why not.
        exchange(from, to)?;
    }
    fs::rename(from, to)
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two valid NUL-terminated paths that live across the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn two_files() -> Error {
    Error::State(
        "Kineto wrote its trace into more than one file, so kinetrace cannot tell which one \
         is the trace"
            .into(),
    )
}

impl InPlace {
    /// Starts the reader of `path` and `path + ".tmp"` (which must not exist yet, in the
    /// private directory) for Kineto to write into. `dst`: the destination; `trace_name`:
    /// the rewrite of Kineto's `"traceName"` value; `metadata`: `(key, JSON text)` pairs
    /// written as top-level members after the opening `{`.
    pub(crate) fn start(
        path: &Path,
        dst: &Path,
        trace_name: Option<TraceNameRewrite>,
        metadata: &[(String, String)],
    ) -> Result<InPlace> {
        let Destination::Replace {
            target, existing, ..
        } = resolve_destination(dst)?
        else {
            return Err(Error::InvalidArgument(format!(
                "{} is not a regular file: it is written in place, not through a private file",
                dst.display()
            )));
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let names = [path.to_path_buf(), PathBuf::from(tmp)];
        for name in &names {
            if fs::symlink_metadata(name).is_ok() {
                return Err(Error::io(
                    format!("cannot create a temporary file for {}", dst.display()),
                    io::Error::from(io::ErrorKind::AlreadyExists),
                ));
            }
        }
        let shared = Arc::new(Shared {
            saved: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let head = head_members(metadata);
        let handle = {
            let (names, shared, head) = (names.clone(), Arc::clone(&shared), head.clone());
            thread::Builder::new()
                .name("kinetrace-fallback-file".into())
                .spawn(move || {
                    let found =
                        panic::catch_unwind(AssertUnwindSafe(|| follow(&names, &shared, head)))
                            .unwrap_or_else(|p| Err(Error::Panic(panic_message(&*p))));
                    let _ = tx.send(found);
                })
                .map_err(|e| Error::io("cannot start a reader thread", e))?
        };
        Ok(InPlace {
            names,
            target,
            destination: dst.to_path_buf(),
            existing,
            head,
            rewrite: trace_name,
            shared,
            rx,
            handle: Some(handle),
            committed: false,
        })
    }

    /// After `save`: waits (calling `interrupted` every [`interrupt::POLL`]) for the reader
    /// to reach the end, then edits the file and moves it over the destination. `None` when
    /// Kineto wrote nothing (nothing is moved). An error (the text is not strict JSON, Kineto
    /// wrote two files, an interrupt) leaves the destination as it was.
    pub(crate) fn finish(&mut self, interrupted: &mut Interrupted) -> Result<Option<StreamStats>> {
        self.shared.saved.store(true, Ordering::Release);
        if let Some(handle) = &self.handle {
            handle.thread().unpark();
        }
        let found = interrupt::wait(interrupted, |timeout| match self.rx.recv_timeout(timeout) {
            Ok(found) => Ok(Some(found)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Panic(
                "the reader thread ended without reporting".into(),
            )),
        });
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
        let result = found.and_then(|found| self.commit(found, interrupted));
        if result.is_err() {
            self.abort();
        }
        result
    }

    /// The one file Kineto wrote, open for editing, and its validator; None when there is
    /// none. `found`: what the reader followed.
    fn locate(
        &self,
        found: Option<Found>,
        interrupted: &mut Interrupted,
    ) -> Result<Option<(PathBuf, File, Validator)>> {
        // Every file with text under one of the names.
        let mut written: Vec<(Option<(u64, u64)>, &Path)> = Vec::new();
        for name in &self.names {
            match fs::symlink_metadata(name) {
                Ok(meta) if meta.is_file() && meta.len() > 0 => {
                    written.push((identity(&meta), name));
                }
                Ok(meta) if !meta.is_file() => {
                    return Err(Error::State(format!(
                        "Kineto left something that is not a regular file at {}",
                        name.display()
                    )));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("cannot read {}", name.display()), e)),
            }
        }
        if written.len() > 1 && (written[0].0 != written[1].0 || written[0].0.is_none()) {
            return Err(two_files());
        }
        let open_edit = |name: &Path| {
            open_private(name, true)
                .map_err(|e| Error::io(format!("cannot read {}", name.display()), e))
        };
        let Some(Found { file, validator }) = found else {
            // Kineto's file appeared after the reader last looked: read it now.
            let Some(&(_, name)) = written.first() else {
                return Ok(None);
            };
            let mut file = open_edit(name)?;
            let validator = check_file(&mut file, self.head.clone(), interrupted)?;
            return Ok(Some((name.to_path_buf(), file, validator)));
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot read Kineto's output", e))?;
        if meta.len() != validator.offset() {
            return Err(Error::State(format!(
                "Kineto's output changed after save returned ({} bytes read, {} now)",
                validator.offset(),
                meta.len()
            )));
        }
        let Some(&(_, name)) = written
            .iter()
            .find(|(id, _)| id.is_some() && *id == identity(&meta))
        else {
            // Text under a name that is not the file the reader followed, or none at all.
            if written.is_empty() {
                return Err(Error::State(
                    "Kineto's trace file lost its name before it could be moved into place".into(),
                ));
            }
            return Err(two_files());
        };
        let edit = open_edit(name)?;
        let same = edit.metadata().ok().map(|m| identity(&m)) == Some(identity(&meta));
        if !same {
            return Err(two_files());
        }
        Ok(Some((name.to_path_buf(), edit, validator)))
    }

    fn commit(
        &mut self,
        found: Result<Option<Found>>,
        interrupted: &mut Interrupted,
    ) -> Result<Option<StreamStats>> {
        let Some((name, file, mut validator)) = self.locate(found?, interrupted)? else {
            return Ok(None);
        };
        let len = validator.offset();
        let mut edits: Vec<Edit> = Vec::new();
        if let (Some(at), false) = (validator.head_at(), self.head.is_empty()) {
            edits.push(Edit {
                at,
                remove: 0,
                insert: std::mem::take(&mut self.head),
            });
        }
        edits.extend(validator.repairs().drain(..).map(|at| Edit {
            at,
            remove: 0,
            insert: b"\\".to_vec(),
        }));
        if let Some(rewrite) = &self.rewrite {
            let from = len.saturating_sub(rewrite.keep() as u64);
            let mut tail = vec![0u8; (len - from) as usize];
            read_exact_at(&file, &mut tail, from)
                .map_err(|e| Error::io("cannot read Kineto's output", e))?;
            if let Some(pos) = rewrite.find(&tail) {
                let at = from + pos as u64;
                let end = at + rewrite.needle.len() as u64;
                // The path has no quote, so no repair lies inside it; should one, the name
                // is left as Kineto wrote it rather than cut.
                if !edits
                    .iter()
                    .any(|e| e.remove == 0 && e.at > at && e.at < end)
                {
                    edits.push(Edit {
                        at,
                        remove: rewrite.needle.len() as u64,
                        insert: rewrite.replacement.clone(),
                    });
                }
            }
        }
        edits.sort_by_key(|e| e.at);
        let written = apply_edits(&file, len, &edits, interrupted)
            .map_err(|e| e.with_context(&self.destination))?;
        if let Some(meta) = &self.existing {
            keep_owner(&file, meta);
            file.set_permissions(meta.permissions()).map_err(|e| {
                Error::io(
                    format!("cannot set permissions of {}", self.destination.display()),
                    e,
                )
            })?;
        }
        drop(file);
        replace(&name, &self.target)
            .map_err(|e| Error::io(format!("cannot replace {}", self.destination.display()), e))?;
        self.committed = true;
        Ok(Some(StreamStats {
            events: validator.events(),
            text_bytes: written,
            file_bytes: written,
        }))
    }

    /// Stops and joins the reader and removes the private files (unless the trace was moved
    /// into place). Safe to call more than once, and after `finish`.
    pub(crate) fn abort(&mut self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            handle.thread().unpark();
            let _ = handle.join();
        }
        while self.rx.try_recv().is_ok() {}
        if !self.committed {
            for name in &self.names {
                let _ = fs::remove_file(name);
            }
        }
    }
}

impl Drop for InPlace {
    fn drop(&mut self) {
        self.abort();
    }
}

/// The reader: waits for Kineto to create one of `names`, then follows that file, checking
/// the text as it arrives, to its end once `save` has returned. None when no file appeared
/// before `save` returned.
fn follow(names: &[PathBuf; 2], shared: &Shared, head: Vec<u8>) -> Result<Option<Found>> {
    let mut buf = vec![0u8; CHUNK];
    let mut filled = 0;
    let mut found: Option<Found> = None;
    loop {
        if shared.cancel.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        // Looked at first: a look that finds nothing after `save` returned is the end.
        let saved = shared.saved.load(Ordering::Acquire);
        let f = match &mut found {
            Some(f) => f,
            None => {
                // `trace.json.tmp` first: Kineto renames it over `trace.json` when done.
                let mut opened = None;
                for name in names.iter().rev() {
                    match open_private(name, false) {
                        Ok(file) => {
                            opened = Some(file);
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(Error::io(format!("cannot read {}", name.display()), e))
                        }
                    }
                }
                match opened {
                    Some(file) => found.insert(Found {
                        file,
                        validator: Validator::new(head.clone()),
                    }),
                    None if saved => return Ok(None),
                    None => {
                        thread::park_timeout(CAUGHT_UP);
                        continue;
                    }
                }
            }
        };
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0); // one token longer than the buffer
        }
        let got = read_some(&mut f.file, &mut buf[filled..])?;
        if got == 0 {
            if saved {
                break;
            }
            thread::park_timeout(CAUGHT_UP);
            continue;
        }
        filled += got;
        let used = f.validator.feed(&buf[..filled]).map_err(not_strict)?;
        buf.copy_within(used..filled, 0);
        filled -= used;
    }
    if let Some(f) = &mut found {
        f.validator.finish(&buf[..filled]).map_err(not_strict)?;
    }
    Ok(found)
}

fn read_some(file: &mut File, buf: &mut [u8]) -> Result<usize> {
    loop {
        match file.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("cannot read Kineto's output", e)),
        }
    }
}

/// Checks a finished file from its start.
fn check_file(file: &mut File, head: Vec<u8>, interrupted: &mut Interrupted) -> Result<Validator> {
    let mut validator = Validator::new(head);
    let mut buf = vec![0u8; CHUNK];
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let got = read_some(file, &mut buf[filled..])?;
        if got == 0 {
            break;
        }
        interrupted()?;
        filled += got;
        let used = validator.feed(&buf[..filled]).map_err(not_strict)?;
        buf.copy_within(used..filled, 0);
        filled -= used;
    }
    validator.finish(&buf[..filled]).map_err(not_strict)?;
    Ok(validator)
}

/// A change to the file: at `at`, `remove` bytes are replaced by `insert`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edit {
    at: u64,
    remove: u64,
    insert: Vec<u8>,
}

/// How much text [`apply_edits`] moves at a time.
const WINDOW: usize = 1 << 20;

/// Applies `edits` (sorted, not overlapping) to the first `len` bytes of `file`, in place:
/// the new length. Only text from the first edit on is read and written again.
///
/// Insertions only move text towards the end, so the text before the first edit that
/// removes bytes (the trace name, near the end) is moved window by window from the back,
/// each window to its new place before the windows in front of it are touched. What
/// follows that edit (the tail) is read first and written last, edited in memory.
fn apply_edits(
    file: &File,
    len: u64,
    edits: &[Edit],
    interrupted: &mut Interrupted,
) -> std::result::Result<u64, EditError> {
    if edits.is_empty() {
        return Ok(len);
    }
    let split = edits
        .iter()
        .position(|e| e.remove > 0)
        .unwrap_or(edits.len());
    let (body, tail_edits) = edits.split_at(split);
    let tail_start = tail_edits.first().map_or(len, |e| e.at);
    let mut tail = vec![0u8; (len - tail_start) as usize];
    read_exact_at(file, &mut tail, tail_start).map_err(EditError::Read)?;
    for e in tail_edits.iter().rev() {
        let at = (e.at - tail_start) as usize;
        let end = (at + e.remove as usize).min(tail.len());
        tail.splice(at..end, e.insert.iter().copied());
    }
    let grown: u64 = body.iter().map(|e| e.insert.len() as u64).sum();
    // The windows, from the back: [lo, hi) of the old text, with the body edits inside.
    let mut hi = tail_start;
    let mut pending = body.len(); // body[..pending] are edits before `hi`
    let mut shift = grown; // inserted bytes before `hi`
    let start = body.first().map_or(tail_start, |e| e.at);
    let mut old = vec![0u8; WINDOW.min((tail_start - start) as usize)];
    let mut new = Vec::with_capacity(old.len() + 64);
    while hi > start {
        let lo = hi.saturating_sub(WINDOW as u64).max(start);
        let window = &mut old[..(hi - lo) as usize];
        read_exact_at(file, window, lo).map_err(EditError::Read)?;
        // The edits in [lo, hi), and the bytes they insert.
        let mut from = pending;
        while from > 0 && body[from - 1].at >= lo {
            from -= 1;
        }
        let inserted: u64 = body[from..pending]
            .iter()
            .map(|e| e.insert.len() as u64)
            .sum();
        new.clear();
        let mut at = lo;
        for e in &body[from..pending] {
            new.extend_from_slice(&window[(at - lo) as usize..(e.at - lo) as usize]);
            new.extend_from_slice(&e.insert);
            at = e.at;
        }
        new.extend_from_slice(&window[(at - lo) as usize..]);
        shift -= inserted;
        write_all_at(file, &new, lo + shift).map_err(EditError::Write)?;
        pending = from;
        hi = lo;
        interrupted().map_err(EditError::Stopped)?;
    }
    debug_assert_eq!(shift, 0);
    let tail_at = tail_start + grown;
    write_all_at(file, &tail, tail_at).map_err(EditError::Write)?;
    let new_len = tail_at + tail.len() as u64;
    file.set_len(new_len).map_err(EditError::Write)?;
    Ok(new_len)
}

/// Why [`apply_edits`] failed.
#[derive(Debug)]
enum EditError {
    Read(io::Error),
    Write(io::Error),
    Stopped(Error),
}

impl EditError {
    fn with_context(self, destination: &Path) -> Error {
        match self {
            EditError::Read(e) => Error::io("cannot read Kineto's output", e),
            EditError::Write(e) => Error::io(format!("cannot write {}", destination.display()), e),
            EditError::Stopped(e) => e,
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
}

#[cfg(unix)]
fn write_all_at(file: &File, buf: &[u8], at: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, at)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut at: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, at) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                at += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(windows)]
fn write_all_at(file: &File, mut buf: &[u8], mut at: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_write(buf, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                at += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The edits on files larger than a window, and the whole path with a thread in Kineto's
/// place writing the private file the ways Kineto (and writers like it) do.
#[cfg(all(test, unix))]
mod tests {
    use std::io::Write;
    use std::time::Instant;

    use super::*;
    use crate::output::interrupt::never;
    use crate::testing::{kineto_doc, scratch, Damage, ScratchDir};

    /// `edits` applied the plain way, into a new buffer.
    fn edited(text: &[u8], edits: &[Edit]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut from = 0;
        for e in edits {
            out.extend_from_slice(&text[from..e.at as usize]);
            out.extend_from_slice(&e.insert);
            from = (e.at + e.remove) as usize;
        }
        out.extend_from_slice(&text[from..]);
        out
    }

    fn in_file(dir: &Path, text: &[u8]) -> File {
        let path = dir.join("edit.json");
        let _ = fs::remove_file(&path);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.write_all(text).unwrap();
        file
    }

    #[test]
    fn edits_in_place_match_edits_into_a_copy() {
        let dir = scratch("in-place-edits");
        let mut rng = Damage::new(0x2545_f491_4f6c_dd1d);
        // Over three windows, so that windows move with edits on both sides of their ends.
        let len = 3 * WINDOW + 12_345;
        let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        for round in 0..12 {
            let mut positions: Vec<u64> = (0..rng.next() % 40)
                .map(|_| rng.next() % (len as u64 - 600))
                .collect();
            positions.sort_unstable();
            positions.dedup();
            let mut edits: Vec<Edit> = positions
                .iter()
                .map(|&at| Edit {
                    at,
                    remove: 0,
                    insert: vec![b'\\'; 1 + (at % 3) as usize],
                })
                .collect();
            if round % 3 != 2 {
                // The trace name near the end: shorter or longer than what it replaces.
                edits.push(Edit {
                    at: len as u64 - 500,
                    remove: 40,
                    insert: vec![b'N'; if round % 3 == 0 { 7 } else { 300 }],
                });
            }
            if round == 5 {
                edits.insert(
                    0,
                    Edit {
                        at: 0,
                        remove: 0,
                        insert: b"HEAD".to_vec(),
                    },
                );
            }
            let file = in_file(&dir, &text);
            let got_len = apply_edits(&file, len as u64, &edits, &mut never).unwrap();
            let got = fs::read(dir.join("edit.json")).unwrap();
            let want = edited(&text, &edits);
            assert_eq!(got_len, want.len() as u64, "round {round}");
            assert!(got == want, "round {round}: {} edits", edits.len());
        }
        let file = in_file(&dir, b"{}");
        assert_eq!(apply_edits(&file, 2, &[], &mut never).unwrap(), 2);
    }

    #[test]
    fn replace_moves_the_file_over_whatever_rename_would_replace() {
        let dir = scratch("in-place-replace");
        let new = |text: &[u8]| {
            let from = dir.join("from");
            fs::write(&from, text).unwrap();
            from
        };
        // Nothing there, a file (exchanged on Linux), a link (replaced, its target kept).
        let to = dir.join("to");
        replace(&new(b"one"), &to).unwrap();
        assert_eq!(fs::read(&to).unwrap(), b"one");
        replace(&new(b"two"), &to).unwrap();
        assert_eq!(fs::read(&to).unwrap(), b"two");
        let kept = dir.join("kept");
        fs::write(&kept, b"kept").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&kept, &link).unwrap();
        replace(&new(b"three"), &link).unwrap();
        assert!(!fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(fs::read(&link).unwrap(), b"three");
        assert_eq!(fs::read(&kept).unwrap(), b"kept");
        let mut names: Vec<_> = fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["kept", "link", "to"]);
        // A directory is never replaced, nor swapped into the private directory.
        let sub = dir.join("sub");
        fs::create_dir(&sub).unwrap();
        fs::write(sub.join("inside"), b"x").unwrap();
        let from = new(b"four");
        assert!(replace(&from, &sub).is_err());
        assert_eq!(fs::read(sub.join("inside")).unwrap(), b"x");
        assert_eq!(fs::read(&from).unwrap(), b"four");
    }

    #[test]
    fn an_interrupt_stops_the_edits() {
        let dir = scratch("in-place-edits-stop");
        let text = vec![b'x'; 2 * WINDOW + 10];
        let file = in_file(&dir, &text);
        let edits = [Edit {
            at: 5,
            remove: 0,
            insert: b"\\".to_vec(),
        }];
        let mut interrupted = || Err(Error::Interrupted);
        let err = apply_edits(&file, text.len() as u64, &edits, &mut interrupted).unwrap_err();
        assert!(
            matches!(err, EditError::Stopped(Error::Interrupted)),
            "{err:?}"
        );
    }

    /// A private directory beside a destination, as `kinetrace._export.fallback` makes it.
    struct Setup {
        dir: ScratchDir,
        private: PathBuf,
        path: PathBuf,
        dst: PathBuf,
    }

    impl Setup {
        fn new(name: &str) -> Setup {
            let dir = scratch(name);
            let private = dir.join(".kinetrace-private");
            fs::create_dir(&private).unwrap();
            let path = private.join("trace.json");
            let dst = dir.join("out.json");
            Setup {
                dir,
                private,
                path,
                dst,
            }
        }

        fn start(&self, metadata: &[(String, String)]) -> InPlace {
            let rewrite = TraceNameRewrite {
                needle: format!("\"{}\"", self.path.display()).into_bytes(),
                replacement: b"\"out.json\"".to_vec(),
            };
            InPlace::start(&self.path, &self.dst, Some(rewrite), metadata).unwrap()
        }

        fn tmp(&self) -> PathBuf {
            PathBuf::from(format!("{}.tmp", self.path.display()))
        }

        /// What is in the destination's folder and in the private one.
        fn outputs(&self) -> (Vec<String>, Vec<String>) {
            let list = |dir: &Path| {
                let mut names: Vec<String> = fs::read_dir(dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with(".kinetrace-"))
                    .collect();
                names.sort();
                names
            };
            (list(&self.dir), list(&self.private))
        }
    }

    /// Kineto's part: writes `text` into `path` in `chunk`-byte writes (pausing after each
    /// when asked), the way `how` says: `direct` into `path`; `rename` into `path.tmp`, then
    /// renamed over `path` (torch 2.11 to 2.15); `replace` removes `path` first and writes a
    /// new file there.
    fn kineto(path: &Path, text: &[u8], how: &str, chunk: usize, pause: Duration) {
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let written = if how == "rename" { &tmp } else { path };
        if how == "replace" {
            let _ = fs::remove_file(path); // whatever is there
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(written)
            .unwrap();
        for piece in text.chunks(chunk) {
            file.write_all(piece).unwrap();
            if !pause.is_zero() {
                thread::sleep(pause);
            }
        }
        drop(file);
        if how == "rename" {
            let _ = fs::remove_file(path);
            fs::rename(&tmp, path).unwrap();
        }
    }

    fn parse(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).expect("strict JSON")
    }

    #[test]
    fn kinetos_text_lands_at_the_destination_whichever_way_it_is_written() {
        for (how, chunk, pause) in [
            ("rename", 8 << 10, Duration::ZERO),
            ("direct", 8 << 10, Duration::ZERO),
            ("replace", 64 << 10, Duration::ZERO),
            // Slower than the reader: it catches up and waits for more, again and again.
            ("rename", 64 << 10, Duration::from_millis(3)),
        ] {
            let s = Setup::new(&format!("in-place-{how}-{}", pause.as_millis()));
            fs::write(&s.dst, b"old").unwrap();
            let mut in_place = s.start(&[]);
            let doc = kineto_doc(20_000, |i| format!("aten::op_{i}"), &s.path);
            assert!(doc.len() > 2 * CHUNK);
            kineto(&s.path, &doc, how, chunk, pause);
            let stats = in_place.finish(&mut never).unwrap().unwrap();
            let want = String::from_utf8(doc.clone())
                .unwrap()
                .replace(&format!("\"{}\"", s.path.display()), "\"out.json\"");
            let got = fs::read(&s.dst).unwrap();
            assert!(got == want.as_bytes(), "{how}");
            assert_eq!(
                stats,
                StreamStats {
                    events: 20_000,
                    text_bytes: got.len() as u64,
                    file_bytes: got.len() as u64
                },
                "{how}"
            );
            let (outputs, private) = s.outputs();
            assert_eq!(outputs, ["out.json"], "{how}");
            // Only the pre-created name Kineto did not use is left (empty), for the
            // caller's removal of the private directory.
            assert!(private.len() <= 1, "{how}: {private:?}");
        }
    }

    #[test]
    fn quotes_are_repaired_and_metadata_inserted_in_place() {
        let s = Setup::new("in-place-repairs");
        let names = ["a\"b", "say \"hi\", ok", "plain", "\"quoted\""];
        let doc = kineto_doc(4000, |i| names[i % 4].to_string(), &s.path);
        assert!(serde_json::from_slice::<serde_json::Value>(&doc).is_err());
        let metadata = [("run".to_string(), "{\"id\": 7}".to_string())];
        let mut in_place = s.start(&metadata);
        kineto(&s.path, &doc, "rename", 8 << 10, Duration::ZERO);
        let stats = in_place.finish(&mut never).unwrap().unwrap();
        let file = fs::read(&s.dst).unwrap();
        assert_eq!(stats.text_bytes, file.len() as u64);
        let trace = parse(&file);
        assert_eq!(trace["run"]["id"], 7);
        assert_eq!(trace["traceName"], "out.json");
        let got: Vec<&str> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(got.len(), 4000);
        assert!(got.iter().enumerate().all(|(i, n)| *n == names[i % 4]));
        assert!(file.starts_with(b"{\n  \"run\": {\"id\": 7},\n  \"schemaVersion\": 1,"));
    }

    #[test]
    fn two_files_nothing_or_bad_text_leave_the_destination_alone() {
        let doc = |s: &Setup| kineto_doc(50, |i| format!("op{i}"), &s.path);
        type Writer<'a> = &'a dyn Fn(&Setup);
        let cases: [(&str, Writer); 3] = [
            ("more than one file", &|s| {
                kineto(&s.path, &doc(s), "direct", 1 << 10, Duration::ZERO);
                fs::write(s.tmp(), b"{\"a\": 1}").unwrap();
            }),
            ("not strict JSON", &|s| {
                let mut text = doc(s);
                text.extend_from_slice(b"}\n");
                kineto(&s.path, &text, "rename", 1 << 10, Duration::ZERO);
            }),
            ("nothing", &|_| {}),
        ];
        for (what, write) in cases {
            let s = Setup::new(&format!("in-place-{}", what.replace(' ', "-")));
            fs::write(&s.dst, b"old").unwrap();
            let mut in_place = s.start(&[]);
            write(&s);
            match in_place.finish(&mut never) {
                Ok(None) => assert_eq!(what, "nothing"),
                Ok(Some(_)) => panic!("{what}: written"),
                Err(e) => assert!(e.to_string().contains(what), "{e}"),
            }
            in_place.abort();
            assert_eq!(fs::read(&s.dst).unwrap(), b"old", "{what}");
            assert_eq!(
                s.outputs(),
                (vec!["out.json".to_string()], vec![]),
                "{what}"
            );
        }
    }

    #[test]
    fn abort_and_interrupt_remove_the_private_file() {
        let s = Setup::new("in-place-abort");
        let doc = kineto_doc(100, |i| format!("op{i}"), &s.path);
        for drop_it in [false, true] {
            let mut in_place = s.start(&[]);
            kineto(&s.path, &doc[..doc.len() / 2], "direct", 64, Duration::ZERO);
            if drop_it {
                drop(in_place);
            } else {
                in_place.abort();
                in_place.abort(); // twice is fine
            }
            assert_eq!(s.outputs(), (vec![], vec![]));
        }
        // An interrupt while the reader still runs: it is stopped, nothing is left.
        let mut in_place = s.start(&[]);
        let mut asked = 0;
        let mut interrupted = || {
            asked += 1;
            Err(Error::Interrupted)
        };
        // The reader has a big text to get through when finish is asked for.
        let big = kineto_doc(200_000, |i| format!("op{i}"), &s.path);
        kineto(&s.path, &big, "direct", 1 << 20, Duration::ZERO);
        let started = Instant::now();
        match in_place.finish(&mut interrupted) {
            // Done within the first wait: a fast machine.
            Ok(Some(_)) => assert_eq!(asked, 0),
            Err(e) => {
                assert!(matches!(e, Error::Interrupted), "{e}");
                assert_eq!(asked, 1);
                assert_eq!(s.outputs(), (vec![], vec![]));
            }
            Ok(None) => panic!("nothing found"),
        }
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn destinations_written_in_place_are_refused_and_errors_name_the_destination() {
        let s = Setup::new("in-place-destinations");
        assert_eq!(directory_for(&s.dst).unwrap(), Some(s.dir.to_path_buf()));
        assert_eq!(directory_for(Path::new("/dev/null")).unwrap(), None);
        let missing = s.dir.join("no/such/out.json");
        let err = directory_for(&missing).unwrap_err();
        assert!(err.to_string().contains("no/such/out.json"), "{err}");
        assert!(directory_for(&s.dir).is_err());
        assert!(InPlace::start(&s.path, Path::new("/dev/null"), None, &[]).is_err());
        // A name already taken in the private directory is never opened.
        fs::write(&s.path, b"planted").unwrap();
        let err = InPlace::start(&s.path, &s.dst, None, &[]).err().unwrap();
        assert!(err.to_string().contains("out.json"), "{err}");
        assert_eq!(fs::read(&s.path).unwrap(), b"planted");
    }
}
