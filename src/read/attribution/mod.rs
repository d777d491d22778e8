//! Which GPU work each CPU operator of a trace owns, read in one streaming pass
//! (`collect`) and put in a call tree (`tree`):
//!
//! - host events (`cpu_op` and the runtime calls of `read::categories`: `cuda_runtime`,
//!   `cuda_driver`, MTIA's and the 2021 format's) nest per (pid, tid) by time containment,
//!   a child allowed to end up to [`tree::BLEED_NS`] after its parent;
//! - a runtime call owns the GPU activity (`kernel`, `gpu_memcpy`, `gpu_memset`, MTIA's and
//!   the 2021 format's) its `ac2g` flow ends at (on the flow end's thread, with its link
//!   value: `correlation` when the first launching call carries one, else `External id`;
//!   where no call's name says it launches, the first call with either value decides); a
//!   graph launch
//!   (`cudaGraphLaunch` / `hipGraphLaunch`) owns every activity of its correlation; an
//!   activity no flow reaches (its flow missing or malformed) is owned by the first runtime
//!   call with its correlation, as `summary` links them, unless [`Links::Flows`] says not
//!   (TraceLens's reading);
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
use crate::read::events::{read_trace_with, ReadOptions};

pub(crate) use collect::{Collected, Keep, Links};
pub(crate) use collect::{Device, GpuDetail, GpuEvent, Op, OpArgs};

/// Lists of indices, one per operator, in one allocation (offsets into `items`).
pub(crate) struct Flat {
    starts: Vec<u32>,
    items: Vec<u32>,
}

impl Flat {
    /// The lists of `n` keys from (key, item) pairs (`pairs` gives the same ones each
    /// call): each key's items in the order given.
    fn grouped<I: Iterator<Item = (u32, u32)>>(n: usize, pairs: impl Fn() -> I) -> Flat {
        let mut starts = vec![0u32; n + 1];
        for (k, _) in pairs() {
            starts[k as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut next = starts.clone();
        let mut items = vec![0u32; starts[n] as usize];
        for (k, item) in pairs() {
            items[next[k as usize] as usize] = item;
            next[k as usize] += 1;
        }
        Flat { starts, items }
    }

    fn get(&self, i: u32) -> &[u32] {
        let i = i as usize;
        &self.items[self.starts[i] as usize..self.starts[i + 1] as usize]
    }
}

/// The operators of one trace and the GPU activities they own: the activities no operator
/// launched are not kept.
pub(crate) struct Attribution {
    pub(crate) names: Vec<Box<str>>,
    /// The distinct argument sets ([`Op::args`] indexes them).
    pub(crate) arg_sets: Vec<OpArgs>,
    /// In file order.
    pub(crate) ops: Vec<Op>,
    /// Per operator the activities it launched itself: of runtime calls whose innermost
    /// operator it is, so that each activity is owned by exactly one operator
    /// (`aten::addmm`'s kernel is not `aten::linear`'s too), ascending.
    own_gpu: Flat,
    /// Per operator the operators whose parent it is, ascending.
    children: Flat,
    /// Per operator the backward frames linked to it, ascending (none under
    /// [`Keep::Groups`]: the links need the sequence numbers that pass leaves out).
    backward: Flat,
    /// In file order.
    pub(crate) gpu: Vec<GpuEvent>,
    /// Beside `gpu`, one each, where the pass kept them ([`Keep::Rows`]); else empty.
    pub(crate) gpu_details: Vec<GpuDetail>,
    /// The `args.device` values [`GpuEvent::device`] indexes.
    device_ids: Vec<i64>,
    /// The trace's `deviceProperties` (empty where it has none).
    pub(crate) devices: Vec<Device>,
    /// `distributedInfo.rank`, when an integer.
    pub(crate) distributed_rank: Option<i64>,
}

impl Attribution {
    pub(crate) fn name(&self, op: &Op) -> &str {
        &self.names[op.name as usize]
    }

    pub(crate) fn args(&self, op: &Op) -> &OpArgs {
        &self.arg_sets[op.args as usize]
    }

    /// The GPU activities operator `i` launched itself (indices into [`Attribution::gpu`]).
    pub(crate) fn own_gpu(&self, i: u32) -> &[u32] {
        self.own_gpu.get(i)
    }

    /// The operators nested right under operator `i`.
    pub(crate) fn children(&self, i: u32) -> &[u32] {
        self.children.get(i)
    }

    /// The backward frames linked to operator `i`.
    pub(crate) fn backward(&self, i: u32) -> &[u32] {
        self.backward.get(i)
    }

    /// The GPU activities of operator `i`'s subtree (its own and its descendants'),
    /// ascending.
    pub(crate) fn gpu(&self, i: u32) -> Vec<u32> {
        self.union_gpu(&[i])
    }

    /// The GPU activities of some operators' subtrees, once each, ascending.
    pub(crate) fn union_gpu(&self, which: &[u32]) -> Vec<u32> {
        let (mut all, mut todo) = (Vec::new(), which.to_vec());
        while let Some(i) = todo.pop() {
            all.extend_from_slice(self.own_gpu(i));
            todo.extend_from_slice(self.children(i));
        }
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether operator `i`'s subtree launched any GPU activity.
    pub(crate) fn has_gpu(&self, i: u32) -> bool {
        let mut todo = vec![i];
        while let Some(i) = todo.pop() {
            if !self.own_gpu(i).is_empty() {
                return true;
            }
            todo.extend_from_slice(self.children(i));
        }
        false
    }

    /// The GPU activities of operator `i`'s backward frames' subtrees.
    pub(crate) fn backward_gpu(&self, i: u32) -> Vec<u32> {
        self.union_gpu(self.backward(i))
    }

    /// An activity's `args.device`.
    pub(crate) fn device(&self, g: &GpuEvent) -> Option<i64> {
        self.device_ids.get(g.device as usize).copied()
    }
}

/// Reads the trace at `path` and attributes its GPU work to its operators, keeping what
/// `ops`' rows read ([`Keep::Rows`]), launches linked as `links` says; `progress` is told
/// the JSON bytes read so far (its error stops the read).
pub(crate) fn attribute(
    path: &Path,
    options: ReadOptions,
    links: Links,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Attribution> {
    let mut collected = Collected::new(Keep::Rows);
    collected.links = links;
    read_trace_with(path, &mut collected, progress, options)?;
    Ok(tree::build(collected))
}

#[cfg(test)]
mod tests;
