//! What a merge writes after the events and reports: the sources' totals, a warning when
//! ranks' spans do not overlap, the common `displayTimeUnit`, and the `kinetrace_merge`
//! record (one entry per rank).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::json::render::{push_int, push_json_string};
use crate::tools::parts::MAX_KEPT_TEXT;

use super::ranks::{header_string, Ranked};
use super::{MergeStats, RankStats};

/// Adds each source's counts to `stats`; an error past [`MAX_KEPT_TEXT`] of top-level keys.
pub(super) fn add_source_totals(ranked: &[Ranked], stats: &mut MergeStats) -> Result<()> {
    let mut header_bytes_all = 0usize;
    for r in ranked {
        stats.events_read += r.done.events_read;
        stats.flow_events_cut += r.done.flow_events_cut;
        stats.json_bytes_read += r.done.json_bytes_read;
        header_bytes_all += r
            .done
            .header
            .iter()
            .map(|(k, raw)| k.len() + raw.len())
            .sum::<usize>();
        if header_bytes_all > MAX_KEPT_TEXT {
            return Err(Error::InvalidArgument(format!(
                "more than {} MiB of top-level keys in the sources",
                MAX_KEPT_TEXT >> 20
            )));
        }
    }
    Ok(())
}

/// Each rank's time span (ns, merged clock), by position in `ranked`; a warning in `stats`
/// when some rank ends before another starts.
pub(super) fn warn_of_apart_spans(
    ranked: &[Ranked],
    sources: &[PathBuf],
    stats: &mut MergeStats,
) -> Vec<(usize, (i128, i128))> {
    let spans: Vec<(usize, (i128, i128))> = ranked
        .iter()
        .enumerate()
        .filter_map(|(k, r)| r.done.span.map(|s| (k, s)))
        .collect();
    if let (Some(late), Some(early)) = (
        spans.iter().max_by_key(|(_, s)| s.0),
        spans.iter().min_by_key(|(_, s)| s.1),
    ) {
        if late.1 .0 > early.1 .1 {
            let (a, b) = (&ranked[early.0], &ranked[late.0]);
            stats.warnings.push(format!(
                "the ranks' time spans do not all overlap: {} ({}) ends at {:.3} us, before {} \
                 ({}) starts at {:.3} us: are they from one run?",
                a.label,
                sources[a.index].display(),
                early.1 .1 as f64 / 1000.0,
                b.label,
                sources[b.index].display(),
                late.1 .0 as f64 / 1000.0
            ));
        }
    }
    spans
}

/// The `displayTimeUnit` every source that has one agrees on.
pub(super) fn common_time_unit(ranked: &[Ranked]) -> Option<Vec<u8>> {
    let units: Vec<&[u8]> = ranked
        .iter()
        .filter_map(|r| header_string(&r.done.header, b"displayTimeUnit"))
        .collect();
    units
        .first()
        .filter(|u| units.iter().all(|v| v == *u))
        .map(|u| u.to_vec())
}

/// The `kinetrace_merge` member written after the events: the base, the alignment, and per
/// rank where it came from and how its pids were mapped.
pub(super) fn merge_record(ranked: &[Ranked], sources: &[PathBuf], stats: &MergeStats) -> Vec<u8> {
    let mut record = b"\"kinetrace_merge\": {\"version\": 1, \"base_time_ns\": ".to_vec();
    push_opt_int(&mut record, stats.base_time_ns);
    record.extend_from_slice(b", \"align\": ");
    match stats.aligned_step {
        Some(step) => {
            record.extend_from_slice(b"\"step\", \"aligned_step\": ");
            push_int(&mut record, step);
        }
        None => record.extend_from_slice(b"null, \"aligned_step\": null"),
    }
    record.extend_from_slice(b", \"ranks\": [");
    for (k, (r, s)) in ranked.iter().zip(&stats.ranks).enumerate() {
        if k > 0 {
            record.push(b',');
        }
        push_rank_record(&mut record, r, s, &sources[r.index]);
    }
    record.extend_from_slice(b"\n]}");
    record
}

/// One rank of the `kinetrace_merge` member.
fn push_rank_record(record: &mut Vec<u8>, r: &Ranked, s: &RankStats, source: &Path) {
    record.extend_from_slice(b"\n{\"label\": ");
    push_json_string(record, r.label.as_bytes());
    record.extend_from_slice(b", \"index\": ");
    push_int(record, r.index);
    record.extend_from_slice(b", \"rank\": ");
    push_opt_int(record, r.rank.map(i128::from));
    record.extend_from_slice(b", \"rank_from\": ");
    push_json_string(record, r.rank_from.as_bytes());
    record.extend_from_slice(b", \"source\": ");
    push_json_string(record, source.to_string_lossy().as_bytes());
    record.extend_from_slice(b", \"base_time_ns\": ");
    push_opt_int(record, s.base_time_ns);
    record.extend_from_slice(b", \"offset_ns\": ");
    push_int(record, s.offset_ns);
    record.extend_from_slice(b", \"align_offset_ns\": ");
    push_int(record, s.align_offset_ns);
    record.extend_from_slice(b", \"events_read\": ");
    push_int(record, s.events_read);
    record.extend_from_slice(b", \"pids\": [");
    for (j, p) in s.processes.iter().enumerate() {
        if j > 0 {
            record.extend_from_slice(b", ");
        }
        record.extend_from_slice(b"{\"source\": ");
        record.extend_from_slice(p.source_pid.as_bytes());
        record.extend_from_slice(b", \"pid\": ");
        push_int(record, p.pid);
        record.extend_from_slice(b", \"name\": \"");
        record.extend_from_slice(p.name.as_bytes());
        record.extend_from_slice(b"\"}");
    }
    record.extend_from_slice(b"], \"header\": {");
    for (j, (_, raw)) in r.done.header.iter().enumerate() {
        if j > 0 {
            record.extend_from_slice(b", ");
        }
        record.extend_from_slice(raw);
    }
    record.extend_from_slice(b"}}");
}

fn push_opt_int(out: &mut Vec<u8>, v: Option<i128>) {
    match v {
        Some(v) => push_int(out, v),
        None => out.extend_from_slice(b"null"),
    }
}
