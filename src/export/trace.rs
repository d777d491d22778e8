//! The data the exporter works on: what the first pass keeps of every activity, the summary
//! it produces, and the columnar batches of the second pass.
//!
//! Formatting is a pure function of ([`Summary`], [`Batch`]), so batches can be formatted
//! on any thread, in any order, and their outputs concatenated in order.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::export::graphs::GraphAnnotations;

/// Trace categories whose own correlation id is not written as "External id".
pub(crate) const EXTERNAL_ID_EXCLUDED: [&[u8]; 7] = [
    b"gpu_memcpy",
    b"gpu_memset",
    b"kernel",
    b"cuda_runtime",
    b"cuda_driver",
    b"privateuse1_runtime",
    b"privateuse1_driver",
];

/// The trimonth interval Kineto and torch floor the time base to, in seconds.
pub(crate) const TRIMONTH_SECONDS: i128 = 7_889_238;

/// The time base for a trace whose earliest time is `earliest_ns`: that time floored to a
/// trimonth interval, in nanoseconds (the same floor torch applies to the wall clock).
pub(crate) fn trimonth_base_ns(earliest_ns: i128) -> i128 {
    let secs = earliest_ns.div_euclid(1_000_000_000);
    secs.div_euclid(TRIMONTH_SECONDS) * TRIMONTH_SECONDS * 1_000_000_000
}

/// Whether the activity's own correlation id is needed: only when it has no linked id and
/// its category is not one of the excluded ones.
#[inline]
pub(crate) fn needs_correlation_id(category: &[u8], linked_correlation_id: i64) -> bool {
    linked_correlation_id == 0 && !EXTERNAL_ID_EXCLUDED.contains(&category)
}

/// Whether the activity is a kernel (its linked activity may carry comms metadata).
#[inline]
pub(crate) fn is_kernel(category: &[u8]) -> bool {
    category == b"kernel"
}

/// Torch's thread id sanitising: `|tid|`, with `i64::MIN` (no thread) mapped to 0.
#[inline]
pub(crate) fn sanitize_tid(tid: i64) -> i64 {
    if tid == i64::MIN {
        0
    } else {
        tid.abs()
    }
}

/// What the first pass keeps of one activity: 32 bytes, read once and reused when the
/// activity is formatted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    pub(crate) device: i64,
    /// Already sanitised (see [`sanitize_tid`]).
    pub(crate) tid: i64,
    pub(crate) ts: i64,
    pub(crate) dur: i64,
}

/// Accumulates the first pass: timings in order, the first timestamp seen per device and
/// per (device, thread), the earliest start and the latest end.
#[derive(Debug)]
pub(crate) struct FirstPass {
    timings: Vec<Timing>,
    devices: BTreeMap<i64, i64>,
    threads: BTreeMap<(i64, i64), i64>,
    min_ts: i128,
    max_end: i128,
    /// Activities of later slices merged in with [`FirstPass::merge`].
    merged_activities: usize,
    // The last keys seen, to skip most map lookups (activities come in runs).
    last_device: Option<i64>,
    last_thread: Option<(i64, i64)>,
}

impl Default for FirstPass {
    fn default() -> Self {
        FirstPass {
            timings: Vec::new(),
            devices: BTreeMap::new(),
            threads: BTreeMap::new(),
            // Torch starts from 2**63 and 0.
            min_ts: 1i128 << 63,
            max_end: 0,
            merged_activities: 0,
            last_device: None,
            last_thread: None,
        }
    }
}

impl FirstPass {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        self.timings.reserve(additional);
    }

    /// Adds one activity as read from its accessors (`resource_id` not yet sanitised).
    #[inline]
    pub(crate) fn push(&mut self, device: i64, resource_id: i64, ts: i64, dur: i64) {
        let tid = sanitize_tid(resource_id);
        let ts128 = i128::from(ts);
        self.min_ts = self.min_ts.min(ts128);
        self.max_end = self.max_end.max(ts128 + i128::from(dur.max(0)));
        if self.last_device != Some(device) {
            self.devices.entry(device).or_insert(ts);
            self.last_device = Some(device);
        }
        if self.last_thread != Some((device, tid)) {
            self.threads.entry((device, tid)).or_insert(ts);
            self.last_thread = Some((device, tid));
        }
        self.timings.push(Timing {
            device,
            tid,
            ts,
            dur,
        });
    }

    /// The earliest activity timestamp, if there is any activity.
    pub(crate) fn min_ts(&self) -> Option<i64> {
        (self.timings.len() + self.merged_activities > 0).then_some(self.min_ts as i64)
    }

    /// What another process needs of this slice's first pass to merge it.
    pub(crate) fn partial(&self) -> PartialSummary {
        PartialSummary {
            activities: self.timings.len() + self.merged_activities,
            min_ts: self.min_ts,
            max_end: self.max_end,
            devices: self.devices.iter().map(|(&k, &v)| (k, v)).collect(),
            threads: self.threads.iter().map(|(&k, &v)| (k, v)).collect(),
        }
    }

    /// Merges the first pass of the slice that follows this one (slices are merged in
    /// order, so a device's or thread's first timestamp stays the first in the trace).
    pub(crate) fn merge(&mut self, later: &PartialSummary) {
        for &(device, ts) in &later.devices {
            self.devices.entry(device).or_insert(ts);
        }
        for &(key, ts) in &later.threads {
            self.threads.entry(key).or_insert(ts);
        }
        self.min_ts = self.min_ts.min(later.min_ts);
        self.max_end = self.max_end.max(later.max_end);
        self.merged_activities += later.activities;
    }

    /// Freezes the first pass into the summary every batch is formatted against.
    pub(crate) fn finish(self, base_ns: i128, host_pid: i64) -> Summary {
        Summary {
            base_ns,
            host_pid,
            total_activities: self.timings.len() + self.merged_activities,
            timings: self.timings,
            devices: self.devices.into_iter().collect(),
            threads: self.threads.into_iter().collect(),
            min_ts: self.min_ts,
            max_end: self.max_end,
            graphs: None,
        }
    }
}

