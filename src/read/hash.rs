//! The one fast hasher of the crate's lookups by trace text or number (names, threads,
//! argument texts, histogram cells): FxHash's rotate-xor-multiply over 8-byte words.
//! SipHash's guard against chosen keys buys nothing for these maps, and hashing each
//! event's name with it was ~5% of `diff`'s CPU time. Nothing may iterate a map of it
//! where the order reaches an output.

use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style state: one rotate, xor and multiply per 8-byte word.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn write_i64(&mut self, n: i64) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The `BuildHasher` of maps and sets keyed by [`FastHasher`].
pub(crate) type Fast = BuildHasherDefault<FastHasher>;
