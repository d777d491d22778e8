//! The `exact` rules (`docs/summary.md`): GPU activities are the kernel, memcpy and memset
//! events, times are integer ns from the decimal text, nothing is rounded or dropped.

use std::borrow::Cow;
use std::collections::HashMap;

use super::events::{Collected, GpuRow, Kind};
use super::report::{label, us, Figures, KernelStats, KernelTimes, StreamIdle, TemporalBreakdown};
use crate::read::attribution;
use crate::read::intervals::{intersection, length, sweep_disjoint, union};

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

/// The GPU activities of one rank as the exact figures read them: `summary`'s own records
/// ([`Collected`]) or, in `diff`, the attribution's (`read::attribution`): one record set
/// there for the figures and the operators.
pub(crate) trait Activities {
    fn count(&self) -> usize;
    /// Activity `i`, in file order.
    fn row(&self, i: usize) -> GpuRow;
    /// The text of a row's name.
    fn name(&self, id: u32) -> Cow<'_, str>;
    /// The start of the first launch (in file order) of each of `correlations` (ascending,
    /// distinct), None where there is none.
    fn first_launches(&self, correlations: &[i64]) -> Vec<Option<i64>>;
}

impl Activities for Collected {
    fn count(&self) -> usize {
        self.gpu.len()
    }

    fn row(&self, i: usize) -> GpuRow {
        self.gpu[i]
    }

    fn name(&self, id: u32) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.names.names[id as usize])
    }

    fn first_launches(&self, correlations: &[i64]) -> Vec<Option<i64>> {
        correlations
            .iter()
            .map(|c| self.launches.get(c).copied())
            .collect()
    }
}

/// The attribution's records read as `summary`'s: each activity's kind from its name
/// (worked out once per name) and its category, its stream and correlation as `summary`
/// reads them, the launch times from the runtime calls.
pub(crate) struct Attributed<'a> {
    c: &'a attribution::Collected,
    /// Per name, the kind of an activity of that name whose category does not name memory.
    kinds: Vec<Kind>,
}

impl<'a> Attributed<'a> {
    pub(crate) fn new(c: &'a attribution::Collected) -> Self {
        let kinds = c
            .names
            .iter()
            .map(|n| Kind::of(false, n.as_bytes()))
            .collect();
        Attributed { c, kinds }
    }
}

impl Activities for Attributed<'_> {
    fn count(&self) -> usize {
        self.c.gpu.len()
    }

    fn row(&self, i: usize) -> GpuRow {
        let (g, link) = (&self.c.gpu[i], &self.c.gpu_links[i]);
        GpuRow {
            start: g.start,
            end: g.end,
            stream: link.stream(),
            correlation: link.summary_correlation(),
            name: g.name,
            kind: if link.memory_category() {
                Kind::Memory
            } else {
                self.kinds[g.name as usize]
            },
        }
    }

    fn name(&self, id: u32) -> Cow<'_, str> {
        Cow::Borrowed(&self.c.names[id as usize])
    }

    fn first_launches(&self, correlations: &[i64]) -> Vec<Option<i64>> {
        let wanted = |c: i64| correlations.binary_search(&c).is_ok();
        // (correlation, event index, start) of every launch of a wanted correlation.
        let mut found: Vec<(i64, u64, i64)> = self
            .c
            .runtime
            .iter()
            .filter_map(|r| Some((r.summary_correlation()?, r.uid, r.start)))
            .chain(self.c.other_launches.iter().map(|&(uid, c, s)| (c, uid, s)))
            .filter(|&(c, _, _)| wanted(c))
            .collect();
        found.sort_unstable();
        found.dedup_by_key(|f| f.0);
        let mut at = found.iter().peekable();
        correlations
            .iter()
            .map(|&c| at.next_if(|f| f.0 == c).map(|f| f.2))
            .collect()
    }
}

