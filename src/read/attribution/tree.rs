//! The call tree of one trace's host events and the GPU work each operator owns: nesting by
//! time per thread, launches linked to GPU activities, backward operators linked to their
//! forward ones. Each list is freed as soon as what it served is known: the runtime calls
//! and the activities' link values once the launches are resolved, the activities no
//! operator owns then too.

use std::collections::HashMap;

use super::collect::{Collected, GpuDetail, GpuEvent, GpuLink, Links, Op, Runtime, NONE};
use super::{Attribution, Flat};
use crate::read::intervals::{length, union};

/// How far (ns) a child may end after its parent and still nest in it: timestamps of
/// nested events are rounded independently, so a child can "bleed" past its parent by a
/// fraction of a µs (TraceLens accepts under 1 µs too).
pub(crate) const BLEED_NS: i64 = 1000;

/// The prefix of the autograd engine's backward frames.
pub(crate) const BACKWARD_FRAME: &str = "autograd::engine::evaluate_function:";

/// A host event's (start, end, uid, thread); host `h` is operator `h` below `ops.len()`,
/// else runtime call `h - ops.len()`.
fn host(ops: &[Op], runtime: &[Runtime], h: u32) -> (i64, i64, u64, u32) {
    match ops.get(h as usize) {
        Some(o) => (o.start, o.end, o.uid, o.thread),
        None => {
            let r = &runtime[h as usize - ops.len()];
            (r.start, r.end, r.uid, r.thread)
        }
    }
}

/// The parent of each host event (a host index, [`NONE`] for none), by time containment
/// per thread: events are taken in order of start (file order on ties); an event that
/// starts at or after the end of the innermost open event closes it; an event that ends
/// more than [`BLEED_NS`] after the innermost open one is left out of the tree (no
/// parent, no children).
fn nest(ops: &[Op], runtime: &[Runtime]) -> Vec<u32> {
    let total = ops.len() + runtime.len();
    let mut order: Vec<u32> = (0..total as u32).collect();
    // The uids are distinct: an unstable sort gives the one order.
    order.sort_unstable_by_key(|&h| {
        let (start, _, uid, _) = host(ops, runtime, h);
        (start, uid)
    });
    let mut parent = vec![NONE; total];
    let mut stacks: HashMap<u32, Vec<u32>> = HashMap::new();
    for i in order {
        let (start, end, _, thread) = host(ops, runtime, i);
        let stack = stacks.entry(thread).or_default();
        while let Some(&top) = stack.last() {
            if start >= host(ops, runtime, top).1 {
                stack.pop();
            } else {
                break;
            }
        }
        if let Some(&top) = stack.last() {
            if end > host(ops, runtime, top).1 + BLEED_NS {
                continue;
            }
            parent[i as usize] = top;
        }
        stack.push(i);
    }
    parent
}

/// The nearest operator among the ancestors of host `h` (not `h` itself).
fn operator_above(parent: &[u32], ops: usize, h: u32) -> Option<u32> {
    let mut up = parent[h as usize];
    while up != NONE {
        if (up as usize) < ops {
            return Some(up);
        }
        up = parent[up as usize];
    }
    None
}

/// Where to find the GPU activities a launch names: by (thread of the flow's end, link
/// value) the last activity with them, by correlation (graph launches) all of them.
struct Launchable {
    flow_starts: Vec<i64>,
    /// (flow id, thread of its last end), by id.
    flow_ends: Vec<(i64, u32)>,
    /// (thread, link value, activity), sorted.
    on_thread: Vec<(u32, i64, u32)>,
    /// (correlation, activity), sorted; only where the trace has a graph launch.
    by_correlation: Vec<(i64, u32)>,
}

impl Launchable {
    fn new(c: &mut Collected, by_corr: bool, links: &[GpuLink]) -> Launchable {
        let mut flow_starts = std::mem::take(&mut c.flow_starts);
        flow_starts.sort_unstable();
        flow_starts.dedup();
        let mut flow_ends = std::mem::take(&mut c.flow_ends);
        flow_ends.sort_by_key(|&(id, _)| id); // stable: an id's ends stay in file order
        flow_ends.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                *earlier = *later; // the last end counts
            }
            same
        });
        flow_ends.shrink_to_fit();
        // Only link values a flow starts with are ever looked up here.
        let mut on_thread: Vec<(u32, i64, u32)> = links
            .iter()
            .enumerate()
            .filter_map(|(i, g)| Some((g.thread, g.link(by_corr)?, i as u32)))
            .filter(|&(_, v, _)| flow_starts.binary_search(&v).is_ok())
            .collect();
        on_thread.sort_unstable();
        let mut by_correlation = Vec::new();
        if c.runtime.iter().any(Runtime::is_graph_launch) {
            by_correlation = links
                .iter()
                .enumerate()
                .filter_map(|(i, g)| Some((g.correlation()?, i as u32)))
                .collect();
            by_correlation.sort_unstable();
        }
        Launchable {
            flow_starts,
            flow_ends,
            on_thread,
            by_correlation,
        }
    }
}

