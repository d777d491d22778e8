//! The instance rows of every rank, each with the time and peak its roofline uses, and
//! their groups by (name, bwd, `Input Dims`, `Input type`) ranked by the GPU time they
//! could save at their roofline (docs/ops.md, "Groups").

use std::collections::HashMap;

use super::peaks::{Gpu, Precision};
use super::rates::{rates, Rates};
use super::roofline::{peak_of, GpuChoice};
use super::{Coverage, InstanceRow, RankReport, Rules, Table};

/// An instance row of one rank, measured against its rank's GPU.
#[derive(Debug, Clone)]
pub(crate) struct RankedRow {
    pub(crate) row: InstanceRow,
    pub(crate) rank: i64,
    /// The time the rates use, µs: `kernel_time_ns` / 1000 under `exact`, TraceLens's
    /// float `kernel_time_us` under `tracelens`.
    pub(crate) time_us: f64,
    /// The peak its family and main operand run at on its rank's GPU.
    pub(crate) peak: Option<(Precision, f64)>,
    /// Its roofline against that peak and that GPU's bandwidth.
    pub(crate) rates: Rates,
}

impl RankedRow {
    pub(crate) fn new(row: InstanceRow, rank: i64, rules: Rules, gpu: Option<&Gpu>) -> Self {
        let time_us = match rules {
            Rules::TraceLens => row.kernel_us,
            Rules::Exact => row.kernel_ns as f64 / 1e3,
        };
        let peak = gpu.and_then(|g| peak_of(g, row.table, row.input_type.as_deref()));
        let (flops, bytes) = (
            row.figures.map(|f| f.flops),
            row.figures.and_then(|f| f.bytes),
        );
        let bandwidth = gpu.map(|g| g.device_bandwidth_tbs());
        let rates = rates(flops, bytes, time_us, peak.map(|(_, v)| v), bandwidth);
        RankedRow {
            row,
            rank,
            time_us,
            peak,
            rates,
        }
    }

    fn flops(&self) -> Option<f64> {
        self.row.figures.map(|f| f.flops)
    }

    fn bytes(&self) -> Option<f64> {
        self.row.figures.and_then(|f| f.bytes)
    }
}

/// The rows of one (name, bwd, inputs): its first row's figures, the instances' times.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    pub(crate) name: String,
    pub(crate) table: Table,
    pub(crate) bwd: bool,
    pub(crate) input_dims: Option<Box<str>>,
    pub(crate) input_type: Option<Box<str>>,
    pub(crate) count: usize,
    /// Sum, mean, median, least and most of the instances' times, µs.
    pub(crate) time_us: f64,
    pub(crate) mean_us: f64,
    pub(crate) median_us: f64,
    pub(crate) min_us: f64,
    pub(crate) max_us: f64,
    /// Per instance (one set of inputs, one set of figures).
    pub(crate) flops: Option<f64>,
    pub(crate) bytes: Option<f64>,
    pub(crate) peak: Option<(Precision, f64)>,
    /// Over the summed FLOPs, bytes and time.
    pub(crate) rates: Rates,
    /// `time_us` less the summed time at the roofline (at least 0); `None` without one.
    pub(crate) saveable_us: Option<f64>,
}

type Key<'a> = (&'a str, bool, Option<&'a str>, Option<&'a str>);

/// The median of some times (the mean of the middle two for an even count).
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let mid = times.len() / 2;
    if times.len() % 2 == 1 {
        times[mid]
    } else {
        (times[mid - 1] + times[mid]) / 2.0
    }
}

fn group_of(rows: &[&RankedRow], bandwidth: Option<f64>) -> Group {
    let first = rows[0];
    let mut times: Vec<f64> = rows.iter().map(|r| r.time_us).collect();
    let total: f64 = times.iter().sum();
    // Summed in row order, a missing figure as 0 once the first row has it.
    let sum = |f: fn(&RankedRow) -> Option<f64>| {
        f(first).map(|_| rows.iter().map(|r| f(r).unwrap_or(0.0)).sum::<f64>())
    };
    let (flops, bytes) = (sum(RankedRow::flops), sum(RankedRow::bytes));
    let rates = rates(flops, bytes, total, first.peak.map(|(_, v)| v), bandwidth);
    Group {
        name: first.row.name.clone(),
        table: first.row.table,
        bwd: first.row.bwd,
        input_dims: first.row.input_dims.clone(),
        input_type: first.row.input_type.clone(),
        count: rows.len(),
        time_us: total,
        mean_us: total / rows.len() as f64,
        min_us: times.iter().copied().fold(f64::INFINITY, f64::min),
        max_us: times.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        median_us: median(&mut times),
        flops: first.flops(),
        bytes: first.bytes(),
        peak: first.peak,
        rates,
        saveable_us: rates.roof_time_us.map(|roof| (total - roof).max(0.0)),
    }
}

/// What `ops` reports of the ranks' [`RankReport`]s: each rank's (source, rank, GPU), every
/// row measured against its rank's GPU, their [`groups`] against the first rank's
/// bandwidth, and the ranks' [`Coverage`] summed (exact rules).
pub(crate) type Ranked = (
    Vec<(std::path::PathBuf, i64, GpuChoice)>,
    Vec<RankedRow>,
    Vec<Group>,
    Option<Coverage>,
);

