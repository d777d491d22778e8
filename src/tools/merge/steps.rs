//! Pass 2 of a merge (`--align step`): the start of each `ProfilerStep#N` in every source,
//! and the offsets that move each source's start of the first common step to the latest.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::json::decimal::Decimal;
use crate::read::events::{read_trace_with, Event, Visitor, SLOT_TS};

use super::Timeline;
use crate::read::sources::{Msg, Sources};

/// Most `ProfilerStep#N` numbers remembered per source.
pub(super) const MAX_STEPS: usize = 1 << 16;

/// The start of each `ProfilerStep#N` of a source (ns of its own clock).
#[derive(Default)]
struct Steps {
    starts: BTreeMap<u64, i128>,
}

/// `N` of a `ProfilerStep#N` name.
fn step_number(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"ProfilerStep#")?;
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Visitor for Steps {
    fn header(&mut self, _key: &[u8], _raw: &[u8], _after_events: bool) -> Result<()> {
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        // The host's step (Kineto also copies it onto GPU rows as gpu_user_annotation).
        if ev.ph != b"X" || ev.cat == Some("gpu_user_annotation") {
            return Ok(());
        }
        let Some(n) = step_number(ev.name) else {
            return Ok(());
        };
        let Some(ns) = ev
            .value_text(SLOT_TS)
            .and_then(Decimal::parse)
            .and_then(Decimal::floor_ns)
        else {
            return Ok(());
        };
        if self.starts.len() < MAX_STEPS || self.starts.contains_key(&n) {
            let start = self.starts.entry(n).or_insert(ns);
            *start = (*start).min(ns);
        }
        Ok(())
    }
}

/// Pass 2: the first `ProfilerStep#N` in every source, each source's start of it moved to
/// the latest one's (added to the timeline's offsets); the step.
pub(super) fn pass_steps(
    pool: &Sources<'_>,
    timeline: &mut Timeline<'_>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<u64> {
    let n = pool.paths.len();
    let mut steps: Vec<BTreeMap<u64, i128>> = vec![BTreeMap::new(); n];
    pool.run::<(), BTreeMap<u64, i128>>(
        &|i, ctl| {
            let mut v = Steps::default();
            let mut reading = ctl.reading();
            read_trace_with(&pool.paths[i], &mut v, &mut reading, pool.read_options)?;
            Ok(v.starts)
        },
        &mut |msg| {
            if let Msg::Done(i, s) = msg {
                steps[i] = s;
            }
            Ok(())
        },
        progress,
    )?;
    let common = steps[0]
        .keys()
        .copied()
        .find(|k| steps.iter().all(|s| s.contains_key(k)));
    let Some(step) = common else {
        let missing: Vec<String> = pool
            .paths
            .iter()
            .zip(&steps)
            .filter(|(_, s)| s.is_empty())
            .map(|(p, _)| p.display().to_string())
            .collect();
        return Err(Error::InvalidArgument(if missing.is_empty() {
            "--align step: no ProfilerStep#N is in every source".into()
        } else {
            format!("--align step: no ProfilerStep#N in {}", missing.join(", "))
        }));
    };
    let starts: Vec<i128> = (0..n)
        .map(|i| steps[i][&step] + timeline.offsets[i])
        .collect();
    let latest = starts.iter().copied().max().unwrap_or(0);
    for (i, start) in starts.iter().enumerate() {
        timeline.align[i] = latest - start;
        timeline.offsets[i] += timeline.align[i];
    }
    Ok(step)
}
