"""The two deliberate deviations from torch's exporter.

(a) Time base: the trimonth floor of the trace's own earliest time (not the wall clock at
    export), so traces that straddle a trimonth boundary, or are exported after one, keep
    their real timestamps where torch clamps them to 0.
(b) Strict JSON: invalid metadata (bad escapes, control characters, NaN/Infinity, broken
    structure) is repaired or stringified instead of making the whole file unreadable.
"""

from __future__ import annotations

import json
import time
import types
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest
import torch
import torch.profiler._chrome_trace_export as torch_export
from torch.profiler import ProfilerActivity, profile

import kinetrace
from kinetrace._kinetrace import trimonth_base_ns
from support import BASE, T0, TRIMONTH_NS
from support.fakes import PID, FakeActivity, FakeResult
from support.oracle import torch_bytes
from support.traces import (
    activity_events,
    is_strict_json,
    kinetrace_trace,
    read_trace,
    strict_loads,
)


def ts_ns(value: Decimal) -> int:
    """A trace "ts" (microseconds with 3 decimals) back to integer nanoseconds."""
    ns = value * 1000
    assert ns == ns.to_integral_value()
    return int(ns)


def exact_events(data: bytes) -> list[dict]:
    trace = json.loads(data, parse_float=Decimal, parse_constant=_reject)
    return activity_events(trace)


def _reject(constant: str):
    raise ValueError(constant)


# --- (a) time base ---------------------------------------------------------------------------

BOUNDARY = BASE  # a trimonth boundary: T0's interval starts here
STRADDLING_OFFSETS = [-5_000_000_123, -1_000_001, -1, 0, 1, 999, 3_000_000_777]


def straddling_result() -> FakeResult:
    acts = [
        FakeActivity(name=f"op{i}", timestamp=BOUNDARY + off, duration=1_500, correlation_id=i + 1)
        for i, off in enumerate(STRADDLING_OFFSETS)
    ]
    return FakeResult(acts, trace_start_ns=BOUNDARY + STRADDLING_OFFSETS[0] - 10_000)


def test_trace_straddling_a_boundary_keeps_real_timestamps(tmp_path):
    result = straddling_result()
    path = tmp_path / "t.json"
    # torch exporting "now" (a wall clock after the boundary): early events collapse to 0.
    torch_out = torch_bytes(result, str(path), base=BOUNDARY)
    torch_ts = [ts_ns(e["ts"]) for e in exact_events(torch_out)]
    assert torch_ts[:4] == [0, 0, 0, 0]

    kinetrace.export_chrome_trace(result, path)
    data = path.read_bytes()
    trace = strict_loads(data)
    base = trimonth_base_ns(BOUNDARY + STRADDLING_OFFSETS[0] - 10_000)
    assert base == BOUNDARY - TRIMONTH_NS
    assert trace["baseTimeNanoseconds"] == base
    events = exact_events(data)
    stamps = [ts_ns(e["ts"]) for e in events]
    assert stamps[0] > 0
    assert stamps == [BOUNDARY + off - base for off in STRADDLING_OFFSETS]
    # Differences between events are preserved exactly, across the boundary.
    assert [b - a for a, b in pairwise(stamps)] == [b - a for a, b in pairwise(STRADDLING_OFFSETS)]
    # Nothing else changes: with torch given the same base, the files are identical.
    assert torch_bytes(result, str(tmp_path / "same.json"), base=base) == _rename(
        data, path, tmp_path / "same.json"
    )


def _rename(data: bytes, old: Path, new: Path) -> bytes:
    """``data`` with its traceName changed from ``old`` to ``new``."""
    return data.replace(json.dumps(str(old)).encode(), json.dumps(str(new)).encode())


def test_activity_exactly_on_boundary(tmp_path):
    acts = [
        FakeActivity(name="a", timestamp=BOUNDARY),
        FakeActivity(name="b", timestamp=BOUNDARY + 1),
    ]
    result = FakeResult(acts, trace_start_ns=BOUNDARY + 5)
    data, trace = kinetrace_trace(result, tmp_path / "t.json")
    assert trace["baseTimeNanoseconds"] == BOUNDARY
    assert [ts_ns(e["ts"]) for e in exact_events(data)] == [0, 1]


