//! Temporary files: a *temporary* is a file kinetrace writes beside a destination and renames
//! over it once complete (an export's output, a `compress` or `filter` output, each part of a
//! `split`, the full trace of an export with `keep=`/`split_mb=`).
//!
//! Every temporary has one name shape (documented in docs/security.md):
//! `.{prefix}.{pid}.{host}.{random}.kinetrace-tmp`, where `prefix` is the destination's name
//! (cut short so the whole name fits in 255 bytes: any legal destination name gets a legal
//! temporary name), `pid` the creating process's id in decimal, `host` 8 lowercase hex
//! digits naming the pid namespace of this boot of this machine ([`host_tag`]), and `random`
//! 16 lowercase hex digits nobody can predict. It is created exclusively
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`): a name already taken by anything is skipped, never opened.
//!
//! A process killed mid-write (SIGKILL, or SIGTERM to a program without a handler) leaves its
//! temporary behind. Before creating one, [`create`] removes the *stale* temporaries of the
//! directory: names of exactly this shape whose `host` is this host's, whose `pid` is no
//! live process, that are regular files with one link owned by this user and last modified
//! before now. Anything else (another user's file, another machine's or container's, a
//! link, a directory, a name that merely resembles the shape) is never touched.
//!
//! The one directory of this shape: the torch < 2.13 fallback's *private directory*
//! ([`private_dir_name`]: prefix `kinetrace`, made by `kinetrace._export.fallback` with mode 0700),
//! where Kineto writes its trace (or FIFOs stand in its place). A stale one is removed too,
//! when it holds nothing but the files Kineto writes there ([`PRIVATE_FILES`]: regular files
//! with one link, or FIFOs, all owned by this user); a directory holding anything else stays.

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

/// The names Kineto writes in a private directory: `trace.json.tmp`, renamed over
/// `trace.json` when done (`kinetrace._export.fallback` gives Kineto `trace.json`).
pub(crate) const PRIVATE_FILES: [&str; 2] = ["trace.json", "trace.json.tmp"];

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

/// Creates a new temporary file for `file_name` in `dir` (see the module docs), after
/// removing the directory's stale temporaries. Returns the open file and its path.
pub(crate) fn create(dir: &Path, file_name: &OsStr) -> io::Result<(File, PathBuf)> {
    remove_stale(dir, SystemTime::now());
    let file_name = name_bytes(file_name);
    let (pid, host) = (std::process::id(), host_tag());
    // A file system with a shorter limit than 255 (eCryptfs: 143) says ENAMETOOLONG: keep
    // less of the destination's name, down to none of it.
    let mut prefix_max = NAME_MAX - OVERHEAD;
    let mut attempts = 0;
    loop {
        let path = dir.join(os_name(name_for(
            file_name,
            prefix_max,
            pid,
            host,
            unpredictable(),
        )));
        // create_new is O_CREAT|O_EXCL: whatever already has this name (even a dangling
        // link) makes it fail instead of being opened or followed.
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NOFOLLOW);
        }
        match options.open(&path) {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < ATTEMPTS => {
                attempts += 1;
            }
            Err(e) if is_name_too_long(&e) && prefix_max > 0 => prefix_max /= 2,
            Err(e) => return Err(e),
        }
    }
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

/// Whether the entry `name` in `dir` is a temporary of ours that `keep` does not protect:
/// this host's tag, a regular file with one link, owned by this user.
fn removable(dir: &Path, name: &OsStr, mut keep: impl FnMut(u32, &fs::Metadata) -> bool) -> bool {
    let Some((pid, host)) = parse(name_bytes(name)) else {
        return false;
    };
    if host != host_tag() {
        return false;
    }
    let Ok(meta) = fs::symlink_metadata(dir.join(name)) else {
        return false;
    };
    let ours = if meta.file_type().is_dir() {
        is_private_dir_name(name_bytes(name)) && owned(&meta)
    } else {
        meta.file_type().is_file() && owned_alone(&meta)
    };
    ours && !keep(pid, &meta)
}

/// Whether `name` (of the temporary shape) has the private directories' prefix.
fn is_private_dir_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".") else {
        return false;
    };
    rest.strip_prefix(PRIVATE_PREFIX).is_some_and(|rest| {
        rest.first() == Some(&b'.') && rest.iter().filter(|&&b| b == b'.').count() == 4
    })
}

/// Removes a stale private directory if it holds nothing but [`PRIVATE_FILES`] (regular
/// files with one link, or FIFOs) owned by this user; true when it is gone.
fn remove_private_dir(path: &Path) -> bool {
    let Ok(entries) = fs::read_dir(path) else {
        return false;
    };
    let mut files = Vec::new();
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let name = entry.file_name();
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            return false;
        };
        let kind = meta.file_type();
        let known = PRIVATE_FILES.iter().any(|f| OsStr::new(f) == name);
        let plain = (kind.is_file() && owned_alone(&meta)) || (is_fifo(&kind) && owned(&meta));
        if !known || !plain {
            return false;
        }
        files.push(entry.path());
    }
    files.iter().all(|f| fs::remove_file(f).is_ok()) && fs::remove_dir(path).is_ok()
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
fn owned_alone(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    meta.uid() == unsafe { libc::geteuid() } && meta.nlink() == 1
}

#[cfg(not(unix))]
fn owned_alone(_meta: &fs::Metadata) -> bool {
    false
}

/// Removes the stale temporaries of `dir` (see the module docs): those of dead processes
/// last modified before `before`. Best effort: an unreadable directory or an entry that
/// vanished meanwhile is skipped. Returns how many were removed.
pub(crate) fn remove_stale(dir: &Path, before: SystemTime) -> usize {
    remove_where(dir, |pid, meta| {
        alive(pid) || meta.modified().map_or(true, |m| m >= before)
    })
}

/// Removes the temporaries process `pid` (a child that was killed and reaped) left in
/// `dir`. Returns how many were removed.
pub(crate) fn remove_of_process(dir: &Path, pid: u32) -> usize {
    remove_where(dir, |of, _| of != pid)
}

fn remove_where(dir: &Path, mut keep: impl FnMut(u32, &fs::Metadata) -> bool) -> usize {
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
        let gone = if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            remove_private_dir(&path)
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
    use crate::testing::{entries, scratch};

    /// A pid that no process has: past the kernel's pid_max.
    fn dead_pid() -> u32 {
        let max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4_194_304);
        max + 1
    }

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
        // Not a regular file, or not ours alone: never removed.
        let link = stale_name("link.json", dead, host);
        symlink(dir.join("t.json"), dir.join(&link)).unwrap();
        let hard = stale_name("hard.json", dead, host);
        fs::hard_link(dir.join("t.json"), dir.join(&hard)).unwrap();
        let sub = stale_name("dir.json", dead, host);
        fs::create_dir(dir.join(&sub)).unwrap();
        // Modified after the export started: left (it may be another namespace's live file).
        assert_eq!(remove_stale(&dir, std::time::UNIX_EPOCH), 0);
        assert_eq!(remove_stale(&dir, SystemTime::now()), 1);
        let mut expected: Vec<String> = keep.to_vec();
        expected.extend([link, hard, sub]);
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
    #[cfg(unix)]
    #[test]
    fn stale_private_directories_holding_only_kinetos_files_are_removed() {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let dir = scratch("stale-private");
        let (host, dead, me) = (host_tag(), dead_pid(), std::process::id());
        let private = |pid: u32, random: &str| {
            let path = dir.join(format!(".kinetrace.{pid}.{host:08x}.{random}{SUFFIX}"));
            fs::create_dir(&path).unwrap();
            path
        };
        // Stale: Kineto's two files, a FIFO in a file's place (the FIFO way), nothing.
        let both = private(dead, "0000000000000001");
        fs::write(both.join("trace.json"), b"{").unwrap();
        fs::write(both.join("trace.json.tmp"), b"{").unwrap();
        let fifo = private(dead, "0000000000000002");
        let c_path = CString::new(fifo.join("trace.json").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        private(dead, "0000000000000003");
        // Kept: anything else inside, a live process's, a hard-linked file inside.
        let other = private(dead, "0000000000000004");
        fs::write(other.join("trace.json"), b"{").unwrap();
        fs::write(other.join("notes.txt"), b"mine").unwrap();
        let live = private(me, "0000000000000005");
        fs::write(live.join("trace.json"), b"{").unwrap();
        let linked = private(dead, "0000000000000006");
        fs::write(dir.join("elsewhere"), b"{").unwrap();
        fs::hard_link(dir.join("elsewhere"), linked.join("trace.json")).unwrap();
        let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(remove_stale(&dir, SystemTime::now()), 3);
        let mut expected = vec![name(&other), name(&live), name(&linked), "elsewhere".into()];
        expected.sort();
        assert_eq!(entries(&dir), expected);
        assert_eq!(fs::read(other.join("notes.txt")).unwrap(), b"mine");
        // A new name has the shape, this process's pid and this host's tag.
        let fresh = private_dir_name(&dir);
        assert_eq!(parse(name_bytes(&fresh)), Some((me, host)));
        assert!(is_private_dir_name(name_bytes(&fresh)));
        assert!(!is_private_dir_name(
            format!(".t.json.{me}.{host:08x}.0123456789abcdef{SUFFIX}").as_bytes()
        ));
    }

    #[test]
    fn a_killed_childs_temporaries_are_removed_by_pid() {
        let dir = scratch("by-pid");
        let host = host_tag();
        let mine = stale_name("t.json", 4242, host);
        let other = stale_name("t.json", 4243, host);
        fs::write(dir.join(&mine), b"x").unwrap();
        fs::write(dir.join(&other), b"x").unwrap();
        assert_eq!(remove_of_process(&dir, 4242), 1);
        assert_eq!(entries(&dir), vec![other]);
    }
}
