//! Which GPU work each CPU operator of a trace owns, read in one streaming pass
//! (`collect`) and put in a call tree (`tree`):
//!
//! - host events (`cpu_op`, `cuda_runtime`, `cuda_driver`) nest per (pid, tid) by time
//!   containment, a child allowed to end up to [`tree::BLEED_NS`] after its parent;
//! - a runtime call owns the GPU activity (`kernel`, `gpu_memcpy`, `gpu_memset`) its `ac2g`
//!   flow ends at (on the flow end's thread, with its link value: `correlation` when the
//!   first launching call carries one, else `External id`); a graph launch
//!   (`cudaGraphLaunch` / `hipGraphLaunch`) owns every activity of its correlation;
//! - an operator owns the GPU activities of every runtime call in its subtree, and its GPU
//!   time is their busy time (the union of their intervals);
//! - an operator's self time is its duration less its child operators' (clipped to it), and
//!   its own GPU activities those of the runtime calls whose innermost operator it is;
//! - a backward frame (`autograd::engine::evaluate_function: ...`) is linked to its forward
//!   operator by `Sequence number`.
//!
//! Times are exact (ns from the decimal text); the GPU activities keep their float `ts` and
//! `dur` too, for tools that reproduce a float-based reading. Shared by `ops` and `diff`.

mod collect;
pub(crate) mod groups;
pub(crate) mod tree;

use std::path::Path;

use crate::error::Result;
use crate::read::events::{read_trace_with, scan_trace, Event, ReadOptions, Visitor};

use collect::{Collected, HostEvent};
pub(crate) use collect::{Device, GpuEvent, OpArgs};

/// One CPU operator.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    /// Index of the event in `traceEvents`.
    pub(crate) uid: u64,
    /// Index into [`Attribution::names`].
    pub(crate) name: u32,
    pub(crate) thread: u32,
    /// Exact start and end, ns.
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// Its own CPU time (ns): its duration less that of the operators nested in it (on its
    /// thread, each clipped to it).
    pub(crate) self_ns: i64,
    /// The nearest enclosing operator (index into [`Attribution::ops`]).
    pub(crate) parent: Option<u32>,
    /// The GPU activities of its subtree (indices into [`Attribution::gpu`]), ascending.
    pub(crate) gpu: Vec<u32>,
    /// Those it launched itself: of runtime calls whose innermost operator it is, so that
    /// each activity is owned by exactly one operator (`aten::addmm`'s kernel is not
    /// `aten::linear`'s too), ascending.
    pub(crate) own_gpu: Vec<u32>,
    pub(crate) sequence: Option<i64>,
    pub(crate) args: OpArgs,
    /// Backward frames linked to it (indices into [`Attribution::ops`]).
    pub(crate) backward: Vec<u32>,
    /// For a backward frame: its forward operator.
    pub(crate) forward: Option<u32>,
}

impl Op {
    /// The operator of a host event, its arguments moved out of it.
    fn from_host(ev: &mut HostEvent) -> Op {
        Op {
            uid: ev.uid,
            name: ev.name,
            thread: ev.thread,
            start: ev.start,
            end: ev.end,
            self_ns: ev.end - ev.start,
            parent: None,
            gpu: Vec::new(),
            own_gpu: Vec::new(),
            sequence: ev.sequence,
            args: ev.args.take().map(|a| *a).unwrap_or_default(),
            backward: Vec::new(),
            forward: None,
        }
    }
}

/// The operators of one trace and the GPU activities they own.
pub(crate) struct Attribution {
    pub(crate) names: Vec<Box<str>>,
    /// In file order.
    pub(crate) ops: Vec<Op>,
    pub(crate) gpu: Vec<GpuEvent>,
    /// The trace's `deviceProperties` (empty where it has none).
    pub(crate) devices: Vec<Device>,
}

impl Attribution {
    pub(crate) fn name(&self, op: &Op) -> &str {
        &self.names[op.name as usize]
    }

    /// The GPU activities of an operator's backward frames' subtrees.
    pub(crate) fn backward_gpu(&self, op: &Op) -> Vec<u32> {
        tree::union_of(&self.ops, &op.backward)
    }
}

/// What attribution keeps of a trace, told by a reader that does other work on the same
/// pass (`parquet`'s `ops` table); [`Collecting::attribution`] once the read is done.
#[derive(Default)]
pub(crate) struct Collecting(Collected);

impl Collecting {
    pub(crate) fn attribution(self) -> Attribution {
        tree::build(self.0)
    }
}

impl Visitor for Collecting {
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        self.0.header(key, raw, after_events)
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.0.event(ev)
    }
}

/// Reads the trace at `path` and attributes its GPU work to its operators; `progress` is
/// told the JSON bytes read so far (its error stops the read).
pub(crate) fn attribute(
    path: &Path,
    options: ReadOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Attribution> {
    let mut collected = Collected::default();
    read_trace_with(path, &mut collected, progress, options)?;
    Ok(tree::build(collected))
}

/// [`attribute`] of a trace that may be damaged after some events: what it holds up to the
/// damage (`diff` reads each file with `summary` first, which warns of it or refuses it).
pub(crate) fn attribute_as_far_as_it_reads(
    path: &Path,
    options: ReadOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Attribution> {
    let mut collected = Collected::default();
    scan_trace(path, &mut collected, progress, options)?;
    Ok(tree::build(collected))
}

#[cfg(test)]
mod tests;
