"""The differential oracle: torch's own Python exporter and kinetrace run on the same result
and must write the same bytes (``compare``); and what kinetrace may read of each fake
activity (``assert_reads``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch.profiler._chrome_trace_export as torch_export

import kinetrace
from kinetrace._kinetrace import trimonth_base_ns
from support.fakes import FIELDS, FakeActivity, FakeResult
from support.traces import read_trace, single_member_text

#: Categories whose own correlation id is not written as "External id" (torch's list).
EXCLUDED_CATEGORIES = frozenset(
    {
        "gpu_memcpy",
        "gpu_memset",
        "kernel",
        "cuda_runtime",
        "cuda_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
    }
)


def earliest_time(result: Any) -> int:
    """min(trace_start_ns, every timestamp), reading FakeActivity fields without counting."""
    stamps = []
    for act in result.trace_activities():
        stamps.append(act.peek("timestamp") if isinstance(act, FakeActivity) else act.timestamp())
    start = result.trace_start_ns()
    return min([start, *stamps]) if stamps else start


def expected_base(result: Any) -> int:
    return trimonth_base_ns(earliest_time(result))


def first_difference(expected: bytes, actual: bytes) -> str:
    """A short description of where two outputs first differ (line and column)."""
    exp_lines = expected.split(b"\n")
    act_lines = actual.split(b"\n")
    for lineno, (e, a) in enumerate(zip(exp_lines, act_lines, strict=False), start=1):
        if e != a:
            col = next(
                (i for i, (x, y) in enumerate(zip(e, a, strict=False)) if x != y),
                min(len(e), len(a)),
            )
            lo = max(0, col - 150)
            return (
                f"first difference at line {lineno}, column {col + 1}:\n"
                f"  torch    : {e[lo : col + 150]!r}{' ...' if len(e) > col + 150 else ''}\n"
                f"  kinetrace: {a[lo : col + 150]!r}{' ...' if len(a) > col + 150 else ''}"
            )
    return (
        f"one output is a prefix of the other: torch {len(exp_lines)} lines / {len(expected)} "
        f"bytes, kinetrace {len(act_lines)} lines / {len(actual)} bytes"
    )


def assert_same_bytes(expected: bytes, actual: bytes) -> None:
    if expected != actual:
        pytest.fail(first_difference(expected, actual), pytrace=False)


def torch_bytes(
    result: Any,
    path: str,
    metadata: dict[str, str] | None = None,
    *,
    base: int | None,
) -> bytes:
    """Runs torch's Python exporter (with its wall-clock base replaced by ``base`` unless it
    is None), returns the JSON bytes and removes the file."""
    with pytest.MonkeyPatch.context() as mp:
        if base is not None:
            mp.setattr(torch_export, "_trimester_base_ns", lambda: base)
        torch_export.export_chrome_trace(result, path, metadata)
    try:
        return read_trace(path)
    finally:
        os.remove(path)


#: Worker counts every fidelity comparison also runs with (forked extraction, POSIX only).
WORKER_COUNTS = (2, 3) if hasattr(os, "fork") else ()


def compare(
    result: Any,
    tmp_path: Path,
    metadata: dict[str, str] | None = None,
    *,
    source: Any = None,
    base: int | str | None = "auto",
    name: str = "trace.json",
    **kinetrace_kwargs: Any,
) -> bytes:
    """Asserts torch's exporter and kinetrace write the same bytes for ``result``.

    ``base``: "auto" = the trimonth floor of the trace's earliest time, given to both
    exporters; an int = that base for both; None = each exporter's own default (torch: wall
    clock, kinetrace: the trace's own start) -- the normal case for real profiles.
    ``source``: what kinetrace exports (default ``result``; e.g. the profile object).
    Returns kinetrace's JSON bytes (decompressed for ``.gz``).
    """
    if base == "auto":
        base = expected_base(result)
    path = str(tmp_path / name)
    expected = torch_bytes(result, path, metadata, base=base)  # type: ignore[arg-type]
    kwargs = dict(kinetrace_kwargs)
    if base is not None:
        kwargs["base_time_ns"] = base
    if "workers" not in kwargs and not kwargs.get("background"):
        # Forked extraction must write the same text for any worker count. Run those first:
        # the read counts checked after compare() belong to the single-process export.
        for workers in WORKER_COUNTS:
            kinetrace.export_chrome_trace(
                result if source is None else source, path, metadata, workers=workers, **kwargs
            )
            data = Path(path).read_bytes()
            assert_same_bytes(expected, single_member_text(data) if name.endswith(".gz") else data)
        kwargs["workers"] = 1
    if isinstance(result, FakeResult):
        result.reset_counts()
    stats = kinetrace.export_chrome_trace(
        result if source is None else source, path, metadata, **kwargs
    )
    data = Path(path).read_bytes()
    actual = single_member_text(data) if name.endswith(".gz") else data
    assert_same_bytes(expected, actual)
    assert stats.uncompressed_bytes == len(actual)
    # torch's bytes may hold NaN / Infinity (not strict JSON): Python's parser reads them.
    assert stats.events == len(json.loads(actual)["traceEvents"])
    assert stats.file_bytes == len(data)
    assert stats.path == path
    leftovers = [p.name for p in Path(path).parent.iterdir() if p.name.endswith(".kinetrace-tmp")]
    assert not leftovers, leftovers
    return actual


def assert_reads(result: FakeResult) -> None:
    """Asserts what kinetrace read of each activity: every field it needs exactly once, and
    the conditional fields only where the format needs them (``correlation_id`` when the
    linked id is 0 and the category is not excluded, ``flow_type``/``flow_start`` when
    ``flow_id > 0``, ``linked_activity`` for kernels).

    An activity that is also the linked activity of kernels has its ``name`` read once more
    per such kernel, and its ``metadata_json`` too when it is a ``record_param_comms`` (torch
    reads them the same way)."""
    listed = result.activities
    linked_reads: Counter[int] = Counter()
    for act in listed:
        if act.peek("type") == "kernel":
            linked = act.peek("linked_activity")
            if isinstance(linked, FakeActivity):
                linked_reads[id(linked)] += 1
    listed_ids = {id(a) for a in listed}
    for act in result.all_activities():
        v = act.values
        n_linked = linked_reads[id(act)]
        comms_reads = n_linked if v["name"] == "record_param_comms" else 0
        if id(act) in listed_ids:
            needs_corr = v["linked_correlation_id"] == 0 and v["type"] not in EXCLUDED_CATEGORIES
            needs_flow = v["flow_id"] > 0
            expected = {
                "device_id": 1,
                "resource_id": 1,
                "timestamp": 1,
                "duration": 1,
                "type": 1,
                "linked_correlation_id": 1,
                "flow_id": 1,
                "name": 1 + n_linked,
                "metadata_json": 1 + comms_reads,
                "correlation_id": int(needs_corr),
                "flow_type": int(needs_flow),
                "flow_start": int(needs_flow),
                "linked_activity": int(v["type"] == "kernel"),
            }
        else:  # only reachable as a kernel's linked activity
            expected = dict.fromkeys(FIELDS, 0)
            expected["name"] = n_linked
            expected["metadata_json"] = comms_reads
        got = {f: act.calls[f] for f in FIELDS}
        assert got == expected, f"{act!r}: reads {got}, expected {expected}"
    assert result.trace_activities_calls == 1, result.trace_activities_calls