/// The figures of one rank under the `exact` rules.
pub(crate) fn figures(a: &impl Activities) -> Figures {
    let n = a.count();
    // Each kind's intervals (the sizes counted first: no list grows past its need); an
    // `exact` row is never `Kind::Other`, which only the `hta` rules give.
    let mut sizes = [0usize; 3];
    for i in 0..n {
        sizes[a.row(i).kind as usize] += 1;
    }
    let mut by_kind: Vec<Vec<(i64, i64)>> = sizes.iter().map(|&k| Vec::with_capacity(k)).collect();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for i in 0..n {
        let r = a.row(i);
        (first, last) = (first.min(r.start), last.max(r.end));
        by_kind[r.kind as usize].push((r.start, r.end));
    }
    let by_kind: Vec<Vec<(i64, i64)>> = by_kind.into_iter().map(union).collect();
    let all = union(by_kind.concat());
    let temporal = if n == 0 {
        TemporalBreakdown::default()
    } else {
        let (busy, compute) = (length(&all), length(&by_kind[0]));
        TemporalBreakdown {
            idle_time_us: us(last - first - busy),
            compute_time_us: us(compute),
            non_compute_time_us: us(busy - compute),
            kernel_time_us: us(last - first),
        }
    };
    drop(all);
    let kernel_types = kernel_types(&by_kind);
    let comm_comp_overlap_pct = overlap_pct(&by_kind[1], &by_kind[0]);
    drop(by_kind);
    Figures {
        temporal_breakdown: temporal,
        kernel_types,
        kernels: kernels(a),
        comm_comp_overlap_pct,
        idle_time: idle(a),
        gpu_activities: n as u64,
    }
}

fn kernel_types(unions: &[Vec<(i64, i64)>]) -> Vec<(String, f64)> {
    let mut by_mask = [0i64; 8];
    sweep_disjoint(unions, |mask, len| by_mask[mask as usize] += len);
    (1..8)
        .filter(|&m| by_mask[m] != 0)
        .map(|m| (label(m as u8), us(by_mask[m])))
        .collect()
}

fn kernels(a: &impl Activities) -> Vec<KernelStats> {
    // name -> (kind, count, sum, min, max)
    let mut per: HashMap<u32, (Kind, u64, i64, i64, i64)> = HashMap::new();
    for i in 0..a.count() {
        let r = a.row(i);
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
            let f = KernelStats {
                name: a.name(name).into_owned(),
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

/// Each stream's gaps: host wait where the next activity was launched after the stream
/// went idle, kernel wait where the gap is short, other time else.
fn idle(a: &impl Activities) -> Vec<(String, StreamIdle)> {
    // The activities by stream, each stream's in order of (start, end), ties in file order.
    let mut order: Vec<u32> = (0..a.count() as u32).collect();
    order.sort_unstable_by_key(|&i| {
        let r = a.row(i as usize);
        (r.stream, r.start, r.end, i)
    });
    // Each stream's gaps: (activity after the gap, the gap, the stream's end before it).
    let each_gap = |each: &mut dyn FnMut(&GpuRow, i64, i64)| {
        let mut stream_end: Option<(i64, i64)> = None;
        for &i in &order {
            let r = a.row(i as usize);
            match stream_end {
                Some((stream, max_end)) if stream == r.stream => {
                    if r.start > max_end {
                        each(&r, r.start - max_end, max_end);
                    }
                    stream_end = Some((stream, max_end.max(r.end)));
                }
                _ => stream_end = Some((r.stream, r.end)),
            }
        }
    };
    let mut wanted: Vec<i64> = Vec::new();
    each_gap(&mut |r, _, _| {
        if r.correlation != -1 {
            wanted.push(r.correlation);
        }
    });
    wanted.sort_unstable();
    wanted.dedup();
    let launches = a.first_launches(&wanted);
    let launch = |c: i64| wanted.binary_search(&c).ok().and_then(|i| launches[i]);
    // Per stream (ascending) the host wait, kernel wait and other time.
    let mut out: Vec<(i64, [i64; 3])> = Vec::new();
    for &i in &order {
        let stream = a.row(i as usize).stream;
        if out.last().is_none_or(|o| o.0 != stream) {
            out.push((stream, [0; 3]));
        }
    }
    let mut at = 0;
    each_gap(&mut |r, gap, max_end| {
        while out[at].0 != r.stream {
            at += 1;
        }
        let k = match launch(r.correlation) {
            Some(l) if r.correlation != -1 && l > max_end => 0,
            _ if gap < KERNEL_WAIT_NS => 1,
            _ => 2,
        };
        out[at].1[k] += gap;
    });
    out.into_iter()
        .map(|(stream, ns)| {
            let f = StreamIdle {
                host_wait_us: us(ns[0]),
                kernel_wait_us: us(ns[1]),
                other_us: us(ns[2]),
            };
            (stream.to_string(), f)
        })
        .collect()
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
