//! Which rank a trace file is: its header's `distributedInfo.rank`, else what its name says.
//! `merge` and `summary` find ranks the same way.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::json::object::{member, member_value, Duplicates};

/// A file's rank and where it came from (`distributedInfo`, `file name`, `order`).
pub(crate) type RankFrom = (i64, &'static str);

/// The rank of the file at `path`, `index` in its list, as `merge` gives it.
pub(crate) fn rank_of(path: &Path, distributed: Option<i64>, index: usize) -> RankFrom {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match (distributed, rank_in_name(&name)) {
        (Some(r), _) => (r, "distributedInfo"),
        (None, Some(r)) => (r, "file name"),
        (None, None) => (index as i64, "order"),
    }
}

/// Ranks as `merge` gives them to `paths` (each with its `distributedInfo.rank`, if any):
/// `distributedInfo.rank`, else a number in the file name, else the position; refused when
/// two files claim one rank (`what` says what to do instead).
pub(crate) fn assign_ranks(
    paths: &[PathBuf],
    distributed: &[Option<i64>],
    what: &str,
) -> Result<Vec<RankFrom>> {
    let mut ranks: Vec<RankFrom> = Vec::with_capacity(paths.len());
    for (i, path) in paths.iter().enumerate() {
        let (rank, from) = rank_of(path, distributed[i], i);
        if let Some(j) = ranks.iter().position(|&(r, _)| r == rank) {
            return Err(Error::InvalidArgument(format!(
                "{} ({}) and {} ({from}) are both rank {rank}: {what}",
                paths[j].display(),
                ranks[j].1,
                path.display(),
            )));
        }
        ranks.push((rank, from));
    }
    Ok(ranks)
}

/// The rank in the header member `"distributedInfo": {...}` (its text as written), when an
/// integer; of a key written twice, the last (as a viewer reads it).
pub(crate) fn distributed_rank(member_text: &[u8]) -> Option<i64> {
    let rank = member(member_value(member_text)?, b"rank", Duplicates::Last)?;
    std::str::from_utf8(rank).ok()?.parse().ok()
}

/// A number after `rank` in a file name (`rank-3`, `rank_3`, `rank3`).
pub(crate) fn rank_in_name(name: &str) -> Option<i64> {
    let lower = name.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("rank") {
        let rest = &lower[from + i + 4..];
        let rest = rest.strip_prefix(['-', '_']).unwrap_or(rest);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            if let Ok(n) = digits.parse() {
                return Some(n);
            }
        }
        from += i + 4;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_in_distributed_info() {
        let rank = |text: &str| distributed_rank(text.as_bytes());
        assert_eq!(
            rank(r#""distributedInfo": {"backend": "nccl", "rank": 3}"#),
            Some(3)
        );
        assert_eq!(
            rank(r#""distributedInfo": {"rank": 1, "rank": 5}"#),
            Some(5)
        );
        assert_eq!(rank(r#""distributedInfo": {"rank": "3"}"#), None);
        assert_eq!(rank(r#""distributedInfo": {"world_size": 8}"#), None);
    }

    #[test]
    fn ranks_in_file_names() {
        assert_eq!(rank_in_name("rank-3.json"), Some(3));
        assert_eq!(rank_in_name("worker_rank_12.pt.trace.json"), Some(12));
        assert_eq!(rank_in_name("RANK7.json.gz"), Some(7));
        assert_eq!(rank_in_name("ranking-rank2.json"), Some(2));
        assert_eq!(rank_in_name("trace.json"), None);
    }
}