/// A slice's first pass as another process sends it for merging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartialSummary {
    pub(crate) activities: usize,
    pub(crate) min_ts: i128,
    pub(crate) max_end: i128,
    pub(crate) devices: Vec<(i64, i64)>,
    pub(crate) threads: Vec<((i64, i64), i64)>,
}

/// The result of the first pass, shared read-only by everything that formats.
#[derive(Debug)]
pub(crate) struct Summary {
    pub(crate) base_ns: i128,
    /// The pid of the exporting process: activities on this device are the CPU.
    pub(crate) host_pid: i64,
    /// Activities in the whole trace (this process's slice and the merged ones).
    pub(crate) total_activities: usize,
    /// Timings of this process's own slice, in order.
    pub(crate) timings: Vec<Timing>,
    /// (device, first ts), sorted by device.
    pub(crate) devices: Vec<(i64, i64)>,
    /// ((device, tid), first ts), sorted.
    pub(crate) threads: Vec<((i64, i64), i64)>,
    pub(crate) min_ts: i128,
    pub(crate) max_end: i128,
    /// CUDA-graph annotations to bake in (None: events are written as reported).
    pub(crate) graphs: Option<GraphAnnotations>,
}

impl Summary {
    /// Activities this process formats (its own slice).
    pub(crate) fn activity_count(&self) -> usize {
        self.timings.len()
    }
}

/// A column of strings packed in one buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct StrColumn {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl StrColumn {
    pub(crate) fn with_capacity(items: usize, bytes: usize) -> Self {
        StrColumn {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(items),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, s: &[u8]) {
        self.bytes.extend_from_slice(s);
        self.ends.push(self.bytes.len());
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(move |i| self.get(i))
    }
}

impl<S: AsRef<[u8]>> FromIterator<S> for StrColumn {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut col = StrColumn::default();
        for s in iter {
            col.push(s.as_ref());
        }
        col
    }
}

/// A flow endpoint of an activity with `flow_id > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flow {
    pub(crate) flow_type: i64,
    pub(crate) start: bool,
}

/// One batch of the second pass: activities `start .. start + len` of the summary.
///
/// Some fields are read only where the format needs them, so their columns are shorter:
/// `correlation_ids` has one entry per activity for which [`needs_correlation_id`] holds,
/// `flows` one per activity with `flow_id > 0`, `comms_metadata` one per kernel (the
/// linked `record_param_comms` activity's metadata, empty when there is none), each in
/// activity order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Batch {
    pub(crate) start: usize,
    pub(crate) categories: StrColumn,
    pub(crate) names: StrColumn,
    pub(crate) metadata: StrColumn,
    pub(crate) linked_correlation_ids: Vec<i64>,
    pub(crate) flow_ids: Vec<i64>,
    pub(crate) correlation_ids: Vec<i64>,
    pub(crate) flows: Vec<Flow>,
    pub(crate) comms_metadata: StrColumn,
}

impl Batch {
    pub(crate) fn len(&self) -> usize {
        self.categories.len()
    }

