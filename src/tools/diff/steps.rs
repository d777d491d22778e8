//! `diff`'s figures of each step of one rank, for its GPU verdict and its counts
//! (`docs/diff.md`, "Three verdicts"):
//!
//! - **launched by the step**: a GPU activity (kernel, memcpy, memset) whose first launch
//!   (the runtime call of its correlation) starts inside the step's CPU slice
//!   (`ProfilerStep#N`, `[ts, ts + dur)`); an activity with no launch found is the step's
//!   whose GPU window its start falls in;
//! - **the step's GPU window**, on the GPU's clock: from the first start of the activities
//!   the step launched to the first start of the next step's (the last step's: to the last
//!   end of its own), never before the previous step's window starts; a step that launched
//!   nothing has none;
//! - **GPU busy time**: the time inside the window when at least one GPU activity of the
//!   rank runs (the union over every stream and device, clipped to the window), so the
//!   steps' busy times add up without counting anything twice;
//! - **counts**: the activities each step launched, by name, and the bytes of its memcpys
//!   by direction (from the name: `HtoD`, `DtoH`, `DtoD`, anything else), exact; and the
//!   FLOPs of the operators `ops` models (its `exact` rules) whose start the step's CPU
//!   slice holds, each operator's rounded to a whole number.

use std::collections::HashMap;

use crate::read::intervals::union;
use crate::tools::summary::events::{GpuRow, Kind};
use crate::tools::summary::exact::Activities;

/// The memcpy directions, in the order of [`StepFigures::memcpy_bytes`].
pub(crate) const DIRECTIONS: [&str; 4] = ["HtoD", "DtoH", "DtoD", "other"];

/// What one step of a rank did on the GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StepFigures {
    /// ns of the step's GPU window with a GPU activity running; None: no window.
    pub(crate) gpu_busy_ns: Option<i64>,
    /// (name, count) of the activities the step launched, names as [`RankSteps::names`]
    /// indexes them, ascending.
    pub(crate) launched: Vec<(u32, u32)>,
    /// Bytes of the memcpys it launched, per direction ([`DIRECTIONS`]).
    pub(crate) memcpy_bytes: [i64; 4],
    /// FLOPs of the modelled operators that started in its CPU slice.
    pub(crate) flops: i64,
}

/// The figures of every step of a rank, one per `ProfilerStep#N` CPU slice, in file order
/// (as `summary`'s steps are listed).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RankSteps {
    /// (name, kind label) of the activities [`StepFigures::launched`] counts.
    pub(crate) names: Vec<(String, &'static str)>,
    pub(crate) steps: Vec<StepFigures>,
}

impl RankSteps {
    /// Adds each modelled operator's FLOPs (`(start, flops)`, ns) to the step whose CPU
    /// slice (`steps`, as [`step_figures`] takes them) holds its start.
    pub(crate) fn count_flops(&mut self, steps: &[(Option<i64>, i64)], modelled: &[(i64, f64)]) {
        let slices = Slices::of(steps);
        for &(start, flops) in modelled {
            if let Some(k) = slices.step_at(start) {
                // Rounded: a count compares whole numbers (the models give whole FLOPs
                // for whole shapes); `as` saturates and makes NaN 0.
                let f = &mut self.steps[k].flops;
                *f = f.saturating_add(flops.round() as i64);
            }
        }
    }
}

/// The direction of a memcpy from its name; None for another memory activity (a memset).
fn direction(name: &str) -> Option<usize> {
    let lower = name.to_ascii_lowercase();
    if lower.contains("memset") {
        return None;
    }
    Some(
        DIRECTIONS[..3]
            .iter()
            .position(|d| lower.contains(&d.to_ascii_lowercase()))
            .unwrap_or(3),
    )
}

/// The CPU slices of `steps` ((start, dur) in ns, file order) that have a start, in time
/// order, with the step each slice is: a lookup of the step a time falls in.
struct Slices {
    starts: Vec<(i64, i64, usize)>,
}

impl Slices {
    fn of(steps: &[(Option<i64>, i64)]) -> Slices {
        let mut starts: Vec<(i64, i64, usize)> = steps
            .iter()
            .enumerate()
            .filter_map(|(k, &(start, dur))| Some((start?, start?.saturating_add(dur), k)))
            .collect();
        starts.sort_unstable();
        Slices { starts }
    }

    fn step_at(&self, t: i64) -> Option<usize> {
        let i = self.starts.partition_point(|s| s.0 <= t);
        let (_, end, k) = *self.starts.get(i.checked_sub(1)?)?;
        (t < end).then_some(k)
    }
}

