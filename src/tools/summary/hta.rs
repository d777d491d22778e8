//! The `hta` rules: HolisticTraceAnalysis 0.5.0's figures, quirks included
//! (`../shared/notes/hta-rules.md` states each rule; `docs/summary.md` how they differ from
//! `exact`). Times are HTA's float µs.

use std::collections::{BTreeMap, HashMap};

use super::events::{contains, is_communication, is_memory_name, Collected, HtaRow, Kind};
use super::report::{label, Figures, KernelStats, KernelTimes, StreamIdle, TemporalBreakdown};
use crate::read::intervals::{intersection, length, sweep, union};

/// HTA's kernel-wait threshold (µs).
const KERNEL_WAIT_US: f64 = 30.0;

/// HTA's `get_kernel_type`.
fn kind_of(name: &[u8]) -> Kind {
    if is_communication(name) {
        Kind::Communication
    } else if is_memory_name(name) {
        Kind::Memory
    } else if !contains(name, b"Memcpy") && !name.starts_with(b"Memset") && !contains(name, b"Sync")
    {
        Kind::Computation
    } else {
        Kind::Other
    }
}

/// numpy's `round(x, 2)`: half to even on the scaled value.
fn round2(x: f64) -> f64 {
    (x * 100.0).round_ties_even() / 100.0
}

/// A row as HTA holds it after loading: (start, dur) and whether it is a "GPU kernel".
#[derive(Clone, Copy)]
struct Row {
    ts: f64,
    dur: f64,
    gpu: bool,
    src: HtaRow,
}

fn load(c: &Collected, round: bool) -> Vec<Row> {
    c.hta_rows
        .iter()
        .map(|r| {
            let (ts, dur) = if round {
                let start = r.ts.ceil();
                (start, (r.ts + r.dur).floor() - start)
            } else {
                (r.ts, r.dur)
            };
            let name = &c.names.names[r.name as usize];
            let gpu = (r.stream >= 0 && r.correlation >= 0)
                || name == b"Event Sync"
                || name == b"Context Sync";
            Row {
                ts,
                dur,
                gpu,
                src: *r,
            }
        })
        .collect()
}

/// The last-step filter: CPU rows before the last ProfilerStep's start, each GPU row once
/// per kept CPU row with its correlation.
fn last_step_filter(c: &Collected, rows: Vec<Row>) -> Vec<Row> {
    let is_step = |r: &Row| contains(&c.names.names[r.src.name as usize], b"ProfilerStep");
    let cutoff = rows
        .iter()
        .filter(|r| !r.gpu && is_step(r))
        .map(|r| r.ts)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    let Some(cutoff) = cutoff else {
        return Vec::new();
    };
    let mut kept_cpu: HashMap<i64, usize> = HashMap::new();
    for r in rows.iter().filter(|r| !r.gpu && r.ts < cutoff) {
        *kept_cpu.entry(r.src.correlation).or_default() += 1;
    }
    let mut out = Vec::with_capacity(rows.len());
    for r in rows.iter().filter(|r| r.gpu) {
        let n = kept_cpu.get(&r.src.correlation).copied().unwrap_or(0);
        out.extend(std::iter::repeat_n(*r, n));
    }
    out.extend(rows.into_iter().filter(|r| !r.gpu && r.ts < cutoff));
    out
}

fn spans(rows: &[(Row, Kind)], kind: Option<Kind>) -> Vec<(f64, f64)> {
    rows.iter()
        .filter(|(_, k)| kind.is_none_or(|want| *k == want))
        .map(|(r, _)| (r.ts, r.ts + r.dur))
        .collect()
}

fn temporal(all: &[(f64, f64)], compute: &[(f64, f64)]) -> TemporalBreakdown {
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return TemporalBreakdown::default();
    };
    let kernel = last.1 - first.0;
    let idle = kernel - length(all);
    let compute = length(compute);
    TemporalBreakdown {
        idle_time_us: idle,
        compute_time_us: compute,
        non_compute_time_us: kernel - compute - idle,
        kernel_time_us: kernel,
    }
}

