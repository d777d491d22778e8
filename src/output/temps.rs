//! Temporaries: a *temporary* is a file or folder kinetrace writes beside a destination
//! and renames over it once complete (an export's output, a `compress` or `filter` output,
//! each part of a `split`, the full trace of an export with `keep=`/`split_mb=`, `summary`'s
//! HTML page, the dataset `parquet` makes with its spilled runs and the old dataset it
//! replaces), or a private folder a tool works in (the torch < 2.13 fallback's, for Kineto's
//! file or FIFOs; `export_parquet`'s, for its FIFO).
//!
//! Every temporary has one name shape (documented in docs/security.md):
//! `.{prefix}.{pid}.{host}.{random}.kinetrace-tmp`, where `prefix` is the destination's name
//! (cut short so the whole name fits in 255 bytes: any legal destination name gets a legal
//! temporary name), `pid` the creating process's id in decimal, `host` 8 lowercase hex
//! digits naming the pid namespace of this boot of this machine ([`host_tag`]), and `random`
//! 16 lowercase hex digits nobody can predict. It is created exclusively: a file with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` ([`create`]), a folder with `mkdir` and mode 0700
//! ([`create_dir`]; `mkdir` never follows a link either); a name already taken by anything
//! is skipped, never opened.
//!
//! A process killed mid-write (SIGKILL, or SIGTERM to a program without a handler) leaves its
//! temporary behind. Before creating one, [`create`] and [`create_dir`] remove the *stale*
//! temporaries of the directory: names of exactly this shape whose `host` is this host's,
//! whose `pid` is no live process, last modified before now (everything in a folder too),
//! and ours alone ([`ours_alone`]): a regular file with one link owned by this user, or a
//! folder owned by this user that holds, at any depth up to [`MAX_DEPTH`], nothing but
//! folders, regular files with one link and FIFOs, all owned by this user. Anything else
//! (another user's file, another machine's or container's, a link, a folder holding a link or
//! another user's file, a name that merely resembles the shape) is never touched. A folder is
//! removed with `remove_dir_all`, which never follows a link either.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::SystemTime;

/// The suffix of every temporary name.
pub(crate) const SUFFIX: &str = ".kinetrace-tmp";

/// The prefix of the fallback's private directories (see the module docs).
const PRIVATE_PREFIX: &[u8] = b"kinetrace";

/// Levels of folders a stale temporary folder may hold (a dataset's spilled runs are three
/// levels down: `.runs-N/events/run-N`); a deeper one is left alone.
const MAX_DEPTH: usize = 8;

/// The longest file name most file systems take (Linux's NAME_MAX).
const NAME_MAX: usize = 255;
/// Bytes of a temporary name besides the prefix, at most: the leading dot, `.{pid}` (u32),
/// `.{host}`, `.{random}` and the suffix.
const OVERHEAD: usize = 1 + (1 + 10) + (1 + 8) + (1 + 16) + SUFFIX.len();