    /// Checks that the columns fit each other and the summary, so formatting cannot index
    /// out of bounds whatever the caller handed in.
    pub(crate) fn validate(&self, summary: &Summary) -> Result<()> {
        let n = self.len();
        let end = self.start.checked_add(n);
        if end.is_none_or(|end| end > summary.activity_count()) {
            return Err(Error::InvalidArgument(format!(
                "batch of {n} activities at {} goes past the {} activities of the first pass",
                self.start,
                summary.activity_count()
            )));
        }
        let same_len = [
            ("names", self.names.len()),
            ("metadata", self.metadata.len()),
            ("linked correlation ids", self.linked_correlation_ids.len()),
            ("flow ids", self.flow_ids.len()),
        ];
        for (what, len) in same_len {
            if len != n {
                return Err(Error::InvalidArgument(format!(
                    "batch column {what} has {len} entries, expected {n}"
                )));
            }
        }
        // How many activities need each conditional read (the rule the reader follows:
        // `needs_correlation_id`, a positive flow id, `is_kernel`).
        let (mut correlation, mut flows, mut kernels) = (0, 0, 0);
        for i in 0..n {
            let cat = self.categories.get(i);
            correlation += usize::from(needs_correlation_id(cat, self.linked_correlation_ids[i]));
            flows += usize::from(self.flow_ids[i] > 0);
            kernels += usize::from(is_kernel(cat));
        }
        let selected = [
            ("correlation ids", self.correlation_ids.len(), correlation),
            ("flows", self.flows.len(), flows),
            ("comms metadata", self.comms_metadata.len(), kernels),
        ];
        for (what, len, expected) in selected {
            if len != expected {
                return Err(Error::InvalidArgument(format!(
                    "batch column {what} has {len} entries, expected {expected}"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimonth_floor() {
        assert_eq!(trimonth_base_ns(0), 0);
        let t = 1_796_028_311_502_385_758i128;
        let base = trimonth_base_ns(t);
        assert_eq!(base % (TRIMONTH_SECONDS * 1_000_000_000), 0);
        assert!(base <= t && t - base < TRIMONTH_SECONDS * 1_000_000_000);
        // Negative times floor downwards, as Python's // does.
        assert_eq!(trimonth_base_ns(-1), -TRIMONTH_SECONDS * 1_000_000_000);
    }

    #[test]
    fn tid_sanitising() {
        assert_eq!(sanitize_tid(i64::MIN), 0);
        assert_eq!(sanitize_tid(-5), 5);
        assert_eq!(sanitize_tid(i64::MAX), i64::MAX);
    }

    #[test]
    fn first_pass_keeps_first_timestamps_and_extremes() {
        let mut fp = FirstPass::new();
        fp.push(7, 1, 100, 10);
        fp.push(7, -2, 50, -5);
        fp.push(0, 3, 200, 30);
        fp.push(7, 1, 10, 1);
        let s = fp.finish(0, 7);
        assert_eq!(s.devices, vec![(0, 200), (7, 100)]);
        assert_eq!(s.threads, vec![((0, 3), 200), ((7, 1), 100), ((7, 2), 50)]);
        assert_eq!(s.min_ts, 10);
        assert_eq!(s.max_end, 230);
        assert_eq!(s.timings[1].tid, 2);
    }

    #[test]
    fn empty_first_pass_matches_torch_initial_values() {
        let fp = FirstPass::new();
        assert_eq!(fp.min_ts(), None);
        let s = fp.finish(0, 1);
        assert_eq!(s.min_ts, 1i128 << 63);
        assert_eq!(s.max_end, 0);
    }

    #[test]
    fn merging_slices_equals_one_pass() {
        let acts: Vec<(i64, i64, i64, i64)> = (0..50)
            .map(|i| (i % 3 - 1, (i * 7) % 5, 1000 - i * 13, (i % 4) - 1))
            .collect();
        let mut whole = FirstPass::new();
        for &(d, r, t, u) in &acts {
            whole.push(d, r, t, u);
        }
        let whole = whole.finish(0, 1);
        for cut in [0, 1, 17, 49, 50] {
            let (mut head, mut tail) = (FirstPass::new(), FirstPass::new());
            for &(d, r, t, u) in &acts[..cut] {
                head.push(d, r, t, u);
            }
            for &(d, r, t, u) in &acts[cut..] {
                tail.push(d, r, t, u);
            }
            head.merge(&tail.partial());
            let merged = head.finish(0, 1);
            assert_eq!(merged.devices, whole.devices, "cut {cut}");
            assert_eq!(merged.threads, whole.threads, "cut {cut}");
            assert_eq!(
                (merged.min_ts, merged.max_end),
                (whole.min_ts, whole.max_end)
            );
            assert_eq!(merged.total_activities, 50);
            assert_eq!(merged.activity_count(), cut);
        }
    }

    #[test]
    fn validation_counts_the_conditional_reads() {
        let mut fp = FirstPass::new();
        for i in 0..3 {
            fp.push(0, 0, i, 1);
        }
        let summary = fp.finish(0, 0);
        let mut b = Batch {
            start: 0,
            categories: ["cpu_op", "kernel", "cuda_runtime"].into_iter().collect(),
            names: ["a", "b", "c"].into_iter().collect(),
            metadata: ["", "", ""].into_iter().collect(),
            linked_correlation_ids: vec![0, 0, 0],
            flow_ids: vec![0, 5, 5],
            ..Batch::default()
        };
        assert!(b.validate(&summary).is_err());
        b.correlation_ids = vec![9];
        b.flows = vec![
            Flow {
                flow_type: 2,
                start: false
            };
            2
        ];
        b.comms_metadata = [""].into_iter().collect();
        b.validate(&summary).unwrap();
        // Only the cpu_op needs its correlation id (kernels and runtime calls are excluded).
        b.correlation_ids = vec![9, 10];
        assert!(b.validate(&summary).is_err());
        b.correlation_ids = vec![9];
        b.start = 1;
        assert!(b.validate(&summary).is_err());
    }
}
