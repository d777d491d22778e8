//! The operators of one trace grouped by (name, `Input Dims`, `Input type`), for `diff`:
//! per group the count, the summed self time, the summed busy time of each instance's own
//! GPU activities, and the activity name with the most own GPU time.

use std::collections::HashMap;

use super::{tree, Attribution, Collected, Keep};
use crate::error::Result;
use crate::read::events::Visitor;

/// One (name, `Input Dims`, `Input type`) of a trace, totals over its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) name: String,
    /// As written (JSON text); empty where the trace records none.
    pub(crate) input_dims: String,
    pub(crate) input_type: String,
    pub(crate) count: u64,
    pub(crate) self_ns: i64,
    /// Per instance the busy time of its own GPU activities, summed.
    pub(crate) gpu_ns: i64,
    /// The GPU activity name with the most (summed) own GPU time, and that time.
    pub(crate) top_kernel: Option<(String, i64)>,
}

type Key<'a> = (u32, Option<&'a str>, Option<&'a str>);

/// The groups of `a`, in order of first instance.
pub(crate) fn groups(a: &Attribution) -> Vec<Group> {
    let mut index: HashMap<Key<'_>, usize> = HashMap::new();
    let mut out: Vec<Group> = Vec::new();
    let mut kernels: Vec<HashMap<u32, i64>> = Vec::new();
    for (i, op) in a.ops.iter().enumerate() {
        let args = a.args(op);
        let key = (
            op.name,
            args.input_dims.as_deref(),
            args.input_type.as_deref(),
        );
        let at = *index.entry(key).or_insert_with(|| {
            out.push(Group {
                name: a.name(op).to_owned(),
                input_dims: key.1.unwrap_or_default().to_owned(),
                input_type: key.2.unwrap_or_default().to_owned(),
                count: 0,
                self_ns: 0,
                gpu_ns: 0,
                top_kernel: None,
            });
            kernels.push(HashMap::new());
            out.len() - 1
        });
        let g = &mut out[at];
        g.count += 1;
        g.self_ns += op.self_ns;
        let own = a.own_gpu(i as u32);
        g.gpu_ns += tree::busy_ns(&a.gpu, own);
        for &k in own {
            let ev = &a.gpu[k as usize];
            *kernels[at].entry(ev.name).or_default() += ev.end - ev.start;
        }
    }
    for (g, by_name) in out.iter_mut().zip(kernels) {
        // Ties go to the smaller name id (met first), so the choice is stable.
        g.top_kernel = by_name
            .into_iter()
            .max_by_key(|&(name, ns)| (ns, std::cmp::Reverse(name)))
            .map(|(name, ns)| (a.names[name as usize].to_string(), ns));
    }
    out
}

/// The attribution of the trace `scan` reads (its operators' arguments kept for the groups
/// and `ops`' models, not its rows), with what `scan` returns and what `records` makes of
/// it and of the records read, before the call tree is built from them: `scan` is handed
/// the attribution's visitor to feed, alone or beside others (`diff` reads each file once,
/// and makes its summary's figures and its steps' of these records: one record set for
/// all, then the groups and the modelled FLOPs of the tree). A trace damaged after some
/// events gives the attribution of what was read.
pub(crate) fn attributed_beside<T, R>(
    scan: impl FnOnce(&mut dyn Visitor) -> Result<T>,
    records: impl FnOnce(&T, &Collected) -> R,
) -> Result<(T, R, Attribution)> {
    let mut collected = Collected::new(Keep::Groups);
    let read = scan(&mut collected)?;
    let made = records(&read, &collected);
    Ok((read, made, tree::build(collected)))
}