/// Names tried before giving up: only a directory flooded with entries at our random names
/// could exhaust them.
const ATTEMPTS: u32 = 1000;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A number nobody can predict: the per-process random keys of std's hasher (seeded by the
/// OS), mixed with a counter and the clock.
fn unpredictable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// FNV-1a, 32 bits: the same on every run and in every process (std's hasher is seeded).
fn fnv1a(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for part in parts {
        for &b in *part {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        h ^= 0xff; // a separator, so ("ab", "c") and ("a", "bc") differ
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Where a pid means one process: this boot of this machine (Linux's `boot_id`, a random
/// id per boot) and this pid namespace (containers on one kernel have their own pids).
/// Without them (not Linux): the host name. Two processes that can see each other's pids
/// get the same tag; a tag from another machine, container or boot differs (but for a
/// 1-in-4-billion coincidence, which leaves a file alone unless that pid is also dead here
/// and the file also belongs to this user).
pub(crate) fn host_tag() -> u32 {
    static TAG: OnceLock<u32> = OnceLock::new();
    *TAG.get_or_init(|| {
        let boot = fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let pidns = fs::read_link("/proc/self/ns/pid")
            .map(|p| p.into_os_string())
            .unwrap_or_default();
        if !boot.is_empty() {
            return fnv1a(&[&boot, pidns.as_encoded_bytes()]);
        }
        fnv1a(&[b"host", hostname().as_slice()])
    })
}

#[cfg(unix)]
fn hostname() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length are valid; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Vec::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf[..end].to_vec()
}

#[cfg(not(unix))]
fn hostname() -> Vec<u8> {
    std::env::var("COMPUTERNAME")
        .unwrap_or_default()
        .into_bytes()
}

/// The temporary name for `file_name`, with at most `prefix_max` bytes of it.
fn name_for(file_name: &[u8], prefix_max: usize, pid: u32, host: u32, random: u64) -> Vec<u8> {
    let prefix = &file_name[..file_name.len().min(prefix_max)];
    let mut name = Vec::with_capacity(prefix.len() + OVERHEAD);
    name.push(b'.');
    name.extend_from_slice(prefix);
    name.extend_from_slice(format!(".{pid}.{host:08x}.{random:016x}{SUFFIX}").as_bytes());
    name
}

/// The parts of a temporary name: `(pid, host)`; None for any other name. Exact: a decimal
/// pid without leading zeros that fits in 31 bits, 8 and 16 lowercase hex digits.
pub(crate) fn parse(name: &[u8]) -> Option<(u32, u32)> {
    let rest = name.strip_prefix(b".")?.strip_suffix(SUFFIX.as_bytes())?;
    let (rest, random) = split_last(rest)?;
    let (rest, host) = split_last(rest)?;
    let (_prefix, pid) = split_last(rest)?;
    if !is_hex(random, 16) || !is_hex(host, 8) {
        return None;
    }
    if pid.is_empty() || pid.len() > 10 || pid[0] == b'0' || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let pid: u32 = std::str::from_utf8(pid).ok()?.parse().ok()?;
    if pid > i32::MAX as u32 {
        return None;
    }
    let host = u32::from_str_radix(std::str::from_utf8(host).ok()?, 16).ok()?;
    Some((pid, host))
}

/// `(everything before the last '.', what follows it)`.
fn split_last(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let dot = s.iter().rposition(|&b| b == b'.')?;
    Some((&s[..dot], &s[dot + 1..]))
}

fn is_hex(s: &[u8], len: usize) -> bool {
    s.len() == len && s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(unix)]
fn name_bytes(name: &OsStr) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    name.as_bytes()
}

#[cfg(not(unix))]
fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_encoded_bytes()
}

#[cfg(unix)]
fn os_name(bytes: Vec<u8>) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(bytes)
}

#[cfg(not(unix))]
fn os_name(bytes: Vec<u8>) -> std::ffi::OsString {
    String::from_utf8_lossy(&bytes).into_owned().into()
}

/// Makes a new temporary for `name` in `dir` with `new` (which must fail with
/// `AlreadyExists` where anything has the name), after removing the directory's stale
/// temporaries. Returns what `new` made and its path.
fn make<T>(
    dir: &Path,
    name: &OsStr,
    mut new: impl FnMut(&Path) -> io::Result<T>,
) -> io::Result<(T, PathBuf)> {
    remove_stale(dir, SystemTime::now());
    let name = name_bytes(name);
    let (pid, host) = (std::process::id(), host_tag());
    // A file system with a shorter limit than 255 (eCryptfs: 143) says ENAMETOOLONG: keep
    // less of the destination's name, down to none of it.
    let mut prefix_max = NAME_MAX - OVERHEAD;
    let mut attempts = 0;
    loop {
        let random = unpredictable();
        let path = dir.join(os_name(name_for(name, prefix_max, pid, host, random)));
        match new(&path) {
            Ok(made) => return Ok((made, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < ATTEMPTS => {
                attempts += 1;
            }
            Err(e) if is_name_too_long(&e) && prefix_max > 0 => prefix_max /= 2,
            Err(e) => return Err(e),
        }
    }
}

/// Creates a new temporary file for `file_name` in `dir` (see the module docs), after
/// removing the directory's stale temporaries. Returns the open file and its path.
pub(crate) fn create(dir: &Path, file_name: &OsStr) -> io::Result<(File, PathBuf)> {
    make(dir, file_name, |path| {
        // create_new is O_CREAT|O_EXCL: whatever already has this name (even a dangling
        // link) makes it fail instead of being opened or followed.
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NOFOLLOW);
        }
        options.open(path)
    })
}