def test_export_after_a_boundary_real_profile(tmp_path, monkeypatch):
    """A profile recorded now but exported after the next trimonth boundary: torch (wall
    clock) clamps every event to 0; kinetrace writes what torch writes at recording time."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.ones(8, 8)
        for _ in range(5):
            x = x @ x
    result = prof.profiler.kineto_results
    path = str(tmp_path / "t.json")

    normal = torch_bytes(result, path, base=None)  # exported now: the reference bytes
    later = time.time() + TRIMONTH_NS / 1e9
    with monkeypatch.context() as mp:
        mp.setattr(torch_export, "_time", types.SimpleNamespace(time=lambda: later))
        clamped = torch_bytes(result, path, base=None)
        # kinetrace ignores the wall clock, however late the export.
        mp.setattr(time, "time", lambda: later)
        mp.setattr(time, "time_ns", lambda: int(later * 1e9))
        kinetrace.export_chrome_trace(result, path)
    ours = Path(path).read_bytes()

    clamped_events = exact_events(clamped)
    assert clamped_events and all(ts_ns(e["ts"]) == 0 for e in clamped_events)
    assert ours == normal
    events = exact_events(ours)
    assert all(ts_ns(e["ts"]) > 0 for e in events)


# --- (b) strict JSON -------------------------------------------------------------------------


def hostile_profile():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        prof.add_metadata("path", "C:\\dir\\x")
        prof.add_metadata("multiline", "line1\nline2\ttab\x01")
        prof.add_metadata("partial_escape", "\\u12 and \\q")
        # A trailing backslash escapes add_metadata's closing quote: still strict JSON.
        prof.add_metadata("trailing_backslash", "C:\\dir\\")
        prof.add_metadata_json("scores", '{"loss": NaN, "best": Infinity, "worst": -Infinity}')
        prof.add_metadata_json("lower", "[nan, inf, -inf]")
        prof.add_metadata_json("bare", "NaN")
        prof.add_metadata_json("broken", "{not json")
        prof.add_metadata_json("empty", "")
        prof.add_metadata_json("fine", '{"ok": [1, 2.5, "x"]}')
        torch.ones(3).add_(1)
    return prof


def test_hostile_profile_metadata(tmp_path):
    prof = hostile_profile()
    result = prof.profiler.kineto_results
    path = str(tmp_path / "t.json")
    torch_out = torch_bytes(result, path, prof._trace_metadata, base=None)
    with pytest.raises(json.JSONDecodeError, match="Invalid \\\\escape"):
        json.loads(torch_out)

    kinetrace.export_chrome_trace(prof, path)
    data = Path(path).read_bytes()
    trace = strict_loads(data)
    assert trace["path"] == "C:\\dir\\x"
    assert trace["multiline"] == "line1\nline2\ttab\x01"
    assert trace["partial_escape"] == "\\u12 and \\q"
    assert isinstance(trace["trailing_backslash"], str)
    assert trace["trailing_backslash"].startswith("C:\\dir")
    assert trace["scores"] == {"loss": "NaN", "best": "Infinity", "worst": "-Infinity"}
    assert trace["lower"] == ["nan", "inf", "-inf"]
    assert trace["bare"] == "NaN"
    assert trace["broken"] == "{not json"
    assert trace["empty"] == ""
    assert trace["fine"] == {"ok": [1, 2.5, "x"]}
    # Everything after the repaired header is torch's bytes.
    events = data.index(b'"traceEvents": [')
    assert data[events:] == torch_out[torch_out.index(b'"traceEvents": [') :]


def test_hostile_metadata_gzip(tmp_path):
    prof = hostile_profile()
    path = tmp_path / "t.json.gz"
    kinetrace.export_chrome_trace(prof, path)
    trace = strict_loads(read_trace(path))
    assert trace["path"] == "C:\\dir\\x"


def test_nan_only_torch_output_is_lenient_json(tmp_path):
    """With only NaN/Infinity (no bad escapes) torch's file parses leniently, not strictly."""
    metadata = {"scores": '{"loss": NaN}', "v": "Infinity"}
    result = FakeResult([FakeActivity(timestamp=T0, metadata_json='"x": -Infinity')])
    path = str(tmp_path / "t.json")
    torch_out = torch_bytes(result, path, metadata, base=BASE)
    json.loads(torch_out)  # Python's lenient parser accepts it
    assert not is_strict_json(torch_out)
    _, trace = kinetrace_trace(result, Path(path), metadata)
    assert trace["scores"] == {"loss": "NaN"}
    assert trace["v"] == "Infinity"
    assert activity_events(trace)[0]["args"] == {"x": "-Infinity"}


