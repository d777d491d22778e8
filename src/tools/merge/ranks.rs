//! Each source of a merge once read: its rank (a label given, `distributedInfo`, its file
//! name, or its position), its label, and the sources in rank order.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::json::object::{member_value, string_body};
use crate::read::ranks::{self, rank_in_name};

use super::rewrite::SourceDone;
use super::Member;

/// The rank in a source's `distributedInfo`, if it is an integer.
fn distributed_rank(header: &[Member]) -> Option<i64> {
    let raw = header
        .iter()
        .find(|(k, _)| &**k == b"distributedInfo")?
        .1
        .as_ref();
    ranks::distributed_rank(raw)
}

/// A string member's body as written (escapes kept), e.g. `host_name`.
pub(super) fn header_string<'a>(header: &'a [Member], key: &[u8]) -> Option<&'a [u8]> {
    let raw = header.iter().find(|(k, _)| &**k == key)?.1.as_ref();
    string_body(member_value(raw)?)
}

/// A source once read: who it is and what it had.
pub(super) struct Ranked {
    pub(super) index: usize,
    pub(super) label: String,
    pub(super) rank: Option<i64>,
    pub(super) rank_from: &'static str,
    pub(super) done: SourceDone,
}

/// Gives every source its rank and label, checks that none is claimed twice, and orders
/// them.
pub(super) fn rank_sources(
    sources: &[PathBuf],
    labels: &[Option<String>],
    dones: Vec<SourceDone>,
) -> Result<Vec<Ranked>> {
    let mut ranked: Vec<Ranked> = Vec::with_capacity(dones.len());
    for (i, done) in dones.into_iter().enumerate() {
        let given = labels.get(i).cloned().flatten();
        let file_name = sources[i]
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (rank, rank_from) = match &given {
            Some(l) => (l.trim().parse::<i64>().ok(), "label"),
            None => match distributed_rank(&done.header) {
                Some(r) => (Some(r), "distributedInfo"),
                None => match rank_in_name(&file_name) {
                    Some(r) => (Some(r), "file name"),
                    None => (Some(i as i64), "order"),
                },
            },
        };
        let label = match (&given, rank) {
            (Some(l), None) => l.clone(),
            (_, Some(r)) => format!("rank {r}"),
            (None, None) => unreachable!("a source without a label has a rank"),
        };
        if let Some(other) = ranked.iter().find(|r| r.label == label) {
            return Err(Error::InvalidArgument(format!(
                "{} ({}) and {} ({}) are both {label}: give each source a --label to merge them",
                sources[other.index].display(),
                other.rank_from,
                sources[i].display(),
                rank_from
            )));
        }
        ranked.push(Ranked {
            index: i,
            label,
            rank,
            rank_from,
            done,
        });
    }
    ranked.sort_by_key(|r| (r.rank.is_none(), r.rank, r.index));
    Ok(ranked)
}