/// Creates a new, empty temporary folder for `name` in `dir`, mode 0700: only this user can
/// enter it (see the module docs), after removing the directory's stale temporaries.
/// Returns its path.
pub(crate) fn create_dir(dir: &Path, name: &OsStr) -> io::Result<PathBuf> {
    let ((), path) = make(dir, name, |path| {
        // mkdir(2) fails with EEXIST on any existing name, a dangling link included.
        let mut builder = fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(path)
    })?;
    Ok(path)
}

/// A new name (not yet taken, most likely; the caller creates it exclusively) for a private
/// directory of the fallback in `dir`, after removing the directory's stale temporaries and
/// private directories.
pub(crate) fn private_dir_name(dir: &Path) -> std::ffi::OsString {
    remove_stale(dir, SystemTime::now());
    let name = name_for(
        PRIVATE_PREFIX,
        PRIVATE_PREFIX.len(),
        std::process::id(),
        host_tag(),
        unpredictable(),
    );
    os_name(name)
}

fn is_name_too_long(e: &io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::ENAMETOOLONG);
    #[cfg(not(unix))]
    return e.kind() == io::ErrorKind::InvalidFilename;
}

/// Whether process `pid` exists (in this pid namespace). A process of another user
/// (EPERM) exists; only ESRCH says it does not.
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn alive(_pid: u32) -> bool {
    true // no way to tell here: never remove
}

/// Whether the entry `name` in `dir` is a temporary of ours that `keep` (told its pid and
/// the newest modification time in it) does not protect: this host's tag, ours alone.
fn removable(dir: &Path, name: &OsStr, mut keep: impl FnMut(u32, SystemTime) -> bool) -> bool {
    let Some((pid, host)) = parse(name_bytes(name)) else {
        return false;
    };
    host == host_tag() && ours_alone(&dir.join(name), 0).is_some_and(|newest| !keep(pid, newest))
}

/// The newest modification time in `path` when it is ours alone: owned by this user and a
/// regular file with one link, a folder holding only what is ours alone, or (inside a
/// folder) a FIFO. None for anything else: a link, a socket or device, a hard-linked file,
/// anything of another user's, a folder more than [`MAX_DEPTH`] levels deep.
fn ours_alone(path: &Path, depth: usize) -> Option<SystemTime> {
    let meta = fs::symlink_metadata(path).ok()?;
    let kind = meta.file_type();
    if !owned(&meta) {
        return None;
    }
    let mut newest = meta.modified().ok()?;
    if kind.is_dir() {
        if depth >= MAX_DEPTH {
            return None;
        }
        for entry in fs::read_dir(path).ok()? {
            newest = newest.max(ours_alone(&entry.ok()?.path(), depth + 1)?);
        }
    } else if !((kind.is_file() && one_link(&meta)) || (depth > 0 && is_fifo(&kind))) {
        return None;
    }
    Some(newest)
}

#[cfg(unix)]
fn is_fifo(kind: &fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    kind.is_fifo()
}

#[cfg(not(unix))]
fn is_fifo(_kind: &fs::FileType) -> bool {
    false
}

