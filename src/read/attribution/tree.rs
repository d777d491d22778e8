//! The call tree of one trace's host events and the GPU work each operator owns: nesting by
//! time per thread, launches linked to GPU activities, backward operators linked to their
//! forward ones.

use std::collections::HashMap;

use super::collect::{Collected, GpuEvent, HostEvent, HostKind};
use super::{Attribution, Op};
use crate::read::intervals::{length, union};

/// How far (ns) a child may end after its parent and still nest in it: timestamps of
/// nested events are rounded independently, so a child can "bleed" past its parent by a
/// fraction of a µs (TraceLens accepts under 1 µs too).
pub(crate) const BLEED_NS: i64 = 1000;

/// Names of the graph launches: each takes every GPU activity of its correlation.
const GRAPH_LAUNCHES: [&str; 2] = ["cudaGraphLaunch", "hipGraphLaunch"];

/// The prefix of the autograd engine's backward frames.
pub(crate) const BACKWARD_FRAME: &str = "autograd::engine::evaluate_function:";

/// The parent of each host event (an index into `hosts`), by time containment per thread:
/// events are taken in order of start (file order on ties); an event that starts at or
/// after the end of the innermost open event closes it; an event that ends more than
/// [`BLEED_NS`] after the innermost open one is left out of the tree (no parent, no
/// children).
fn nest(hosts: &[HostEvent]) -> Vec<Option<u32>> {
    let mut order: Vec<u32> = (0..hosts.len() as u32).collect();
    order.sort_by_key(|&i| (hosts[i as usize].start, hosts[i as usize].uid));
    let mut parent = vec![None; hosts.len()];
    let mut stacks: HashMap<u32, Vec<u32>> = HashMap::new();
    for i in order {
        let ev = &hosts[i as usize];
        let stack = stacks.entry(ev.thread).or_default();
        while let Some(&top) = stack.last() {
            if ev.start >= hosts[top as usize].end {
                stack.pop();
            } else {
                break;
            }
        }
        if let Some(&top) = stack.last() {
            if ev.end > hosts[top as usize].end + BLEED_NS {
                continue;
            }
            parent[i as usize] = Some(top);
        }
        stack.push(i);
    }
    parent
}

/// The value that links a launch to its GPU activity.
fn link(by_correlation: bool, correlation: Option<i64>, external_id: Option<i64>) -> Option<i64> {
    if by_correlation {
        correlation
    } else {
        external_id
    }
}

