//! JSON numbers as exact decimals: a `ts` in µs read from its text, shifted by whole
//! nanoseconds and written back with every digit, or floored to nanoseconds, never through a
//! float (merge's one clock, summary's exact figures).

use crate::json::render::push_int;

/// A JSON number as an exact decimal: `mantissa / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    mantissa: i128,
    scale: u32,
}

/// Most decimals kept (beyond that a `ts` is not a time anyone recorded).
const MAX_SCALE: u32 = 30;

impl Decimal {
    /// The number `text` (JSON's grammar), when it fits: at most 38 significant digits and
    /// [`MAX_SCALE`] decimals.
    #[inline]
    pub(crate) fn parse(text: &[u8]) -> Option<Decimal> {
        Self::parse_short(text).or_else(|| Self::parse_any(text))
    }

    /// What every `ts` torch and Kineto write looks like: `[-]digits[.digits]`, at most 18
    /// digits (one pass, no exponent); `None` sends anything else to [`Decimal::parse_any`].
    #[inline]
    fn parse_short(text: &[u8]) -> Option<Decimal> {
        let (negative, digits) = match text.split_first()? {
            (b'-', rest) => (true, rest),
            _ => (false, text),
        };
        if digits.is_empty()
            || digits.len() > 19
            || digits.first() == Some(&b'.')
            || digits.last() == Some(&b'.')
        {
            return None;
        }
        let mut mantissa: u64 = 0;
        let mut dot = None;
        for (i, &b) in digits.iter().enumerate() {
            match b {
                b'0'..=b'9' => mantissa = mantissa * 10 + u64::from(b - b'0'),
                b'.' if dot.is_none() => dot = Some(i),
                _ => return None,
            }
        }
        let scale = dot.map_or(0, |d| (digits.len() - d - 1) as u32);
        let mantissa = i128::from(mantissa);
        Some(Decimal {
            mantissa: if negative { -mantissa } else { mantissa },
            scale,
        })
    }

    fn parse_any(text: &[u8]) -> Option<Decimal> {
        let (negative, rest) = match text.split_first()? {
            (b'-', rest) => (true, rest),
            _ => (false, text),
        };
        let exp_at = rest.iter().position(|&b| b == b'e' || b == b'E');
        let (digits_part, exponent) = match exp_at {
            Some(i) => {
                let e = std::str::from_utf8(&rest[i + 1..]).ok()?;
                let e = e.strip_prefix('+').unwrap_or(e);
                if e.len() > 6 {
                    return None;
                }
                (&rest[..i], e.parse::<i64>().ok()?)
            }
            None => (rest, 0),
        };
        let (int, frac) = match digits_part.iter().position(|&b| b == b'.') {
            Some(i) if i + 1 < digits_part.len() => (&digits_part[..i], &digits_part[i + 1..]),
            Some(_) => return None,
            None => (digits_part, &[][..]),
        };
        if int.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
            return None;
        }
        // Every decimal as written is kept (so is the precision in the output).
        let frac_len = frac.len();
        let mut mantissa: i128 = 0;
        for &d in int.iter().chain(frac) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(i128::from(d - b'0'))?;
        }
        let mut scale = frac_len as i64 - exponent;
        if scale < 0 {
            mantissa = mantissa.checked_mul(10i128.checked_pow(u32::try_from(-scale).ok()?)?)?;
            scale = 0;
        }
        let scale = u32::try_from(scale).ok().filter(|&s| s <= MAX_SCALE)?;
        Some(Decimal {
            mantissa: if negative { -mantissa } else { mantissa },
            scale,
        })
    }

    /// This many µs plus `ns` nanoseconds, exactly (at least three decimals).
    pub(crate) fn plus_ns(self, ns: i128) -> Option<Decimal> {
        let scale = self.scale.max(3);
        let mantissa = self
            .mantissa
            .checked_mul(10i128.checked_pow(scale - self.scale)?)?
            .checked_add(ns.checked_mul(10i128.checked_pow(scale - 3)?)?)?;
        Some(Decimal { mantissa, scale })
    }

    /// Whole nanoseconds (rounded down), for a value in µs.
    pub(crate) fn floor_ns(self) -> Option<i128> {
        if self.scale >= 3 {
            Some(
                self.mantissa
                    .div_euclid(10i128.checked_pow(self.scale - 3)?),
            )
        } else {
            self.mantissa.checked_mul(10i128.pow(3 - self.scale))
        }
    }

    /// Writes the number, fixed-point with `scale` decimals.
    pub(crate) fn push(self, out: &mut Vec<u8>) {
        if self.mantissa < 0 {
            out.push(b'-');
        }
        let abs = self.mantissa.unsigned_abs();
        if let (Ok(small), true) = (u64::try_from(abs), self.scale <= 19) {
            // The usual case, without 128-bit division.
            let unit = 10u64.pow(self.scale);
            push_int(out, small / unit);
            if self.scale > 0 {
                out.push(b'.');
                let mut digits = itoa::Buffer::new();
                let frac = digits.format(small % unit);
                out.extend(std::iter::repeat_n(b'0', self.scale as usize - frac.len()));
                out.extend_from_slice(frac.as_bytes());
            }
            return;
        }
        let unit = 10u128.pow(self.scale);
        let int = abs / unit;
        match u64::try_from(int) {
            Ok(small) => push_int(out, small),
            Err(_) => push_int(out, int),
        }
        if self.scale > 0 {
            out.push(b'.');
            let frac = (abs % unit).to_string();
            out.extend(std::iter::repeat_n(b'0', self.scale as usize - frac.len()));
            out.extend_from_slice(frac.as_bytes());
        }
    }
}