fn kernels(c: &Collected, set: &[(Row, Kind)]) -> Vec<KernelStats> {
    let mut per: HashMap<u32, (Kind, u64, f64, f64, f64)> = HashMap::new();
    for (r, k) in set.iter().filter(|(_, k)| *k != Kind::Other) {
        let d = r.dur;
        let e = per.entry(r.src.name).or_insert((*k, 0, 0.0, d, d));
        e.1 += 1;
        e.2 += d;
        e.3 = e.3.min(d);
        e.4 = e.4.max(d);
    }
    let mut out: Vec<KernelStats> = per
        .into_iter()
        .map(|(name, (kind, count, sum, min, max))| KernelStats {
            name: String::from_utf8_lossy(&c.names.names[name as usize]).into_owned(),
            r#type: kind.label(),
            count,
            times: KernelTimes {
                sum_us: sum,
                mean_us: sum / count as f64,
                min_us: min,
                max_us: max,
            },
        })
        .collect();
    out.sort_by(|a, b| {
        b.times
            .sum_us
            .total_cmp(&a.times.sum_us)
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

/// Idle time per stream: rows sorted by start, each gap from the previous row's end.
fn idle(rows: &[Row], runtime_ts: &dyn Fn(&Row) -> Option<f64>) -> Vec<(String, StreamIdle)> {
    let mut streams: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.src.stream != -1 && r.src.gpu_cat) {
        streams.entry(r.src.stream).or_default().push(r);
    }
    streams
        .into_iter()
        .map(|(stream, mut rows)| {
            rows.sort_by(|a, b| a.ts.total_cmp(&b.ts));
            let mut sums = [0.0f64; 3];
            for pair in rows.windows(2) {
                let prev_end = pair[0].ts + pair[0].dur;
                let gap = pair[1].ts - prev_end;
                let k = match runtime_ts(pair[1]) {
                    Some(t) if t > prev_end => 0,
                    _ if gap < KERNEL_WAIT_US => 1,
                    _ => 2,
                };
                sums[k] += gap;
            }
            let f = StreamIdle {
                host_wait_us: round2(sums[0]),
                kernel_wait_us: round2(sums[1]),
                other_us: round2(sums[2]),
            };
            (stream.to_string(), f)
        })
        .collect()
}

/// The figures of one rank under the `hta` rules; `filter`: the last-step filter runs (the
/// loaded set has at least 2 names with "ProfilerStep").
pub(crate) fn figures(c: &Collected, filter: bool, round: bool) -> Figures {
    let loaded = load(c, round);
    // Links: a GPU row's launch is the last CPU row with its correlation; else index 0.
    let mut launch_of: HashMap<i64, u64> = HashMap::new();
    for r in loaded.iter().filter(|r| !r.gpu && r.src.correlation != -1) {
        launch_of.insert(r.src.correlation, r.src.index);
    }
    let rows = if filter {
        last_step_filter(c, loaded)
    } else {
        loaded
    };
    let ts_at: HashMap<u64, f64> = rows.iter().map(|r| (r.src.index, r.ts)).collect();
    let runtime_ts = |r: &Row| -> Option<f64> {
        let link = match launch_of.get(&r.src.correlation) {
            Some(&i) if r.src.correlation != -1 => i,
            _ if r.src.correlation >= 0 => 0,
            _ => return None,
        };
        ts_at.get(&link).copied()
    };
    let set: Vec<(Row, Kind)> = rows
        .iter()
        .filter(|r| r.src.stream != -1)
        .map(|r| (*r, kind_of(&c.names.names[r.src.name as usize])))
        .collect();
    let all = union(spans(&set, None));
    let by_kind: Vec<Vec<(f64, f64)>> = [Kind::Computation, Kind::Communication, Kind::Memory]
        .into_iter()
        .map(|k| union(spans(&set, Some(k))))
        .collect();
    let mut by_mask = [0.0f64; 8];
    sweep(&by_kind, |mask, len| by_mask[mask as usize] += len.trunc());
    let comm = length(&by_kind[1]);
    Figures {
        temporal_breakdown: temporal(&all, &by_kind[0]),
        kernel_types: (1..8)
            .filter(|&m| by_mask[m] != 0.0)
            .map(|m| (label(m as u8), by_mask[m]))
            .collect(),
        kernels: kernels(c, &set),
        comm_comp_overlap_pct: (comm > 0.0)
            .then(|| round2(intersection(&by_kind[1], &by_kind[0]) / comm * 100.0)),
        idle_time: idle(&rows, &runtime_ts),
        gpu_activities: set.len() as u64,
    }
}