/// The GPU activities (indices into `c.gpu`) each runtime call launched: through the end of
/// its flow (the activity on the flow end's thread with the launch's link value), or, for a
/// graph launch, every activity with its correlation.
fn launched(c: &Collected) -> Vec<(u32, Vec<u32>)> {
    let by_corr = c.link_by_correlation.unwrap_or(false);
    let mut on_thread: HashMap<(u32, i64), u32> = HashMap::new();
    let mut by_correlation: HashMap<i64, Vec<u32>> = HashMap::new();
    for (i, g) in c.gpu.iter().enumerate() {
        if let Some(v) = link(by_corr, g.correlation, g.external_id) {
            on_thread.insert((g.thread, v), i as u32);
        }
        if let Some(corr) = g.correlation {
            by_correlation.entry(corr).or_default().push(i as u32);
        }
    }
    let mut out = Vec::new();
    for (h, ev) in c.hosts.iter().enumerate() {
        if ev.kind != HostKind::Runtime {
            continue;
        }
        let Some(v) = link(by_corr, ev.correlation, ev.external_id) else {
            continue;
        };
        let gpu = if GRAPH_LAUNCHES.contains(&&*c.names[ev.name as usize]) {
            by_correlation.get(&v).cloned().unwrap_or_default()
        } else if c.flow_starts.contains(&v) {
            c.flow_ends
                .get(&v)
                .and_then(|&t| on_thread.get(&(t, v)))
                .map(|&g| vec![g])
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if !gpu.is_empty() {
            out.push((h as u32, gpu));
        }
    }
    out
}

/// Builds the operators of `c`: each with its nearest operator ancestor, the GPU activities
/// of its whole subtree, and its backward frames.
pub(crate) fn build(mut c: Collected) -> Attribution {
    let parent = nest(&c.hosts);
    let launches = launched(&c);
    // Host index -> operator index.
    let mut op_of = vec![u32::MAX; c.hosts.len()];
    let mut ops: Vec<Op> = Vec::new();
    for (h, ev) in c.hosts.iter_mut().enumerate() {
        if ev.kind == HostKind::Op {
            op_of[h] = ops.len() as u32;
            ops.push(Op::from_host(ev));
        }
    }
    for (h, p) in parent.iter().enumerate() {
        if op_of[h] == u32::MAX {
            continue;
        }
        let mut up = *p;
        while let Some(q) = up {
            if op_of[q as usize] != u32::MAX {
                ops[op_of[h] as usize].parent = Some(op_of[q as usize]);
                break;
            }
            up = parent[q as usize];
        }
    }
    for (h, gpu) in launches {
        let (mut up, mut innermost) = (parent[h as usize], true);
        while let Some(q) = up {
            if let Some(op) = ops.get_mut(op_of[q as usize] as usize) {
                op.gpu.extend_from_slice(&gpu);
                if innermost {
                    op.own_gpu.extend_from_slice(&gpu);
                    innermost = false;
                }
            }
            up = parent[q as usize];
        }
    }
    for op in &mut ops {
        for list in [&mut op.gpu, &mut op.own_gpu] {
            list.sort_unstable();
            list.dedup();
        }
    }
    self_times(&mut ops);
    link_backward(&mut ops, &c.names);
    Attribution {
        names: c.names,
        ops,
        gpu: c.gpu,
        devices: c.devices,
        distributed_rank: c.distributed_rank,
    }
}

/// Each operator's self time: its duration less its child operators' spans clipped to it
/// (children nested on one thread never overlap each other: a later one starting inside
/// an earlier one nests in it).
fn self_times(ops: &mut [Op]) {
    for i in 0..ops.len() {
        let Some(p) = ops[i].parent else {
            continue;
        };
        let (start, end) = (ops[i].start, ops[i].end);
        let parent = &mut ops[p as usize];
        let clipped = end.min(parent.end) - start.max(parent.start);
        parent.self_ns -= clipped.max(0);
    }
    for op in ops.iter_mut() {
        op.self_ns = op.self_ns.max(0);
    }
}

/// Links each backward frame (`autograd::engine::evaluate_function: ...` with a `Sequence
/// number`) to its forward operator: of the other operators with that number on another
/// thread, the one that started last.
fn link_backward(ops: &mut [Op], names: &[Box<str>]) {
    let mut frames = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if op.sequence.is_some() && names[op.name as usize].starts_with(BACKWARD_FRAME) {
            frames.push(i as u32);
        }
    }
    // Candidates per number, for the thread test below.
    let mut candidates: HashMap<i64, Vec<u32>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if let Some(seq) = op.sequence {
            if !names[op.name as usize].starts_with(BACKWARD_FRAME) {
                candidates.entry(seq).or_default().push(i as u32);
            }
        }
    }
    for f in frames {
        let frame = &ops[f as usize];
        let (seq, thread) = (frame.sequence.unwrap_or_default(), frame.thread);
        let best = candidates.get(&seq).and_then(|list| {
            list.iter()
                .copied()
                .filter(|&i| ops[i as usize].thread != thread)
                .max_by_key(|&i| (ops[i as usize].start, ops[i as usize].uid))
        });
        if let Some(fwd) = best {
            ops[f as usize].forward = Some(fwd);
            ops[fwd as usize].backward.push(f);
        }
    }
}

/// The GPU activities of some operators' subtrees, once each, in index order.
pub(crate) fn union_of(ops: &[Op], which: &[u32]) -> Vec<u32> {
    let mut all: Vec<u32> = which
        .iter()
        .flat_map(|&i| ops[i as usize].gpu.iter().copied())
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Busy time (ns) of some GPU activities: the length of the union of their intervals.
pub(crate) fn busy_ns(gpu: &[GpuEvent], which: &[u32]) -> i64 {
    let spans = which
        .iter()
        .map(|&i| (gpu[i as usize].start, gpu[i as usize].end));
    length(&union(spans.collect()))
}

/// [`busy_ns`] as a float-based tool computes it (µs, `ts + dur` in floats at the trace's
/// absolute times): what TraceLens reports, its rounding included.
pub(crate) fn busy_us_float(gpu: &[GpuEvent], which: &[u32]) -> f64 {
    let spans = which.iter().map(|&i| {
        let g = &gpu[i as usize];
        (g.ts_us, g.ts_us + g.dur_us)
    });
    length(&union(spans.collect()))
}
