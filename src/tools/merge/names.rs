//! The merged processes' names and order: one `process_name` and one `process_sort_index`
//! event per process in every output it has events in, rank by rank, CPU processes first,
//! then devices, then the rest.

use crate::error::Result;
use crate::json::render::{push_int, push_json_string, push_json_string_body};

use super::ids::{Process, PID_STRIDE};
use super::ranks::{header_string, Ranked};
use super::write::{write_error, Outputs};
use super::{MergeStats, ProcessStats, RankStats, Timeline};

/// The separator in process names.
const DOT: &str = " \u{b7} ";

/// Names and sorts the processes, rank by rank: a `process_name` and a `process_sort_index`
/// event for each in every output it has events in; each rank's stats.
pub(super) fn name_processes(
    ranked: &mut [Ranked],
    timeline: &Timeline<'_>,
    outs: &mut Outputs,
    stats: &mut MergeStats,
) -> Result<()> {
    let mut sort_index = 0i64;
    let mut naming: Vec<u8> = Vec::new();
    for r in ranked.iter_mut() {
        let host = header_string(&r.done.header, b"host_name").map(<[u8]>::to_vec);
        let mut processes = Vec::with_capacity(r.done.processes.len());
        let label = json_body(&r.label);
        for p in process_order(&r.done.processes) {
            let proc_ = &r.done.processes[p];
            let pid = (r.index as i64 + 1) * PID_STRIDE + p as i64;
            let name = process_name(&label, host.as_deref(), proc_);
            for (part, w) in outs.writers.iter_mut().enumerate() {
                if !r.done.present[p][part] {
                    continue;
                }
                process_name_event(&mut naming, pid, &name);
                w.event(&naming)
                    .map_err(|e| write_error(&outs.finals[part], e))?;
                process_sort_event(&mut naming, pid, sort_index);
                w.event(&naming)
                    .map_err(|e| write_error(&outs.finals[part], e))?;
            }
            processes.push(ProcessStats {
                source_pid: source_pid_json(&proc_.key),
                pid,
                name: String::from_utf8_lossy(&name).into_owned(),
                sort_index,
            });
            sort_index += 1;
        }
        let i = r.index;
        stats.ranks.push(RankStats {
            source: timeline.sources[i].clone(),
            label: r.label.clone(),
            rank: r.rank,
            rank_from: r.rank_from,
            base_time_ns: timeline.bases[i],
            offset_ns: timeline.offsets[i],
            align_offset_ns: timeline.align[i],
            events_read: r.done.events_read,
            events_written: r.done.events_written,
            json_bytes_read: r.done.json_bytes_read,
            processes,
        });
    }
    Ok(())
}

/// A source's processes in the order they are shown: by class, then their own sort index
/// (or numeric pid), then first appearance.
fn process_order(processes: &[Process]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..processes.len()).collect();
    order.sort_by_key(|&p| {
        let proc_ = &processes[p];
        let pid_num = proc_
            .key
            .strip_prefix(b"n")
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(|t| t.parse::<i64>().ok());
        (
            process_class(proc_),
            proc_.sort_index.or(pid_num).unwrap_or(i64::MAX),
            p,
        )
    });
    order
}

/// What kind of process, for its name and its place in the order.
fn process_class(p: &Process) -> u8 {
    match p.labels.as_deref() {
        Some(b"CPU") => 0,
        Some(_) => 1,
        None if p.key.first() == Some(&b'n') && !p.key[1..].starts_with(b"-") => 0,
        None => 2,
    }
}

/// The merged name of a process (JSON string body): `<label> · ...`.
fn process_name(label: &[u8], host: Option<&[u8]>, p: &Process) -> Vec<u8> {
    let mut name = label.to_vec();
    name.extend_from_slice(DOT.as_bytes());
    let pid_text = p.key.get(1..).unwrap_or(b"");
    match (process_class(p), p.labels.as_deref()) {
        (1, Some(labels)) => name.extend_from_slice(labels),
        (0, _) => {
            if let Some(host) = host {
                name.extend_from_slice(host);
                name.push(b' ');
            }
            name.extend_from_slice(b"pid ");
            push_json_string_body(&mut name, pid_text);
        }
        _ => match (&p.name, p.key.first()) {
            (Some(n), _) => name.extend_from_slice(n),
            (None, None) => name.extend_from_slice(b"(no pid)"),
            (None, Some(_)) if pid_text.is_empty() => name.extend_from_slice(b"pid \\\"\\\""),
            (None, Some(_)) => push_json_string_body(&mut name, pid_text),
        },
    }
    name
}

/// The source pid of a process as JSON.
fn source_pid_json(key: &[u8]) -> String {
    match key.split_first() {
        None => "null".into(),
        Some((b'n', text)) => String::from_utf8_lossy(text).into_owned(),
        Some((_, text)) => {
            let mut out = Vec::new();
            push_json_string(&mut out, text);
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}

/// The `process_name` metadata event of `pid`, into `out`.
fn process_name_event(out: &mut Vec<u8>, pid: i64, name: &[u8]) {
    out.clear();
    out.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
    push_int(out, pid);
    out.extend_from_slice(b",\"tid\":0,\"args\":{\"name\":\"");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\"}}");
}

/// The `process_sort_index` metadata event of `pid`, into `out`.
fn process_sort_event(out: &mut Vec<u8>, pid: i64, sort_index: i64) {
    out.clear();
    out.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":");
    push_int(out, pid);
    out.extend_from_slice(b",\"tid\":0,\"args\":{\"sort_index\":");
    push_int(out, sort_index);
    out.extend_from_slice(b"}}");
}

/// `label` as the body of a JSON string.
fn json_body(label: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_json_string_body(&mut out, label.as_bytes());
    out
}
