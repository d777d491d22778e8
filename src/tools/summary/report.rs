//! The figures of one rank, in µs, as the bindings hand them to Python.
//!
//! One name per figure: each field here is named as the Python dataclass field and the
//! JSON key of `kinetrace summary --json` (`docs/summary.md`), and `named()` gives the
//! binding those names, so a figure is added in one struct and one list (CONTRIBUTING,
//! "Adding a summary figure").

use std::path::PathBuf;

/// A struct of figures in µs and `named()`: each field with its name, the name the binding,
/// the Python dataclass and the JSON use (written once, here).
macro_rules! figures {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq)]
        pub(crate) struct $name {
            $($(#[$fmeta])* pub(crate) $field: f64,)+
        }

        impl $name {
            /// Each field with its name, in declaration order.
            pub(crate) fn named(&self) -> Vec<(&'static str, f64)> {
                vec![$((stringify!($field), self.$field)),+]
            }
        }
    };
}

/// One GPU activity name's totals (`kinetrace.KernelStats`: `name`, `type`, `count` and
/// the times, flat).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelStats {
    pub(crate) name: String,
    /// COMPUTATION, COMMUNICATION or MEMORY.
    pub(crate) r#type: &'static str,
    pub(crate) count: u64,
    pub(crate) times: KernelTimes,
}

figures! {
    /// An activity name's time: total, mean, shortest and longest.
    KernelTimes { sum_us, mean_us, min_us, max_us }
}

figures! {
    /// A stream's idle time by cause (`kinetrace.StreamIdle`).
    StreamIdle { host_wait_us, kernel_wait_us, other_us }
}

figures! {
    /// Idle, compute, non-compute and kernel time (`kinetrace.TemporalBreakdown`).
    TemporalBreakdown { idle_time_us, compute_time_us, non_compute_time_us, kernel_time_us }
}

/// The figures a rule set computes for one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    pub(crate) temporal_breakdown: TemporalBreakdown,
    /// label -> µs, in the order COMPUTATION, COMMUNICATION, MEMORY masks.
    pub(crate) kernel_types: Vec<(String, f64)>,
    pub(crate) kernels: Vec<KernelStats>,
    pub(crate) comm_comp_overlap_pct: Option<f64>,
    /// stream (decimal) -> idle time, streams in numeric order.
    pub(crate) idle_time: Vec<(String, StreamIdle)>,
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
