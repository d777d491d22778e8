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
