//! Helpers shared by the unit tests.

use std::fs;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the system temp dir, removed with everything in it on drop.
pub(crate) struct ScratchDir(PathBuf);

impl Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `data` as one gzip member at `level` (0-9).
pub(crate) fn gzip_member(data: &[u8], level: u32) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A new scratch directory whose name includes `name`.
pub(crate) fn scratch(name: &str) -> ScratchDir {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("kinetrace-test-{}-{n}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create a scratch directory");
    ScratchDir(dir)
}

/// A pid that no process has: past the kernel's pid_max (for a stale temporary's name).
pub(crate) fn dead_pid() -> u32 {
    let max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    max + 1
}

/// The names in `dir`, sorted.
pub(crate) fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Bytes that matter to JSON's grammar (structure, strings, escapes, numbers, literals) and
/// bytes that break UTF-8 or need escaping: what [`Damage::edit`] draws from to damage text.
pub(crate) const JSON_SPECIALS: &[u8] =
    b"{}[]\",:\\/ \t\n0123456789.-+eEtrufalsn\x00\x1f\x7f\x80\xbf\xc3\xe2\xed\xf0\xff";

/// A trace as Kineto lays it out (one field group per line, indented), `events` complete
/// events named by `name`, naming `trace_name`: what Kineto's writer gives the fallback.
pub(crate) fn kineto_doc(
    events: usize,
    name: impl Fn(usize) -> String,
    trace_name: &Path,
) -> Vec<u8> {
    let mut doc = String::from("{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [\n");
    for i in 0..events {
        let comma = if i + 1 < events { "," } else { "" };
        doc.push_str(&format!(
            "  {{\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{}\", \"pid\": 1, \
             \"tid\": 2,\n    \"ts\": {i}, \"dur\": 1\n  }}{comma}\n",
            name(i)
        ));
    }
    doc.push_str(&format!(
        "  ],\n  \"traceName\": \"{}\"\n}}\n",
        trace_name.display()
    ));
    doc.into_bytes()
}

/// A deterministic source of damage for differential tests: xorshift64 numbers, and edits
/// of one byte (replaced, removed, or inserted) drawn from a set of bytes.
pub(crate) struct Damage(u64);

impl Damage {
    pub(crate) fn new(seed: u64) -> Self {
        Damage(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Replaces, removes or inserts one byte of `text` (not empty) at a random place, the
    /// new byte taken from `bytes`.
    pub(crate) fn edit(&mut self, text: &mut Vec<u8>, bytes: &[u8]) {
        let at = (self.next() % text.len() as u64) as usize;
        let b = bytes[(self.next() % bytes.len() as u64) as usize];
        match self.next() % 3 {
            0 => text[at] = b,
            1 => {
                text.remove(at);
            }
            _ => text.insert(at, b),
        }
    }
}
