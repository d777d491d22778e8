//! The figures of one rank, in µs, as the bindings hand them to Python.

use std::path::PathBuf;

/// One GPU activity name's totals.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelFigures {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) count: u64,
    pub(crate) sum_us: f64,
    pub(crate) mean_us: f64,
    pub(crate) min_us: f64,
    pub(crate) max_us: f64,
}

/// A stream's idle time by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct IdleFigures {
    pub(crate) host_wait_us: f64,
    pub(crate) kernel_wait_us: f64,
    pub(crate) other_us: f64,
}

/// idle, compute, non-compute and kernel time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Temporal {
    pub(crate) idle_us: f64,
    pub(crate) compute_us: f64,
    pub(crate) non_compute_us: f64,
    pub(crate) kernel_us: f64,
}

/// The figures a rule set computes for one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    pub(crate) temporal: Temporal,
    /// label -> µs, in the order COMPUTATION, COMMUNICATION, MEMORY masks.
    pub(crate) kernel_types: Vec<(String, f64)>,
    pub(crate) kernels: Vec<KernelFigures>,
    pub(crate) overlap_pct: Option<f64>,
    /// stream (decimal) -> idle time, streams in numeric order.
    pub(crate) idle: Vec<(String, IdleFigures)>,
    pub(crate) gpu_activities: u64,
}

/// One file's summary.
#[derive(Debug, Clone)]
pub(crate) struct RankSummary {
    pub(crate) source: PathBuf,
    pub(crate) rank: i64,
    pub(crate) rank_from: &'static str,
    pub(crate) figures: Figures,
    /// `ProfilerStep#N` CPU slices in file order: (name, dur µs).
    pub(crate) steps: Vec<(String, f64)>,
    pub(crate) events: u64,
    pub(crate) json_bytes: u64,
    pub(crate) warnings: Vec<String>,
}

/// The label of a sweep segment: the types active in it, in the order COMPUTATION,
/// COMMUNICATION, MEMORY, joined by " overlapping " (HTA's labels).
pub(crate) fn label(mask: u8) -> String {
    let names = ["COMPUTATION", "COMMUNICATION", "MEMORY"];
    let parts: Vec<&str> = (0..3)
        .filter(|k| mask & (1 << k) != 0)
        .map(|k| names[k])
        .collect();
    parts.join(" overlapping ")
}

/// ns as µs: the double nearest to `ns / 1000` (so a whole number of ns prints as its exact
/// decimal).
pub(crate) fn us(ns: i64) -> f64 {
    const EXACT: i64 = 1 << 53;
    if (-EXACT..=EXACT).contains(&ns) {
        return ns as f64 / 1000.0; // `ns` is exact as a double: one rounding, the division's
    }
    // Beyond 2^53 ns (104 days) `ns as f64` would round first: parse the exact decimal.
    let abs = ns.unsigned_abs();
    let sign = if ns < 0 { "-" } else { "" };
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
        .parse()
        .expect("a decimal number")
}

#[cfg(test)]
mod tests {
    use super::us;

    #[test]
    fn microseconds_are_the_nearest_double_to_the_decimal() {
        assert_eq!(us(737_591), 737.591);
        assert_eq!(us(-1_500), -1.5);
        // Past 2^53 ns a conversion to double first would give ...767.996.
        let ns = 9_007_199_254_767_995;
        assert_eq!(us(ns), "9007199254767.995".parse::<f64>().unwrap());
        assert_ne!(us(ns), ns as f64 / 1000.0);
        assert_eq!(
            us(i64::MIN),
            "-9223372036854775.808".parse::<f64>().unwrap()
        );
    }
}
