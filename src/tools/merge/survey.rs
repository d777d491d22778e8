//! Pass 3 of a merge (parts): the bytes of the merged events over the merged timeline (one
//! histogram per reader, merged here), cut into the plan of parts `tools::parts` writes.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::read::events::read_trace_with;
use crate::tools::parts::{Histogram, Plan, MAX_CELLS, MAX_PARTS};

use super::rewrite::{ReaderOut, Rewriting, SourceDone};
use super::{nothing_kept, Timeline};
use crate::read::sources::{Msg, Sources};

/// Pass 3: the survey of the merged events' bytes over time, cut into the plan of parts of
/// at most `max_bytes` each (with room for the keys and metadata every part repeats).
pub(super) fn pass_survey(
    pool: &Sources<'_>,
    timeline: &Timeline<'_>,
    max_bytes: u64,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Plan> {
    let mut histogram = Histogram::default();
    let mut untimed = 0u64;
    let mut overhead = 4096usize;
    pool.run::<(), SourceDone>(
        &|i, ctl| {
            let ctx = timeline.ctx(i);
            let out = ReaderOut::Survey {
                histogram: Histogram::default(),
                untimed: 0,
            };
            let mut v = Rewriting::new(&ctx, out);
            let mut reading = ctl.reading();
            let bytes = read_trace_with(&pool.paths[i], &mut v, &mut reading, pool.read_options)?;
            v.finish(bytes)
        },
        &mut |msg| {
            if let Msg::Done(_, done) = msg {
                if let Some((h, u)) = done.histogram {
                    merge_histogram(&mut histogram, h);
                    untimed += u;
                }
                overhead += done.metadata_bytes
                    + done.header.iter().map(|(_, r)| r.len() + 4).sum::<usize>()
                    + 400 * done.processes.len();
            }
            Ok(())
        },
        progress,
    )?;
    if histogram.cells.is_empty() && untimed == 0 {
        return Err(nothing_kept(timeline.spec));
    }
    if overhead as u64 >= max_bytes {
        return Err(Error::InvalidArgument(format!(
            "a part of at most {max_bytes} bytes cannot hold the merged trace's top-level \
             keys and metadata events ({overhead} bytes): choose a larger size"
        )));
    }
    let plan = Plan::cut(&mut histogram, untimed, max_bytes - overhead as u64);
    if plan.firsts.len() > MAX_PARTS {
        return Err(Error::InvalidArgument(format!(
            "parts of at most {:.3} MB make more than {MAX_PARTS} parts: choose a larger size",
            max_bytes as f64 / 1e6
        )));
    }
    Ok(plan)
}

/// Adds the histogram `from` into `into`, at the coarser of their cell widths.
fn merge_histogram(into: &mut Histogram, from: Histogram) {
    let target = into.shift.max(from.shift);
    coarsen(into, target);
    for (cell, bytes) in from.cells {
        *into.cells.entry(cell >> (target - from.shift)).or_default() += bytes;
    }
    while into.cells.len() > MAX_CELLS {
        coarsen(into, into.shift + 1);
    }
}

fn coarsen(h: &mut Histogram, shift: u32) {
    if h.shift >= shift {
        return;
    }
    let by = shift - h.shift;
    let mut merged = HashMap::with_capacity_and_hasher(h.cells.len(), Default::default());
    for (cell, bytes) in h.cells.drain() {
        *merged.entry(cell >> by).or_default() += bytes;
    }
    h.cells = merged;
    h.shift = shift;
}