/// The GPU activities runtime call `r` launched, told to `each`: through the end of its
/// flow (the activity on the flow end's thread with the launch's link value, the last of
/// them in file order), or, for a graph launch, every activity with its correlation.
fn each_launched(l: &Launchable, r: &Runtime, by_corr: bool, each: &mut impl FnMut(u32)) {
    let Some(v) = r.link(by_corr) else {
        return;
    };
    if r.is_graph_launch() {
        let from = l.by_correlation.partition_point(|&(c, _)| c < v);
        let to = l.by_correlation.partition_point(|&(c, _)| c <= v);
        l.by_correlation[from..to]
            .iter()
            .for_each(|&(_, g)| each(g));
    } else if l.flow_starts.binary_search(&v).is_ok() {
        let Ok(end) = l.flow_ends.binary_search_by_key(&v, |&(id, _)| id) else {
            return;
        };
        let t = l.flow_ends[end].1;
        // The last activity with (t, v): the one a map filled in file order keeps.
        let after = l
            .on_thread
            .partition_point(|&(th, val, _)| (th, val) <= (t, v));
        if let Some(&(th, val, g)) = after.checked_sub(1).map(|i| &l.on_thread[i]) {
            if (th, val) == (t, v) {
                each(g);
            }
        }
    }
}

/// Adds to `owned` the activities no launch owns yet that have a correlation
/// (`correlations`, one per activity, -1 for none; empty: none to add): each is owned by
/// the operator above the first runtime call (in file order) with its correlation, the
/// launch `summary` reads of it. A flow that is missing or malformed (a trace that writes
/// its start as a second end) loses no GPU time.
fn own_by_correlation(
    runtime: &[Runtime],
    parent: &[u32],
    ops: usize,
    correlations: &[i64],
    owned: &mut Vec<(u32, u32)>,
) {
    if correlations.is_empty() {
        return;
    }
    let mut linked = vec![false; correlations.len()];
    for &(_, g) in owned.iter() {
        linked[g as usize] = true;
    }
    let mut first_call: HashMap<i64, Option<u32>> = correlations
        .iter()
        .zip(&linked)
        .filter(|&(&c, &l)| c != -1 && !l)
        .map(|(&c, _)| (c, None))
        .collect();
    if first_call.is_empty() {
        return;
    }
    // The runtime calls are in file order: the first one met is the first launch.
    for (j, r) in runtime.iter().enumerate() {
        if let Some(slot @ None) = r.summary_correlation().and_then(|c| first_call.get_mut(&c)) {
            *slot = Some(j as u32);
        }
    }
    for (g, &c) in correlations.iter().enumerate() {
        if c == -1 || linked[g] {
            continue;
        }
        let call = first_call.get(&c).copied().flatten();
        if let Some(op) = call.and_then(|j| operator_above(parent, ops, ops as u32 + j)) {
            owned.push((op, g as u32));
        }
    }
}

