//! Unions of intervals and the sweep over several unions, generic over the time type
//! (`i64` ns under the `exact` rules, `f64` µs under the `hta` rules).

use std::ops::{Add, Sub};

/// A time: integer ns or HTA's float µs.
pub(crate) trait Time:
    Copy + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Default
{
}
impl Time for i64 {}
impl Time for f64 {}

/// The union of `[start, end)` intervals: sorted by start, an interval that starts at or
/// before the largest end so far joins the group (touching intervals merge). Made in the
/// list given (no second list: a rank can have millions of intervals).
pub(crate) fn union<T: Time>(mut spans: Vec<(T, T)>) -> Vec<(T, T)> {
    spans.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut kept = 0usize;
    for i in 0..spans.len() {
        let (start, end) = spans[i];
        match kept.checked_sub(1).map(|k| &mut spans[k]) {
            Some(last) if start <= last.1 => {
                if end > last.1 {
                    last.1 = end;
                }
            }
            _ => {
                spans[kept] = (start, end);
                kept += 1;
            }
        }
    }
    spans.truncate(kept);
    spans.shrink_to_fit();
    spans
}

/// The summed length of a union.
pub(crate) fn length<T: Time>(union: &[(T, T)]) -> T {
    union
        .iter()
        .fold(T::default(), |acc, &(s, e)| acc + (e - s))
}

/// The time both unions cover.
pub(crate) fn intersection<T: Time>(a: &[(T, T)], b: &[(T, T)]) -> T {
    let (mut i, mut j) = (0, 0);
    let mut total = T::default();
    while i < a.len() && j < b.len() {
        let start = if a[i].0 > b[j].0 { a[i].0 } else { b[j].0 };
        let end = if a[i].1 < b[j].1 { a[i].1 } else { b[j].1 };
        if end > start {
            total = total + (end - start);
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

/// Sweeps over up to 3 unions: each elementary segment is reported with the sum of
/// `1 << k` over the unions `k` active in it (HTA's running sum: an interval that ends
/// before it starts, which HTA's rounding makes, subtracts before it adds), segments where
/// that sum is not positive left out.
pub(crate) fn sweep<T: Time>(unions: &[Vec<(T, T)>], mut segment: impl FnMut(u8, T)) {
    let mut points: Vec<(T, i32)> = Vec::new();
    for (k, u) in unions.iter().enumerate() {
        for &(s, e) in u {
            points.push((s, 1 << k));
            points.push((e, -(1 << k)));
        }
    }
    // Ends before starts at the same time (only zero-length segments depend on it).
    points.sort_by(|a, b| {
        a.0.partial_cmp(&b.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.1.cmp(&b.1))
    });
    let mut running = 0i32;
    let mut last = None;
    for (t, step) in points {
        if let Some(prev) = last {
            if running > 0 && t > prev {
                segment((running & 7) as u8, t - prev);
            }
        }
        running += step;
        last = Some(t);
    }
}

/// [`sweep`] over unions whose intervals each end at or after they start (as [`union`]
/// makes them of such intervals: every `exact` union), walking the unions side by side
/// instead of sorting their ends: no list of 2 points per interval.
pub(crate) fn sweep_disjoint<T: Time>(unions: &[Vec<(T, T)>], mut segment: impl FnMut(u8, T)) {
    debug_assert!(unions.len() <= 8);
    // Per union: the next interval, and whether the sweep is inside it.
    let mut next = vec![0usize; unions.len()];
    let mut inside = vec![false; unions.len()];
    let boundary = |k: usize, next: &[usize], inside: &[bool]| {
        let (s, e) = *unions[k].get(next[k])?;
        Some(if inside[k] { e } else { s })
    };
    let mut last: Option<T> = None;
    loop {
        // The earliest boundary of any union.
        let mut t: Option<T> = None;
        for k in 0..unions.len() {
            if let Some(b) = boundary(k, &next, &inside) {
                if t.is_none_or(|t| b < t) {
                    t = Some(b);
                }
            }
        }
        let Some(t) = t else {
            break;
        };
        let mask: u8 = (0..unions.len())
            .filter(|&k| inside[k])
            .map(|k| 1u8 << k)
            .sum();
        if let Some(prev) = last {
            if mask > 0 && t > prev {
                segment(mask, t - prev);
            }
        }
        // Every boundary at t passed (a zero-length interval: both of its).
        for k in 0..unions.len() {
            while boundary(k, &next, &inside).is_some_and(|b| b <= t) {
                if inside[k] {
                    next[k] += 1;
                }
                inside[k] = !inside[k];
            }
        }
        last = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_and_overlapping_intervals_merge() {
        let u = union(vec![(5i64, 7), (0, 2), (2, 3), (1, 2), (8, 9)]);
        assert_eq!(u, vec![(0, 3), (5, 7), (8, 9)]);
        assert_eq!(length(&u), 6);
    }

    #[test]
    fn intersections_and_sweeps_split_time_by_who_is_active() {
        let a = union(vec![(0i64, 10)]);
        let b = union(vec![(5i64, 15), (20, 30)]);
        assert_eq!(intersection(&a, &b), 5);
        let mut seen = Vec::new();
        sweep(&[a, b], |mask, len| seen.push((mask, len)));
        assert_eq!(seen, vec![(1, 5), (3, 5), (2, 5), (2, 10)]);
    }

    #[test]
    fn the_side_by_side_sweep_is_the_sorted_one() {
        // Pseudo-random unions (a fixed LCG): touching, nested, zero-length intervals.
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % m) as i64
        };
        for _ in 0..300 {
            let k = 1 + next(3) as usize;
            let unions: Vec<Vec<(i64, i64)>> = (0..k)
                .map(|_| {
                    let n = next(12) as usize;
                    union(
                        (0..n)
                            .map(|_| {
                                let s = next(60);
                                (s, s + next(8))
                            })
                            .collect(),
                    )
                })
                .collect();
            let (mut sorted, mut side) = (Vec::new(), Vec::new());
            sweep(&unions, |m, l| sorted.push((m, l)));
            sweep_disjoint(&unions, |m, l| side.push((m, l)));
            assert_eq!(sorted, side, "{unions:?}");
        }
    }
}
