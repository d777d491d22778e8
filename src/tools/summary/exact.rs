//! The `exact` rules (`docs/summary.md`): GPU activities are the kernel, memcpy and memset
//! events, times are integer ns from the decimal text, nothing is rounded or dropped.

use std::collections::{BTreeMap, HashMap};

use super::events::{Collected, GpuRow, Kind};
use super::report::{label, us, Figures, KernelStats, KernelTimes, StreamIdle, TemporalBreakdown};
use crate::read::intervals::{intersection, length, sweep, union};

/// Below this gap (ns) between two activities of a stream, the GPU waited for the launch
/// of the next one ("kernel wait").
const KERNEL_WAIT_NS: i64 = 30_000;

/// `a / b` rounded to the nearest integer, ties to even.
pub(crate) fn div_round_even(a: i128, b: i128) -> i128 {
    let (q, r) = (a.div_euclid(b), a.rem_euclid(b));
    match (2 * r).cmp(&b) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

fn spans(rows: &[GpuRow], kind: Option<Kind>) -> Vec<(i64, i64)> {
    rows.iter()
        .filter(|r| kind.is_none_or(|k| r.kind == k))
        .map(|r| (r.start, r.end))
        .collect()
}

fn temporal(rows: &[GpuRow], all: &[(i64, i64)], compute: &[(i64, i64)]) -> TemporalBreakdown {
    let (Some(first), Some(last)) = (
        rows.iter().map(|r| r.start).min(),
        rows.iter().map(|r| r.end).max(),
    ) else {
        return TemporalBreakdown::default();
    };
    let busy = length(all);
    let compute = length(compute);
    TemporalBreakdown {
        idle_time_us: us(last - first - busy),
        compute_time_us: us(compute),
        non_compute_time_us: us(busy - compute),
        kernel_time_us: us(last - first),
    }
}

fn kernel_types(unions: &[Vec<(i64, i64)>]) -> Vec<(String, f64)> {
    let mut by_mask = [0i64; 8];
    sweep(unions, |mask, len| by_mask[mask as usize] += len);
    (1..8)
        .filter(|&m| by_mask[m] != 0)
        .map(|m| (label(m as u8), us(by_mask[m])))
        .collect()
}

fn kernels(c: &Collected) -> Vec<KernelStats> {
    // name -> (kind, count, sum, min, max)
    let mut per: HashMap<u32, (Kind, u64, i64, i64, i64)> = HashMap::new();
    for r in &c.gpu {
        let d = r.end - r.start;
        let e = per.entry(r.name).or_insert((r.kind, 0, 0, d, d));
        e.1 += 1;
        e.2 += d;
        e.3 = e.3.min(d);
        e.4 = e.4.max(d);
    }
    let mut out: Vec<(i64, KernelStats)> = per
        .into_iter()
        .map(|(name, (kind, count, sum, min, max))| {
            let mean = div_round_even(i128::from(sum), i128::from(count)) as i64;
            let name = String::from_utf8_lossy(&c.names.names[name as usize]).into_owned();
            let f = KernelStats {
                name,
                r#type: kind.label(),
                count,
                times: KernelTimes {
                    sum_us: us(sum),
                    mean_us: us(mean),
                    min_us: us(min),
                    max_us: us(max),
                },
            };
            (sum, f)
        })
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    out.into_iter().map(|(_, f)| f).collect()
}

fn overlap_pct(comm: &[(i64, i64)], comp: &[(i64, i64)]) -> Option<f64> {
    let total = length(comm);
    if total == 0 {
        return None;
    }
    let both = i128::from(intersection(comm, comp));
    // Hundredths of a percent, rounded to the nearest (ties to even).
    Some(div_round_even(both * 10_000, i128::from(total)) as f64 / 100.0)
}

fn idle(c: &Collected) -> Vec<(String, StreamIdle)> {
    let mut streams: BTreeMap<i64, Vec<&GpuRow>> = BTreeMap::new();
    for r in &c.gpu {
        streams.entry(r.stream).or_default().push(r);
    }
    streams
        .into_iter()
        .map(|(stream, mut rows)| {
            rows.sort_by_key(|r| (r.start, r.end));
            let mut ns = [0i64; 3];
            let mut max_end = rows[0].end;
            for r in &rows[1..] {
                let gap = r.start - max_end;
                if gap > 0 {
                    let launch = c.launches.get(&r.correlation).copied();
                    let k = match launch {
                        Some(l) if r.correlation != -1 && l > max_end => 0,
                        _ if gap < KERNEL_WAIT_NS => 1,
                        _ => 2,
                    };
                    ns[k] += gap;
                }
                max_end = max_end.max(r.end);
            }
            let f = StreamIdle {
                host_wait_us: us(ns[0]),
                kernel_wait_us: us(ns[1]),
                other_us: us(ns[2]),
            };
            (stream.to_string(), f)
        })
        .collect()
}

/// The figures of one rank under the `exact` rules.
pub(crate) fn figures(c: &Collected) -> Figures {
    let all = union(spans(&c.gpu, None));
    let by_kind: Vec<Vec<(i64, i64)>> = [Kind::Computation, Kind::Communication, Kind::Memory]
        .into_iter()
        .map(|k| union(spans(&c.gpu, Some(k))))
        .collect();
    Figures {
        temporal_breakdown: temporal(&c.gpu, &all, &by_kind[0]),
        kernel_types: kernel_types(&by_kind),
        kernels: kernels(c),
        comm_comp_overlap_pct: overlap_pct(&by_kind[1], &by_kind[0]),
        idle_time: idle(c),
        gpu_activities: c.gpu.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_to_even() {
        assert_eq!(div_round_even(5, 2), 2);
        assert_eq!(div_round_even(7, 2), 4);
        assert_eq!(div_round_even(7, 3), 2);
        assert_eq!(div_round_even(8, 3), 3);
    }
}