/// Builds the operators of `c`: each with its nearest operator ancestor, its self time,
/// the GPU activities it launched itself, and its backward frames (under `Keep::Rows`).
pub(crate) fn build(mut c: Collected) -> Attribution {
    c.drop_lookups();
    let parent = nest(&c.ops, &c.runtime);
    let n = c.ops.len();
    for (i, op) in c.ops.iter_mut().enumerate() {
        if let Some(p) = operator_above(&parent, n, i as u32) {
            op.set_parent(p);
        }
    }
    self_times(&mut c.ops);
    // (operator, activity) of each launch, to the launch's innermost operator.
    // Where no runtime call's name says it launches (MTIA's `runFunction`, `recordEvent`),
    // the first call with either link value decides.
    let by_corr = c
        .link_by_correlation
        .or_else(|| c.runtime.iter().find_map(Runtime::links_by_correlation))
        .unwrap_or(false);
    let links = std::mem::take(&mut c.gpu_links);
    let launchable = Launchable::new(&mut c, by_corr, &links);
    // Each activity's correlation as `summary` reads it, for those no flow reaches.
    let correlations: Vec<i64> = match c.links {
        Links::Flows => Vec::new(),
        Links::FlowsThenCorrelation => links.iter().map(GpuLink::summary_correlation).collect(),
    };
    drop(links);
    let mut owned: Vec<(u32, u32)> = Vec::new();
    for (j, r) in c.runtime.iter().enumerate() {
        let Some(op) = operator_above(&parent, n, (n + j) as u32) else {
            continue;
        };
        each_launched(&launchable, r, by_corr, &mut |g| owned.push((op, g)));
    }
    drop(launchable);
    own_by_correlation(&c.runtime, &parent, n, &correlations, &mut owned);
    drop((correlations, parent, std::mem::take(&mut c.runtime)));
    let kept = kept_activities(c.gpu.len(), &mut owned);
    let gpu = keep(std::mem::take(&mut c.gpu), &kept);
    let gpu_details = keep(std::mem::take(&mut c.gpu_details), &kept);
    drop(kept);
    owned.sort_unstable();
    owned.dedup();
    let own_gpu = Flat::grouped(n, || owned.iter().copied());
    drop(owned);
    let children = Flat::grouped(n, || {
        c.ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| Some((op.parent()?, i as u32)))
    });
    let forward_of = link_backward(&c.ops, &std::mem::take(&mut c.sequences), &c.names);
    let backward = Flat::grouped(n, || forward_of.iter().copied());
    c.ops.shrink_to_fit();
    Attribution {
        names: std::mem::take(&mut c.names),
        arg_sets: std::mem::take(&mut c.args),
        ops: std::mem::take(&mut c.ops),
        own_gpu,
        children,
        backward,
        gpu,
        gpu_details,
        device_ids: std::mem::take(&mut c.device_ids),
        devices: std::mem::take(&mut c.devices),
        distributed_rank: c.distributed_rank,
    }
}

/// Which GPU activities some operator owns (the rest are dropped): per activity its new
/// index, [`NONE`] if dropped; `owned`'s activity indices renumbered to match.
fn kept_activities(activities: usize, owned: &mut [(u32, u32)]) -> Vec<u32> {
    let mut new_index = vec![NONE; activities];
    for &(_, g) in owned.iter() {
        new_index[g as usize] = 0;
    }
    for (next, slot) in new_index.iter_mut().filter(|s| **s == 0).enumerate() {
        *slot = next as u32;
    }
    for (_, g) in owned.iter_mut() {
        *g = new_index[*g as usize];
    }
    new_index
}

/// The items of a list beside the activities that [`kept_activities`] keeps, in order (a
/// list left empty stays so).
fn keep<T>(mut items: Vec<T>, kept: &[u32]) -> Vec<T> {
    let mut i = 0;
    items.retain(|_| {
        i += 1;
        kept[i - 1] != NONE
    });
    items.shrink_to_fit();
    items
}

/// Each operator's self time: its duration less its child operators' spans clipped to it
/// (children nested on one thread never overlap each other: a later one starting inside
/// an earlier one nests in it).
fn self_times(ops: &mut [Op]) {
    for i in 0..ops.len() {
        let Some(p) = ops[i].parent() else {
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
/// thread, the one that started last. `sequences` are (operator, number) in operator
/// order; the links are (forward operator, frame), in frame order.
fn link_backward(ops: &[Op], sequences: &[(u32, i64)], names: &[Box<str>]) -> Vec<(u32, u32)> {
    let is_frame: Vec<bool> = names
        .iter()
        .map(|n| n.starts_with(BACKWARD_FRAME))
        .collect();
    let mut frames = Vec::new();
    // Candidates per number, for the thread test below.
    let mut candidates: HashMap<i64, Vec<u32>> = HashMap::new();
    for &(i, seq) in sequences {
        if is_frame[ops[i as usize].name as usize] {
            frames.push((i, seq));
        } else {
            candidates.entry(seq).or_default().push(i);
        }
    }
    let mut links = Vec::new();
    for (f, seq) in frames {
        let thread = ops[f as usize].thread;
        let best = candidates.get(&seq).and_then(|list| {
            list.iter()
                .copied()
                .filter(|&i| ops[i as usize].thread != thread)
                .max_by_key(|&i| (ops[i as usize].start, ops[i as usize].uid))
        });
        if let Some(fwd) = best {
            links.push((fwd, f));
        }
    }
    links
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
pub(crate) fn busy_us_float(details: &[GpuDetail], which: &[u32]) -> f64 {
    let spans = which.iter().map(|&i| {
        let g = &details[i as usize];
        (g.ts_us, g.ts_us + g.dur_us)
    });
    length(&union(spans.collect()))
}