@pytest.mark.parametrize(
    "fragment, args",
    [
        ('"loss": NaN', {"loss": "NaN"}),
        (
            '"a": [Infinity, -Infinity, nan, inf, -inf]',
            {"a": ["Infinity", "-Infinity", "nan", "inf", "-inf"]},
        ),
        ('"nested": {"x": NaN}', {"nested": {"x": "NaN"}}),
        ('"p": "C:\\Users\\me"', {"p": "C:\\Users\\me"}),
        ('"p": "tab\there"', {"p": "tab\there"}),
        ('"p": "unterminated', {"p": "unterminated"}),
        ("{{{", {"kinetrace_unparsed_metadata": "{{{"}),
        ('"a": 1 "b": 2', {"kinetrace_unparsed_metadata": '"a": 1 "b": 2'}),
    ],
)
def test_hostile_fragments(tmp_path, fragment, args):
    acts = [
        FakeActivity(name="op", timestamp=T0, metadata_json=fragment, correlation_id=3),
        FakeActivity(
            name="k",
            type="kernel",
            device_id=0,
            resource_id=7,
            timestamp=T0 + 1,
            linked_activity=FakeActivity(name="record_param_comms", metadata_json=fragment),
        ),
    ]
    result = FakeResult(acts)
    path = tmp_path / "t.json"
    assert not is_strict_json(torch_bytes(result, str(path), base=BASE))
    _, trace = kinetrace_trace(result, path)
    events = activity_events(trace)
    assert events[0]["args"] == {"External id": 3, **args}
    assert events[1]["args"] == args


@pytest.mark.parametrize("depth", [512, 513])
def test_deep_valid_fragment_is_verbatim(tmp_path, depth):
    """A valid fragment is written verbatim however deeply it nests (torch's file is valid
    JSON here, and Python's json reads it, so kinetrace must write the same bytes)."""
    fragment = '"deep": ' + "[" * depth + "]" * depth
    result = FakeResult([FakeActivity(name="op", timestamp=T0, metadata_json=fragment)])
    path = tmp_path / "t.json"
    torch_out = torch_bytes(result, str(path), base=BASE)
    assert is_strict_json(torch_out)
    kinetrace.export_chrome_trace(result, path, base_time_ns=BASE)
    assert path.read_bytes() == torch_out


@pytest.mark.parametrize("depth", [512, 513])
def test_deep_valid_header_value_is_verbatim(tmp_path, depth):
    value = "[" * depth + "]" * depth
    result = FakeResult([FakeActivity(name="op", timestamp=T0)])
    path = tmp_path / "t.json"
    torch_out = torch_bytes(result, str(path), {"deep": value}, base=BASE)
    assert is_strict_json(torch_out)
    kinetrace.export_chrome_trace(result, path, {"deep": value}, base_time_ns=BASE)
    assert path.read_bytes() == torch_out


def test_header_value_types_and_keys(tmp_path):
    """Non-string metadata values are written as str(v), like torch's f-string; the ones that
    are not JSON become strings."""
    metadata = {
        "int": 5,
        "float": 2.5,
        "nan": float("nan"),
        "inf": float("inf"),
        "bool": True,
        "none": None,
        'key "q"\n': '"v"',
    }
    result = FakeResult([FakeActivity(timestamp=T0)])
    _, trace = kinetrace_trace(result, tmp_path / "t.json", metadata)
    assert trace["int"] == 5 and trace["float"] == 2.5
    assert trace["nan"] == "nan" and trace["inf"] == "inf"
    assert trace["bool"] == "True" and trace["none"] == "None"
    assert trace['key "q"\n'] == "v"


def test_cpu_pid_label_is_strict(tmp_path):
    acts = [FakeActivity(device_id=PID, timestamp=T0, name="x")]
    _, trace = kinetrace_trace(FakeResult(acts), tmp_path / "t.json")
    labels = [e["args"] for e in trace["traceEvents"] if e.get("name") == "process_labels"]
    assert labels == [{"labels": "CPU"}]
