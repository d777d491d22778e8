//! `KINETRACE_TEST_EXTRA_WORK=SITE:TURNS` (builds with the cargo feature `count-hooks` only,
//! never a wheel): TURNS more turns of an empty loop each time the per-event path of SITE
//! runs (`format`: the exporter's formatting of one activity; `scan`: the reader's scan of
//! one event), so `tests/test_count_gate.py` can show that the instruction-count gate
//! catches a hot path made a few percent slower.

use std::sync::OnceLock;

/// The per-event paths that can be made to do more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Site {
    Format,
    Scan,
}

/// Does the extra work asked for at `site`, if any.
#[inline]
pub(crate) fn per_event(site: Site) {
    static ASKED: OnceLock<Option<(Site, u64)>> = OnceLock::new();
    let asked = ASKED.get_or_init(|| {
        let value = std::env::var("KINETRACE_TEST_EXTRA_WORK").ok()?;
        let (name, turns) = value.split_once(':')?;
        let site = match name {
            "format" => Site::Format,
            "scan" => Site::Scan,
            _ => return None,
        };
        Some((site, turns.parse().ok()?))
    });
    if let Some((at, turns)) = *asked {
        if at == site {
            for turn in 0..turns {
                std::hint::black_box(turn);
            }
        }
    }
}