/// A time in µs as written (`ts`, `dur`), in whole ns (digits beyond the ns are dropped),
/// when it fits 64 bits: summary's figures and the Parquet tables' times.
pub(crate) fn ns_of(text: Option<&[u8]>) -> Option<i64> {
    i64::try_from(Decimal::parse(text?)?.floor_ns()?).ok()
}

/// An integer argument as every tool reads it (`args.stream`, `args.correlation`, the
/// Parquet tables' integer columns: one reader, so the SQL over a dataset and `summary`
/// agree): a JSON number, or a string holding one with blanks around it, whose value is a
/// whole number that fits 64 bits: `7`, `7.0`, `7e0`, `70e-1`, `" 7"`, `"7.00"`. Exact past
/// 2^53 (decimal arithmetic, never a float); anything else is `None`.
pub(crate) fn whole_number(value: &[u8]) -> Option<i64> {
    let text = match value {
        [b'"', body @ .., b'"'] => body.trim_ascii(),
        _ => value,
    };
    let d = Decimal::parse(text)?;
    let unit = 10i128.checked_pow(d.scale)?;
    if d.mantissa % unit != 0 {
        return None;
    }
    i64::try_from(d.mantissa / unit).ok()
}

/// `text` (a `baseTimeNanoseconds` value) as an integer.
pub(crate) fn parse_int(text: &[u8]) -> Option<i128> {
    let (negative, digits) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 37 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: i128 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_number_is_read_however_it_is_written() {
        for text in [
            "7", "7.0", "7e0", "70e-1", "0.7E1", "\" 7\"", "\"7.00\"", "\"7e0 \"",
        ] {
            assert_eq!(whole_number(text.as_bytes()), Some(7), "{text}");
        }
        for text in [
            "7.5", "\"7x\"", "\"\"", "true", "null", "[7]", "-", "7e400", "\"7",
        ] {
            assert_eq!(whole_number(text.as_bytes()), None, "{text}");
        }
        assert_eq!(whole_number(b"-3"), Some(-3));
        // Past 2^53 every digit counts: a float would give ...992.
        assert_eq!(
            whole_number(b"9007199254740993"),
            Some(9_007_199_254_740_993)
        );
        assert_eq!(
            whole_number(b"9007199254740993.0"),
            Some(9_007_199_254_740_993)
        );
        assert_eq!(whole_number(b"\"9223372036854775807\""), Some(i64::MAX));
        assert_eq!(whole_number(b"9223372036854775808"), None);
    }

    fn shifted(text: &str, ns: i128) -> String {
        let mut out = Vec::new();
        Decimal::parse(text.as_bytes())
            .unwrap()
            .plus_ns(ns)
            .unwrap()
            .push(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn ts_is_shifted_exactly_on_its_decimal_text() {
        assert_eq!(shifted("1.5", 1000), "2.500");
        assert_eq!(shifted("123", 0), "123.000");
        assert_eq!(shifted("1e3", 1), "1000.001");
        assert_eq!(shifted("1.5E-2", 0), "0.015");
        assert_eq!(shifted("-0.5", 250), "-0.250");
        assert_eq!(shifted("-0.5", -250), "-0.750");
        assert_eq!(shifted("0.0001", 1), "0.0011");
        assert_eq!(shifted("0.000", 7), "0.007");
        assert_eq!(
            shifted("1712195495501688.5", 1_000_000),
            "1712195495502688.500"
        );
        // Beyond doubles: every digit stays.
        assert_eq!(
            shifted("4203669603018.756", 3_000_000_000_000_000_000),
            "3004203669603018.756"
        );
        assert_eq!(
            shifted("99999999999999999.999", 1),
            "100000000000000000.000"
        );
        for text in [
            "0",
            "-0.5",
            "12.000",
            "1.5e3",
            "007",
            "123456789012345678.9",
        ] {
            let short = Decimal::parse_short(text.as_bytes());
            assert!(
                short.is_none() || short == Decimal::parse_any(text.as_bytes()),
                "{text}"
            );
        }
        for bad in ["", "-", "1.", ".5", "1e", "NaN", "1e999999", "0x10"] {
            assert!(Decimal::parse(bad.as_bytes()).is_none(), "{bad}");
        }
        assert_eq!(Decimal::parse(b"2.0009").unwrap().floor_ns(), Some(2000));
        assert_eq!(Decimal::parse(b"-2.0009").unwrap().floor_ns(), Some(-2001));
        assert_eq!(Decimal::parse(b"2e2").unwrap().floor_ns(), Some(200_000));
        // Against integer arithmetic over many values.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ns = (x >> 3) as i128 - (1 << 60);
            let offset = (x % 10_000_000_000_007) as i128 - 5_000_000_000_000;
            let mut text = Vec::new();
            if ns < 0 {
                text.push(b'-');
            }
            let abs = ns.unsigned_abs();
            text.extend_from_slice(format!("{}.{:03}", abs / 1000, abs % 1000).as_bytes());
            // The one-pass reader agrees with the general one wherever it answers.
            let short = Decimal::parse_short(&text);
            assert!(
                short.is_none() || short == Decimal::parse_any(&text),
                "{text:?}"
            );
            let sum = ns + offset;
            let want = format!(
                "{}{}.{:03}",
                if sum < 0 { "-" } else { "" },
                sum.unsigned_abs() / 1000,
                sum.unsigned_abs() % 1000
            );
            assert_eq!(shifted(std::str::from_utf8(&text).unwrap(), offset), want);
        }
    }
}