/// The rows of `found` (in rank order) ranked and grouped under `rules`: see [`Ranked`].
pub(crate) fn ranked(found: Vec<RankReport>, rules: Rules) -> Ranked {
    let bandwidth = found
        .first()
        .and_then(|f| f.report.gpu.gpu)
        .map(Gpu::device_bandwidth_tbs);
    let mut rows = Vec::new();
    let mut ranks = Vec::new();
    let mut coverage: Option<Coverage> = None;
    for file in found {
        if let Some(c) = &file.report.coverage {
            coverage.get_or_insert_with(Coverage::default).add(c);
        }
        let gpu = file.report.gpu.gpu;
        rows.extend(
            (file.report.rows.into_iter()).map(|r| RankedRow::new(r, file.rank, rules, gpu)),
        );
        ranks.push((file.source, file.rank, file.report.gpu));
    }
    let groups = groups(&rows, bandwidth);
    (ranks, rows, groups, coverage)
}

/// `rows` grouped by (name, bwd, input dims, input types), each group's roofline against
/// its first row's peak and `bandwidth` (TB/s, the report's GPU's); ranked by the time
/// they could save (most first), then the groups without a roofline by time (most first),
/// ties in order of first row.
pub(crate) fn groups(rows: &[RankedRow], bandwidth: Option<f64>) -> Vec<Group> {
    let mut index: HashMap<Key<'_>, usize> = HashMap::new();
    let mut members: Vec<Vec<&RankedRow>> = Vec::new();
    for r in rows {
        let key = (
            r.row.name.as_str(),
            r.row.bwd,
            r.row.input_dims.as_deref(),
            r.row.input_type.as_deref(),
        );
        let at = *index.entry(key).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[at].push(r);
    }
    let mut out: Vec<Group> = members.iter().map(|m| group_of(m, bandwidth)).collect();
    out.sort_by(|a, b| {
        let rank = |g: &Group| (g.saveable_us.is_none(), -g.saveable_us.unwrap_or(0.0));
        let (ra, rb) = (rank(a), rank(b));
        ra.0.cmp(&rb.0)
            .then(ra.1.total_cmp(&rb.1))
            .then((-a.time_us).total_cmp(&-b.time_us))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ops::peaks::gpu_by_user_name;
    use crate::tools::ops::Figures;

    /// A copy of `bytes` bytes (no FLOPs) in `time_us`, or an unmodelled row.
    fn row(name: &str, time_us: f64, bytes: Option<f64>) -> InstanceRow {
        InstanceRow {
            uid: 0,
            name: name.to_string(),
            table: if bytes.is_some() {
                Table::UnaryElementwise
            } else {
                Table::Unmodelled
            },
            bwd: false,
            figures: bytes.map(|b| Figures {
                flops: 0.0,
                bytes: Some(b),
            }),
            kernel_us: time_us,
            kernel_ns: (time_us * 1e3).round() as i64,
            kernel_uids: Vec::new(),
            input_dims: None,
            input_type: Some(r#"["float"]"#.into()),
            device: Some(0),
            collective: false,
        }
    }

    #[test]
    fn ranked_by_saveable_time_not_time() {
        // Bytes only at 1 TB/s: 1e6 bytes take 1 µs at the roof. A long group near its
        // roof ranks after a shorter one far from it; a group without a roofline last.
        let gpu = gpu_by_user_name("h100-sxm").unwrap();
        let ranked = |r| RankedRow::new(r, 0, Rules::TraceLens, Some(gpu));
        let rows: Vec<RankedRow> = [
            row("near", 10.0, Some(10e6)),
            row("near", 12.0, Some(10e6)),
            row("near", 11.0, Some(10e6)),
            row("far", 5.0, Some(1e6)),
            row("unmodelled", 100.0, None),
        ]
        .into_iter()
        .map(ranked)
        .collect();
        let found = groups(&rows, Some(1.0));
        let names: Vec<&str> = found.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["far", "near", "unmodelled"]);
        assert_eq!(found[0].saveable_us, Some(4.0));
        let near = &found[1];
        assert_eq!((near.count, near.time_us, near.mean_us), (3, 33.0, 11.0));
        assert_eq!(
            (near.median_us, near.min_us, near.max_us),
            (11.0, 10.0, 12.0)
        );
        assert_eq!((near.flops, near.bytes), (Some(0.0), Some(10e6)));
        assert_eq!(near.rates.roof_time_us, Some(30.0));
        assert_eq!(near.saveable_us, Some(3.0));
        assert_eq!(near.rates.roof_pct, Some(100.0 * 30.0 / 33.0));
        assert_eq!(near.peak.map(|(p, _)| p.label()), Some("fp32"));
        assert_eq!(found[2].saveable_us, None);
        // Without a GPU: no roofline anywhere, ranked by time.
        let plain: Vec<RankedRow> = rows
            .iter()
            .map(|r| RankedRow::new(r.row.clone(), 0, Rules::TraceLens, None))
            .collect();
        let found = groups(&plain, None);
        let names: Vec<&str> = found.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["unmodelled", "near", "far"]);
        assert!(found.iter().all(|g| g.saveable_us.is_none()));
        // An even count: the median is the mean of the middle two.
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
