//! The CRC-32 algebra: folding the CRC-32 of a text onto the CRC-32 of what precedes it,
//! knowing only the text's CRC and length (zlib's `crc32_combine64`). The writer folds every
//! block's CRC into the trailer this way, and a spliced slice arrives as nothing more.
//!
//! Appending `n` bytes multiplies a CRC by `x^(8n)` modulo the CRC polynomial; the powers
//! `x^(2^k)` are a table computed at compile time, so a fold costs at most 64 products
//! whatever `n` (lengths beyond 4 GiB included).

/// The CRC-32 polynomial, bit-reflected.
const CRC_POLY: u32 = 0xedb8_8320;

/// `a * b modulo p(x)` in GF(2), on bit-reflected polynomials (zlib's `multmodp`).
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut m = 1 << 31;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
        }
        b = if b & 1 != 0 {
            (b >> 1) ^ CRC_POLY
        } else {
            b >> 1
        };
        m >>= 1;
    }
    product
}

/// `X2N[k] = x^(2^k) modulo p(x)`. The multiplicative order of x is 2^32 - 1, so
/// `x^(2^(k + 32)) = x^(2^k)` and 32 entries cover every power of two.
const X2N: [u32; 32] = {
    let mut table = [0; 32];
    let mut p = 1 << 30; // x^1
    table[0] = p;
    let mut k = 1;
    while k < 32 {
        p = multmodp(p, p);
        table[k] = p;
        k += 1;
    }
    table
};

/// The CRC-32 of `A` followed by `B`, from `crc1` = CRC-32 of `A`, `crc2` = CRC-32 of `B` and
/// `len2` = length of `B` (zlib's `crc32_combine64`; any 64-bit length). `flate2::Crc` can only
/// fold CRCs it computed itself, and a spliced slice arrives as a bare CRC and length.
pub(super) fn crc32_combine(crc1: u32, crc2: u32, len2: u64) -> u32 {
    // x^(8 * len2) modulo p(x): appending len2 zero bytes multiplies by it.
    let mut shift = 1 << 31; // x^0
    let mut n = len2;
    let mut k = 3; // 8 = 2^3
    while n != 0 {
        if n & 1 != 0 {
            shift = multmodp(X2N[k & 31], shift);
        }
        n >>= 1;
        k += 1;
    }
    multmodp(shift, crc1) ^ crc2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::gzip::testing::{crc32, trace_text, Rng};
    use flate2::Crc;

    #[test]
    fn crc32_combine_matches_flate2() {
        let data = trace_text(20_000, 20);
        let mut rng = Rng(21);
        for _ in 0..200 {
            let a = rng.below(data.len() as u64 + 1) as usize;
            let b = a + rng.below((data.len() - a) as u64 + 1) as usize;
            let (mut first, mut second) = (Crc::new(), Crc::new());
            first.update(&data[..a]);
            second.update(&data[a..b]);
            let ours = crc32_combine(first.sum(), second.sum(), (b - a) as u64);
            first.combine(&second);
            assert_eq!(ours, first.sum(), "{a}..{b}");
            assert_eq!(ours, crc32(&data[..b]));
        }
        assert_eq!(crc32_combine(0x1234_5678, 0, 0), 0x1234_5678);
        assert_eq!(X2N[0], 1 << 30);
        // Lengths past 2^32: folding is associative whatever the lengths, and x has order
        // 2^32 - 1, so a length and that length + 2^32 - 1 shift a CRC the same way.
        let (c1, c2, c3) = (0xdead_beef, 0x0123_4567, 0x89ab_cdef);
        for (l2, l3) in [
            (1u64 << 32, 5u64),
            ((1 << 33) + 12_345, (1 << 32) - 1),
            (u64::MAX / 3, u64::MAX / 5),
        ] {
            assert_eq!(
                crc32_combine(crc32_combine(c1, c2, l2), c3, l3),
                crc32_combine(c1, crc32_combine(c2, c3, l3), l2 + l3),
            );
            assert_eq!(
                crc32_combine(c1, c2, l2 % ((1 << 32) - 1)),
                crc32_combine(c1, c2, l2)
            );
        }
    }
}
