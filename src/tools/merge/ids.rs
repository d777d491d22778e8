//! The merge's maps of ids: each source's processes in order of first appearance (merged
//! pid `source × PID_STRIDE + n`), and flow and async ids made unique per source.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, FormatKind, Result};
use crate::json::decimal::parse_int;
use crate::json::object::string_body;
use crate::json::render::push_int;

/// A source's pids are `source × PID_STRIDE + n` (`source` 1-based).
pub(super) const PID_STRIDE: i64 = 100_000;

/// Most processes in one source.
pub(super) const MAX_PROCESSES: usize = PID_STRIDE as usize - 1;

/// Phases whose `id` scopes events (flows and async events).
pub(super) const ID_PHASES: [&[u8]; 10] =
    [b"s", b"t", b"f", b"b", b"e", b"n", b"S", b"T", b"p", b"F"];

/// A process of a source.
#[derive(Debug, Clone, Default)]
pub(super) struct Process {
    /// Type-tagged pid (empty when the events had none).
    pub(super) key: Box<[u8]>,
    /// `args.name` of its `process_name` and `args.labels` of its `process_labels`, as
    /// written between the quotes; `args.sort_index` of its `process_sort_index`.
    pub(super) name: Option<Box<[u8]>>,
    pub(super) labels: Option<Box<[u8]>>,
    pub(super) sort_index: Option<i64>,
}

/// A source's processes in order of first appearance.
#[derive(Default)]
pub(super) struct Processes {
    index: HashMap<Box<[u8]>, u32>,
    pub(super) list: Vec<Process>,
    last: Option<(Box<[u8]>, u32)>,
}

impl Processes {
    pub(super) fn of(&mut self, key: &[u8], path: &Path) -> Result<u32> {
        if let Some((k, n)) = &self.last {
            if **k == *key {
                return Ok(*n);
            }
        }
        let n = match self.index.get(key) {
            Some(&n) => n,
            None => {
                if self.list.len() >= MAX_PROCESSES {
                    return Err(Error::trace_fault(
                        path,
                        FormatKind::TooLarge,
                        format!(
                            "more than {MAX_PROCESSES} processes: not a trace this tool can merge"
                        ),
                    ));
                }
                let n = self.list.len() as u32;
                self.index.insert(key.into(), n);
                self.list.push(Process {
                    key: key.into(),
                    ..Process::default()
                });
                n
            }
        };
        self.last = Some((key.into(), n));
        Ok(n)
    }
}

/// Writes a merged flow or async `id` (`raw`, as written) of source `k` of `n`.
pub(super) fn push_id(out: &mut Vec<u8>, raw: &[u8], k: usize, n: usize) {
    if !raw.contains(&b'.') && !raw.iter().any(|b| matches!(b, b'e' | b'E' | b'"')) {
        if let Some(id) = parse_int(raw)
            .and_then(|id| id.checked_mul(n as i128))
            .and_then(|id| id.checked_add(k as i128))
        {
            push_int(out, id);
            return;
        }
    }
    out.push(b'"');
    push_int(out, k);
    out.push(b':');
    out.extend_from_slice(string_body(raw).unwrap_or(raw));
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_ids_are_unique_per_source() {
        let id = |raw: &str, k, n| {
            let mut out = Vec::new();
            push_id(&mut out, raw.as_bytes(), k, n);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(id("7", 0, 3), "21");
        assert_eq!(id("7", 2, 3), "23");
        assert_eq!(id("-7", 1, 3), "-20");
        assert_eq!(id("\"0x1f\"", 1, 3), "\"1:0x1f\"");
        assert_eq!(id("1.5", 2, 3), "\"2:1.5\"");
        assert_eq!(id("1e3", 2, 3), "\"2:1e3\"");
    }
}
