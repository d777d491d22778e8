"""What a merged trace must hold, computed independently of the merge (``src/tools/merge/``).

``expected_events(merged, sources)`` applies the documented mapping to every source event:
``pid`` -> the merged pid the ``kinetrace_merge`` record lists for (rank, source pid);
``ts`` + the rank's ``offset_ns`` (exact, in decimal); a flow or async ``id`` ->
``id * ranks + index`` (an integer) or ``"index:id"``; the sources' ``process_name`` and
``process_sort_index`` events left out (the merge writes its own, one pair per process).
``check_merge`` asserts that the merged trace holds exactly those events plus its own
naming events, each process named and sorted rank by rank.
"""

from __future__ import annotations

import decimal
import json
from collections import Counter
from pathlib import Path
from typing import Any

ID_PHASES = {"s", "t", "f", "b", "e", "n", "S", "T", "p", "F"}
REPLACED = {"process_name", "process_sort_index"}


def _reject(constant: str) -> Any:
    raise ValueError(f"non-standard JSON constant {constant}")


def load_exact(path: str | Path) -> Any:
    """A trace parsed strictly, numbers with a fraction as ``Decimal`` (exact)."""
    return json.loads(read_any(path), parse_float=decimal.Decimal, parse_constant=_reject)


def read_any(path: str | Path) -> bytes:
    """A trace file's JSON (gzip of any number of members decompressed)."""
    import gzip

    data = Path(path).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def canonical(event: dict[str, Any]) -> str:
    """One string per event, equal for equal parsed events (``1.5`` == ``1.500``)."""

    def norm(value: Any) -> Any:
        if isinstance(value, decimal.Decimal):
            return (
                format(value.normalize(), "f")
                if value == value.to_integral_value()
                else str(value.normalize())
            )
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    return json.dumps(norm(event), sort_keys=True)


def _key(pid: Any) -> str:
    return json.dumps(pid)


def expected_events(merged: dict[str, Any], sources: list[Any]) -> Counter[str]:
    """The merged trace's events that come from ``sources`` (parsed with :func:`load_exact`,
    in the order given to the merge), under the documented mapping."""
    ranks = merged["kinetrace_merge"]["ranks"]
    n = len(ranks)
    want: Counter[str] = Counter()
    for rank in ranks:
        k = rank["index"]
        source = sources[k]
        pids = {_key(p["source"]): p["pid"] for p in rank["pids"]}
        offset = decimal.Decimal(rank["offset_ns"]) / 1000
        for event in source["traceEvents"]:
            if event.get("ph") == "M" and event.get("name") in REPLACED:
                continue
            e = dict(event)
            e["pid"] = pids[_key(event.get("pid"))]
            ts = e.get("ts")
            if isinstance(ts, (int, decimal.Decimal)) and not isinstance(ts, bool) and offset:
                e["ts"] = decimal.Decimal(ts) + offset
            if e.get("ph") in ID_PHASES and "id" in e:
                ident = e["id"]
                if isinstance(ident, int) and not isinstance(ident, bool):
                    e["id"] = ident * n + k
                else:
                    e["id"] = f"{k}:{ident}"
            want[canonical(e)] += 1
    return want


def check_merge(merged_path: str | Path, source_paths: list[str | Path]) -> dict[str, Any]:
    """Asserts that the merged trace holds every source event exactly once (mapped) and
    nothing else but one name and one sort index per process; returns the merged trace."""
    merged = load_exact(merged_path)
    sources = [load_exact(p) for p in source_paths]
    got: Counter[str] = Counter()
    names: dict[int, str] = {}
    sort_index: dict[int, int] = {}
    for event in merged["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            assert event["pid"] not in names, f"pid {event['pid']} named twice"
            names[event["pid"]] = event["args"]["name"]
        elif event.get("ph") == "M" and event.get("name") == "process_sort_index":
            sort_index[event["pid"]] = event["args"]["sort_index"]
        else:
            got[canonical(event)] += 1
    want = expected_events(merged, sources)
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"{sum(missing.values())} source events missing, e.g. {list(missing)[:2]}; "
        f"{sum(extra.values())} extra, e.g. {list(extra)[:2]}"
    )
    listed = [p for r in merged["kinetrace_merge"]["ranks"] for p in r["pids"]]
    assert sorted(names) == sorted(p["pid"] for p in listed)
    assert sorted(sort_index) == sorted(names)
    # Rank by rank, in the record's order.
    in_order = sorted(names, key=lambda pid: sort_index[pid])
    assert in_order == [p["pid"] for p in listed]
    for p in listed:
        assert names[p["pid"]] == p["name"]
    return merged