/// Per activity of `rows`, the step whose slice holds its first launch.
fn launching_steps(a: &impl Activities, rows: &[GpuRow], slices: &Slices) -> Vec<Option<usize>> {
    let mut correlations: Vec<i64> = rows
        .iter()
        .map(|r| r.correlation)
        .filter(|&c| c != -1) // -1: none (as `summary` reads it)
        .collect();
    correlations.sort_unstable();
    correlations.dedup();
    let launches = a.first_launches(&correlations);
    rows.iter()
        .map(|r| {
            let at = correlations.binary_search(&r.correlation).ok()?;
            slices.step_at(launches[at]?)
        })
        .collect()
}

/// The GPU windows (step, start, end), in time order: see the module's comment.
fn windows(
    rows: &[GpuRow],
    launched_by: &[Option<usize>],
    slices: &Slices,
) -> Vec<(usize, i64, i64)> {
    let mut first: HashMap<usize, (i64, i64)> = HashMap::new();
    for (r, k) in rows.iter().zip(launched_by) {
        if let Some(k) = *k {
            let e = first.entry(k).or_insert((r.start, r.end));
            *e = (e.0.min(r.start), e.1.max(r.end));
        }
    }
    let mut out: Vec<(usize, i64, i64)> = Vec::new();
    let mut floor = i64::MIN;
    for &(_, _, k) in &slices.starts {
        if let Some(&(start, _)) = first.get(&k) {
            floor = floor.max(start);
            if let Some(last) = out.last_mut() {
                last.2 = floor;
            }
            out.push((k, floor, floor));
        }
    }
    if let Some(last) = out.last_mut() {
        last.2 = first[&last.0].1.max(last.1);
    }
    out
}

/// The length of `busy` (a union) inside `[start, end)`.
fn busy_within(busy: &[(i64, i64)], start: i64, end: i64) -> i64 {
    let from = busy.partition_point(|s| s.1 <= start);
    busy[from..]
        .iter()
        .take_while(|s| s.0 < end)
        .map(|s| s.1.min(end) - s.0.max(start))
        .sum()
}

/// The figures of each step of `steps` ((start where known, dur), ns, file order) from the
/// rank's GPU activities `a` and the bytes of its memory activities (`(index, bytes)`).
pub(crate) fn step_figures(
    steps: &[(Option<i64>, i64)],
    a: &impl Activities,
    memory_bytes: &[(u32, i64)],
) -> RankSteps {
    let rows: Vec<GpuRow> = (0..a.count()).map(|i| a.row(i)).collect();
    let slices = Slices::of(steps);
    let launched_by = launching_steps(a, &rows, &slices);
    let windows = windows(&rows, &launched_by, &slices);
    let busy = union(rows.iter().map(|r| (r.start, r.end)).collect());
    let mut out = vec![StepFigures::default(); steps.len()];
    for &(k, start, end) in &windows {
        out[k].gpu_busy_ns = Some(busy_within(&busy, start, end));
    }
    // Each activity's step: the one that launched it, else the window of its start.
    let step_of = |i: usize| {
        launched_by[i].or_else(|| {
            let w = windows.partition_point(|w| w.1 <= rows[i].start);
            let (k, _, end) = *windows.get(w.checked_sub(1)?)?;
            (rows[i].start < end).then_some(k)
        })
    };
    let mut names: HashMap<u32, u32> = HashMap::new();
    let mut table: Vec<(String, &'static str)> = Vec::new();
    let mut counts: Vec<HashMap<u32, u32>> = vec![HashMap::new(); steps.len()];
    for (i, r) in rows.iter().enumerate() {
        let Some(k) = step_of(i) else { continue };
        let id = *names.entry(r.name).or_insert_with(|| {
            table.push((a.name(r.name).into_owned(), r.kind.label()));
            table.len() as u32 - 1
        });
        *counts[k].entry(id).or_default() += 1;
    }
    for &(i, bytes) in memory_bytes {
        let r = &rows[i as usize];
        if r.kind != Kind::Memory {
            continue;
        }
        if let (Some(k), Some(d)) = (step_of(i as usize), direction(&a.name(r.name))) {
            out[k].memcpy_bytes[d] = out[k].memcpy_bytes[d].saturating_add(bytes);
        }
    }
    for (step, found) in out.iter_mut().zip(counts) {
        step.launched = found.into_iter().collect();
        step.launched.sort_unstable();
    }
    RankSteps {
        names: table,
        steps: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_come_from_the_name() {
        let of = |n: &str| direction(n).map(|d| DIRECTIONS[d]);
        assert_eq!(of("Memcpy HtoD (Pageable -> Device)"), Some("HtoD"));
        assert_eq!(of("Memcpy DtoH (Device -> Pinned)"), Some("DtoH"));
        assert_eq!(of("Memcpy DtoD (Device -> Device)"), Some("DtoD"));
        assert_eq!(of("Memcpy PtoP (Device -> Device)"), Some("other"));
        assert_eq!(of("Memset (Device)"), None);
    }
}