#[cfg(unix)]
fn owned(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    meta.uid() == unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn owned(_meta: &fs::Metadata) -> bool {
    false
}

#[cfg(unix)]
fn one_link(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.nlink() == 1
}

#[cfg(not(unix))]
fn one_link(_meta: &fs::Metadata) -> bool {
    false
}

/// Removes the stale temporaries of `dir` (see the module docs): those of dead processes
/// last modified before `before`. Best effort: an unreadable directory or an entry that
/// vanished meanwhile is skipped. Returns how many were removed.
pub(crate) fn remove_stale(dir: &Path, before: SystemTime) -> usize {
    remove_where(dir, |pid, newest| alive(pid) || newest >= before)
}

/// Removes the temporaries process `pid` (a child that was killed and reaped) left in
/// `dir`. Returns how many were removed.
pub(crate) fn remove_of_process(dir: &Path, pid: u32) -> usize {
    remove_where(dir, |of, _| of != pid)
}

fn remove_where(dir: &Path, mut keep: impl FnMut(u32, SystemTime) -> bool) -> usize {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let suffix = SUFFIX.as_bytes();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        // The cheap test first: most directories hold no temporary at all.
        if !name_bytes(&name).ends_with(suffix) {
            continue;
        }
        if !removable(dir, &name, &mut keep) {
            continue;
        }
        let path = dir.join(&name);
        // remove_dir_all removes a link in a folder's place (or inside it), never its target.
        let gone = if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            fs::remove_dir_all(&path).is_ok()
        } else {
            fs::remove_file(&path).is_ok()
        };
        if gone {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{dead_pid, entries, scratch};

    fn stale_name(prefix: &str, pid: u32, host: u32) -> String {
        format!(".{prefix}.{pid}.{host:08x}.0123456789abcdef{SUFFIX}")
    }

    #[test]
    fn names_parse_back_exactly() {
        let name = name_for(b"t.json", 200, 1234, 0xdead_beef, 0x0123_4567_89ab_cdef);
        assert_eq!(
            name,
            b".t.json.1234.deadbeef.0123456789abcdef.kinetrace-tmp"
        );
        assert_eq!(parse(&name), Some((1234, 0xdead_beef)));
        // An empty prefix (a file system with a short name limit) still parses.
        assert_eq!(
            parse(b"..7.00000000.0000000000000000.kinetrace-tmp"),
            Some((7, 0))
        );
        for other in [
            &b".t.json.1234.deadbeef.0123456789abcdef.kinetrace-tmpx"[..],
            b"t.json.1234.deadbeef.0123456789abcdef.kinetrace-tmp",
            b".t.json.01234.deadbeef.0123456789abcdef.kinetrace-tmp",
            b".t.json.1234.DEADBEEF.0123456789abcdef.kinetrace-tmp",
            b".t.json.1234.deadbee.0123456789abcdef.kinetrace-tmp",
            b".t.json.1234.deadbeef.0123456789abcde.kinetrace-tmp",
            b".t.json.12a4.deadbeef.0123456789abcdef.kinetrace-tmp",
            b".t.json.99999999999.deadbeef.0123456789abcdef.kinetrace-tmp",
            b".t.json.1234.0123456789abcdef.kinetrace-tmp", // the old shape
            b".t.json.1234.kinetrace-part.json",
            b".1234.deadbeef.0123456789abcdef.kinetrace-tmp", // no prefix dot
        ] {
            assert_eq!(parse(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn every_legal_name_gets_a_legal_temporary_name() {
        let dir = scratch("long-names");
        for len in [1, 100, 200, 203, 204, 217, 218, 240, 254, 255] {
            let name = "n".repeat(len);
            let (file, path) = create(&dir, OsStr::new(&name)).unwrap();
            drop(file);
            let temp = path.file_name().unwrap().len();
            assert!(temp <= NAME_MAX, "{len}: {temp}");
            let (pid, host) = parse(name_bytes(path.file_name().unwrap())).unwrap();
            assert_eq!((pid, host), (std::process::id(), host_tag()));
            // The destination name itself is legal there.
            fs::write(dir.join(&name), b"x").unwrap();
            fs::rename(&path, dir.join(&name)).unwrap();
        }
        // Non-UTF-8 bytes are kept as bytes (a lossy conversion could triple their size).
        #[cfg(unix)]
        {
            let name = os_name(vec![0xff; 255]);
            let (_, path) = create(&dir, &name).unwrap();
            assert!(path.file_name().unwrap().len() <= NAME_MAX);
            fs::remove_file(path).unwrap();
        }
    }

    #[cfg(unix)]
    #[test]
    fn stale_temporaries_of_dead_processes_are_removed_and_nothing_else() {
        use std::os::unix::fs::symlink;
        let dir = scratch("stale");
        let host = host_tag();
        let dead = dead_pid();
        let me = std::process::id();
        let stale = stale_name("t.json", dead, host);
        fs::write(dir.join(&stale), b"partial").unwrap();
        let keep = [
            stale_name("alive.json", me, host),         // a live process's
            stale_name("other-host.json", dead, !host), // another host's (or container's)
            format!(".t.json.{dead}.0123456789abcdef{SUFFIX}"), // not the exact shape
            format!(".t.json.{dead}.kinetrace-part.json"),
            "t.json".to_string(),
        ];
        for name in &keep {
            fs::write(dir.join(name), b"keep").unwrap();
        }
        // Not a regular file or folder, or not ours alone: never removed.
        let link = stale_name("link.json", dead, host);
        symlink(dir.join("t.json"), dir.join(&link)).unwrap();
        let hard = stale_name("hard.json", dead, host);
        fs::hard_link(dir.join("t.json"), dir.join(&hard)).unwrap();
        let fifo = stale_name("fifo.json", dead, host);
        mkfifo(&dir.join(&fifo));
        // An empty folder of the shape is a temporary folder: removed with the file.
        let sub = stale_name("dir.json", dead, host);
        fs::create_dir(dir.join(&sub)).unwrap();
        // Modified after the export started: left (it may be another namespace's live file).
        assert_eq!(remove_stale(&dir, std::time::UNIX_EPOCH), 0);
        assert_eq!(remove_stale(&dir, SystemTime::now()), 2);
        let mut expected: Vec<String> = keep.to_vec();
        expected.extend([link, hard, fifo]);
        expected.sort();
        assert_eq!(entries(&dir), expected);
        // create() does the same on its way.
        fs::write(dir.join(&stale), b"partial").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (_, path) = create(&dir, OsStr::new("t.json")).unwrap();
        assert!(!dir.join(&stale).exists());
        fs::remove_file(path).unwrap();
        assert_eq!(entries(&dir), expected);
    }

    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    }

    #[cfg(unix)]
    #[test]
    fn a_temporary_folder_is_private_exclusive_and_named_as_every_temporary() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let dir = scratch("folder-form");
        let me = (std::process::id(), host_tag());
        for len in [1, 100, 217, 218, 255] {
            let name = "d".repeat(len);
            let path = create_dir(&dir, OsStr::new(&name)).unwrap();
            let temp = path.file_name().unwrap();
            assert!(temp.len() <= NAME_MAX, "{len}: {}", temp.len());
            assert_eq!(parse(name_bytes(temp)), Some(me));
            let meta = fs::symlink_metadata(&path).unwrap();
            assert!(meta.is_dir() && entries(&path).is_empty());
            assert_eq!(meta.permissions().mode() & 0o777, 0o700);
            fs::remove_dir(&path).unwrap();
        }
        let path = create_dir(&dir, OsStr::new("ds")).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".ds.") && name.ends_with(SUFFIX), "{name}");
        // Two folders for one name never share it; a live process's folder is never swept.
        assert_ne!(create_dir(&dir, OsStr::new("ds")).unwrap(), path);
        // mkdir over a link (a dangling one too) fails: what make() relies on to skip it.
        symlink(dir.join("nowhere"), dir.join("planted")).unwrap();
        let err = fs::DirBuilder::new()
            .create(dir.join("planted"))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(!dir.join("nowhere").exists());
        assert_eq!(entries(&dir).len(), 3);
    }

    /// A dataset being made, as `tools::parquet` leaves it when killed: partial tables, the
    /// marker, a spilled run three folders down.
    fn dataset_tree(root: &Path) {
        fs::create_dir_all(root.join("events/rank=0")).unwrap();
        fs::write(root.join("events/rank=0/part-00000.parquet"), b"PAR1").unwrap();
        fs::create_dir_all(root.join(".runs-00001/events")).unwrap();
        fs::write(root.join(".runs-00001/events/run-00000"), b"rows").unwrap();
        fs::write(root.join("_kinetrace.json"), b"{}").unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn stale_temporary_folders_go_whole_when_all_inside_is_ours_alone() {
        use std::os::unix::fs::symlink;
        let dir = scratch("stale-folders");
        let (host, dead, me) = (host_tag(), dead_pid(), std::process::id());
        let folder = |prefix: &str, pid: u32, host: u32| {
            let path = dir.join(stale_name(prefix, pid, host));
            fs::create_dir(&path).unwrap();
            path
        };
        // Stale: a dataset being made; the fallback's folder (Kineto's file, a FIFO).
        dataset_tree(&folder("ds", dead, host));
        let fallback = folder("kinetrace", dead, host);
        fs::write(fallback.join("trace.json.tmp"), b"{").unwrap();
        mkfifo(&fallback.join("trace.json"));
        // Kept: a live process's, another host's, anything inside that is not ours alone
        // (a link, a hard link), too deep, or modified after the sweep started.
        dataset_tree(&folder("live", me, host));
        dataset_tree(&folder("other-host", dead, !host));
        fs::write(dir.join("elsewhere"), b"precious").unwrap();
        let linked = folder("linked", dead, host);
        dataset_tree(&linked);
        symlink(dir.join("elsewhere"), linked.join("events/rank=0/link")).unwrap();
        let hard = folder("hard", dead, host);
        fs::hard_link(dir.join("elsewhere"), hard.join("part")).unwrap();
        let deep = folder("deep", dead, host);
        fs::create_dir_all(deep.join("1/2/3/4/5/6/7/8")).unwrap();
        let fresh = folder("fresh", dead, host);
        dataset_tree(&fresh);
        let inner = fs::File::options()
            .write(true)
            .open(fresh.join(".runs-00001/events/run-00000"))
            .unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(3600);
        inner.set_modified(later).unwrap();
        let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
        let mut expected = vec!["elsewhere".to_string()];
        expected.extend([&linked, &hard, &deep, &fresh].map(|p| name(p)));
        expected.extend([
            stale_name("live", me, host),
            stale_name("other-host", dead, !host),
        ]);
        expected.sort();
        // Past the file system's coarse clock: everything was modified before the sweep.
        let settle = || std::thread::sleep(std::time::Duration::from_millis(20));
        settle();
        assert_eq!(remove_stale(&dir, SystemTime::now()), 2);
        assert_eq!(entries(&dir), expected);
        assert_eq!(fs::read(dir.join("elsewhere")).unwrap(), b"precious");
        assert!(linked.join("events/rank=0/part-00000.parquet").exists());
        // The folder one level shallower is within reach.
        fs::remove_dir(deep.join("1/2/3/4/5/6/7/8")).unwrap();
        settle();
        assert_eq!(remove_stale(&dir, SystemTime::now()), 1);
        assert!(!deep.exists());
        expected.retain(|n| *n != name(&deep));
        // create_dir() sweeps on its way, as create() does; the fallback's name has the shape.
        dataset_tree(&folder("again", dead, host));
        settle();
        let made = create_dir(&dir, OsStr::new("ds")).unwrap();
        assert!(!dir.join(stale_name("again", dead, host)).exists());
        fs::remove_dir(made).unwrap();
        assert_eq!(entries(&dir), expected);
        let private = private_dir_name(&dir);
        assert_eq!(parse(name_bytes(&private)), Some((me, host)));
        assert!(name_bytes(&private).starts_with(b".kinetrace."));
    }

    #[test]
    fn a_killed_childs_temporaries_are_removed_by_pid() {
        let dir = scratch("by-pid");
        let host = host_tag();
        let mine = stale_name("t.json", 4242, host);
        let other = stale_name("t.json", 4243, host);
        fs::write(dir.join(&mine), b"x").unwrap();
        fs::write(dir.join(&other), b"x").unwrap();
        let folder = dir.join(stale_name("ds", 4242, host));
        fs::create_dir(&folder).unwrap();
        dataset_tree(&folder);
        assert_eq!(remove_of_process(&dir, 4242), 2);
        assert_eq!(entries(&dir), vec![other]);
    }
}
