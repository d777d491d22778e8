"""``kinetrace check`` / :func:`kinetrace.check_trace`: errors (a viewer cannot load the file),
warnings (it loads, but a viewer drops or misplaces something) and the summary, on real
traces, constructed ones, kinetrace's own exports, and the overlap rule against an
independent reference (``support.perfetto_rule``)."""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.profiler import profile

import kinetrace
from support import perfetto_rule
from support.cli import run
from support.fakes import FakeResult
from support.oracle import compare
from support.real import real_params, real_path, real_text, real_trace
from support.scenarios import (
    annotation_instant_overhead_set,
    chain,
    comms_set,
    durations_set,
    flow_types_set,
    fwdbwd_set,
    launch_set,
    memcpy_memset_set,
)

ALL = 10**9  # examples=ALL: every place of every finding


def write_trace(path: Path, events: list[Any], **top: Any) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def dropped_by_check(path: Path) -> list[int]:
    finding = kinetrace.check_trace(path, examples=ALL).finding("overlapping_slices")
    if finding is None:
        return []
    indices = [e.event_index for e in finding.examples]
    assert len(indices) == finding.count
    return sorted(i for i in indices if i is not None)


# --- real traces -----------------------------------------------------------------------------


def expected_flows(events: list[dict[str, Any]]) -> tuple[int, int]:
    """(paired, unpaired) flow ends by (cat, id), as check counts them."""
    balance: collections.Counter[str] = collections.Counter()
    paired = 0
    for e in events:
        if e.get("ph") not in ("s", "f") or "id" not in e:
            continue
        key = json.dumps([e.get("cat", ""), e["id"]])
        step = 1 if e["ph"] == "s" else -1
        if balance[key] and (balance[key] > 0) != (step > 0):
            paired += 1
        balance[key] += step
    return paired, sum(abs(v) for v in balance.values())


def expected_name_conflicts(events: list[dict[str, Any]]) -> int:
    first: dict[Any, str] = {}
    conflicts = 0
    for e in events:
        if e.get("ph") != "M" or e.get("name") not in ("process_name", "thread_name"):
            continue
        key = (e["name"], json.dumps(e.get("pid")), json.dumps(e.get("tid")))
        if e["name"] == "process_name":
            key = (e["name"], json.dumps(e.get("pid")), None)
        name = json.dumps(e["args"]["name"])
        if first.setdefault(key, name) != name:
            conflicts += 1
    return conflicts


#: Real traces, as named in ../shared/traces.
NS_RESOLUTION = "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
ALEXNET = "hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"


@pytest.mark.parametrize("path", real_params())
def test_real_traces_load_and_their_warnings_are_right(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every real trace loads (no error: verified on each of them), and each warning is
    what an independent count over the parsed events finds."""
    trace = real_trace(path)
    events = trace["traceEvents"]
    report = kinetrace.check_trace(path, examples=ALL)
    assert report.valid and report.complete, report.errors
    info = report.info
    assert info.events == len(events)
    assert info.json_bytes == len(real_text(path))
    assert info.gzip_members == (1 if path.name.endswith(".gz") else 0)
    assert tuple(trace) == info.top_level_keys
    assert dict(info.phases) == dict(collections.Counter(e["ph"] for e in events))
    paired, unpaired = expected_flows(events)
    assert (info.flows_paired, info.flows_unpaired) == (paired, unpaired)
    kinds = {f.kind for f in report.warnings}
    assert ("unpaired_flows" in kinds) == (unpaired > 0)
    if unpaired:
        assert report.finding("unpaired_flows").count == unpaired
    conflicts = expected_name_conflicts(events)
    assert ("conflicting_names" in kinds) == (conflicts > 0)
    if conflicts:
        assert report.finding("conflicting_names").count == conflicts
    # The overlap rule agrees with the reference, event by event.
    assert dropped_by_check(path) == perfetto_rule.dropped(events)
    assert kinds <= {"unpaired_flows", "overlapping_slices", "conflicting_names"}
    # The command line: loads (0), but not clean (1 with --strict).
    assert run("check", path) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: loads")
    assert run("check", "--strict", path) == (1 if report.warnings else 0)
    capsys.readouterr()


def test_the_examples_are_the_first_in_file_order() -> None:
    path = real_path(NS_RESOLUTION)
    few = kinetrace.check_trace(path, examples=3).finding("overlapping_slices")
    every = kinetrace.check_trace(path, examples=ALL).finding("overlapping_slices")
    assert few is not None and every is not None
    assert few.count == every.count > 3
    assert few.examples == every.examples[:3]
    offsets = [e.offset for e in every.examples]
    assert offsets == sorted(offsets)
    assert sum(t.dropped for t in every.tracks) <= every.count
    assert every.tracks[0].dropped >= every.tracks[-1].dropped
    assert every.track_count >= len(every.tracks)


# --- the overlap rule against the reference ----------------------------------------------------

_ts = st.one_of(
    st.integers(0, 40),
    st.sampled_from([0.5, 1.25, 3.776, 10.0005, 5172265116409.504]),
    st.floats(0, 40, allow_nan=False).map(lambda x: round(x, 3)),
)
_dur = st.one_of(st.integers(0, 20), st.sampled_from([0.0, 0.5, 2.5, -1.0, 1e-4]))
_pid = st.sampled_from([0, 1, "Spans", 1.0, -3])
_tid = st.sampled_from([7, 8, "s", 7.9, None])


@st.composite
def slice_events(draw: Any) -> list[dict[str, Any]]:
    """Events on a few threads: X (nested, disjoint, overlapping, equal starts, zero and
    negative durations), B/E pairs and strays, instants of every scope, some without ts."""
    events = []
    for _ in range(draw(st.integers(0, 40))):
        ph = draw(st.sampled_from(["X"] * 6 + ["B", "E", "i", "I", "s", "f", "M"]))
        e: dict[str, Any] = {"ph": ph, "pid": draw(_pid)}
        tid = draw(_tid)
        if tid is not None:
            e["tid"] = tid
        if draw(st.integers(0, 15)):
            e["ts"] = draw(_ts)
        if ph == "X" and draw(st.integers(0, 15)):
            e["dur"] = draw(_dur)
        if ph in ("B", "E") and draw(st.booleans()):
            e["name"] = draw(st.sampled_from(["a", "b", ""]))
        if ph in ("B", "E") and draw(st.booleans()):
            e["cat"] = draw(st.sampled_from(["c", "d"]))
        if ph in ("i", "I") and draw(st.booleans()):
            e["s"] = draw(st.sampled_from(["t", "p", "g"]))
        if ph in ("s", "f"):
            e["id"] = 1
            e["cat"] = "c"
        if ph == "M":
            e["name"] = "thread_name"
            e["args"] = {"name": "x"}
        events.append(e)
    return events


@given(events=slice_events())
def test_overlap_rule_agrees_with_the_reference(tmp_path_factory, events) -> None:
    path = write_trace(tmp_path_factory.mktemp("rule") / "t.json", events)
    assert dropped_by_check(path) == perfetto_rule.dropped(events)


def test_overlap_rule_cases(tmp_path: Path) -> None:
    """The rule's corner cases: the reference drops what each case names, and so does
    ``check_trace``."""
    cases = {
        # Perfetto's issue 4280: B starts inside A, ends after it.
        "partial": ([(3, 3.776), (5, 2)], [1]),
        "nested": ([(0, 10), (1, 2), (3, 7)], []),
        "shared start, longer first": ([(0, 1), (0, 10)], []),
        "end then start": ([(0, 5), (5, 5)], []),
        "dropped is not on the stack": ([(0, 10), (5, 10), (12, 1)], [1]),
        "a zero slice at the end": ([(0, 5), (5, 0), (5, 3)], []),
    }
    for number, (name, (spans, want)) in enumerate(cases.items()):
        events = [
            {"ph": "X", "pid": 0, "tid": 7, "ts": ts, "dur": dur, "name": str(i)}
            for i, (ts, dur) in enumerate(spans)
        ]
        assert perfetto_rule.dropped(events) == want, name
        path = write_trace(tmp_path / f"case-{number}.json", events)
        assert dropped_by_check(path) == want, name


def test_overlap_rule_agrees_on_deep_and_b_e_traces(tmp_path: Path) -> None:
    # Deeper than Perfetto's 512 (the rest is dropped for depth, not overlap), and B/E
    # pairs crossing complete events.
    deep = [{"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 2000 - 2 * i} for i in range(600)]
    deep += [{"ph": "X", "pid": 1, "tid": 1, "ts": 700, "dur": 1500}]
    mixed = [
        {"ph": "B", "pid": 1, "tid": 2, "ts": 0, "name": "b"},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 1, "dur": 3},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 2},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 2.5, "dur": 3},
        {"ph": "B", "pid": 1, "tid": 2, "ts": 6, "name": "c", "cat": "k"},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 7, "dur": 5},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 9, "cat": "k"},
        {"ph": "X", "pid": 1, "tid": 2, "ts": 10, "dur": 5},
    ]
    for events in (deep, mixed):
        path = write_trace(tmp_path / "t.json", events)
        assert dropped_by_check(path) == perfetto_rule.dropped(events)


# --- constructed findings ----------------------------------------------------------------------


def test_each_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = {"traceEvents": [{"ph": "X", "name": "a", "cat": "c", "ts": 1, "dur": 2}]}
    text = json.dumps(good).encode()
    cases: dict[str, tuple[bytes, str, str]] = {
        "syntax": (text.replace(b'"dur": 2', b'"dur": NaN'), "syntax", "NaN is not valid JSON"),
        "truncated": (text[:-10], "truncated", "end of file"),
        "gzip": (gzip.compress(text)[:-5], "gzip", "corrupt gzip data"),
        "no-events": (b'{"a": 1}', "not_a_trace", 'no "traceEvents"'),
        "scalar": (b'"x"', "not_a_trace", "neither a JSON object nor an array"),
        "not-an-object": (b'{"traceEvents": [1, "x"]}', "not_an_object", "not an object"),
    }
    for name, (data, kind, needle) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        report = kinetrace.check_trace(path)
        assert not report.valid, name
        assert [f.kind for f in report.errors] == [kind], name
        finding = report.errors[0]
        assert finding.level == "error"
        assert needle in finding.examples[0].message, (name, finding)
        assert run("check", path) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"{path}: DOES NOT LOAD"), out
        assert f"  {kind}: " in out
    report = kinetrace.check_trace(tmp_path / "not-an-object.json")
    assert report.errors[0].count == 2
    assert [e.event_index for e in report.errors[0].examples] == [0, 1]
    truncated = kinetrace.check_trace(tmp_path / "truncated.json")
    assert not truncated.complete
    assert truncated.errors[0].examples[0].event_index == 0


def test_each_warning(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "other"}},
        {"ph": "X", "name": "k1", "cat": "kernel", "pid": 0, "tid": 7, "ts": 3, "dur": 3.776},
        {"ph": "X", "name": "k2", "cat": "kernel", "pid": 0, "tid": 7, "ts": 5, "dur": 2},
        {"ph": "X", "name": "neg", "cat": "c", "pid": 1, "tid": 1, "ts": 1, "dur": -1},
        {"ph": "X", "name": "nodur", "cat": "c", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "X", "name": "nots", "cat": "c", "pid": 1, "tid": 1, "dur": 1},
        {"name": "noph", "ts": 1},
        {"ph": "s", "id": 9, "cat": "ac2g", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "X", "name": "big", "cat": "c", "pid": 2**60, "tid": 1, "ts": 1, "dur": 1},
    ]
    path = write_trace(tmp_path / "t.json", events)
    report = kinetrace.check_trace(path)
    assert report.valid and not report.clean
    counts = {f.kind: f.count for f in report.warnings}
    assert counts == {
        "unpaired_flows": 1,
        "overlapping_slices": 1,
        "negative_durations": 1,
        "missing_durations": 1,
        "missing_timestamps": 1,
        "no_phase": 1,
        "imprecise_numbers": 1,
        "conflicting_names": 1,
    }
    overlap = report.finding("overlapping_slices")
    assert overlap.tracks[0].pid == "0" and overlap.tracks[0].tid == "7"
    assert overlap.tracks[0].name == '"stream 7 "'
    assert overlap.examples[0].event_index == 3
    assert all(f.level == "warning" for f in report.warnings)
    # Several gzip members.
    data = path.read_bytes()
    multi = tmp_path / "multi.json.gz"
    multi.write_bytes(gzip.compress(data[:50]) + gzip.compress(data[50:]))
    report = kinetrace.check_trace(multi)
    assert report.finding("gzip_members").count == 2
    assert report.info.gzip_members == 2


def test_json_output_is_the_whole_report(tmp_path: Path, capsys) -> None:
    path = real_path(ALEXNET)
    assert run("check", "--json", "--examples", "2", path) == 0
    out = json.loads(capsys.readouterr().out)
    report = kinetrace.check_trace(path, examples=2)
    assert out == json.loads(json.dumps(report.to_dict()))
    assert out["valid"] is True and out["clean"] is False and out["complete"] is True
    assert {w["kind"] for w in out["warnings"]} == {"unpaired_flows", "overlapping_slices"}
    overlap = next(w for w in out["warnings"] if w["kind"] == "overlapping_slices")
    assert overlap["level"] == "warning" and len(overlap["examples"]) == 2
    assert set(overlap["examples"][0]) == {"offset", "event_index", "message"}
    assert out["info"]["events"] == len(real_trace(path)["traceEvents"])
    assert run("check", "--json", "--strict", path) == 1
    capsys.readouterr()


def test_unreadable_and_bad_arguments(tmp_path: Path, capsys) -> None:
    assert run("check", tmp_path / "missing.json") == 2
    assert "missing.json: No such file or directory" in capsys.readouterr().err
    assert run("check", tmp_path) == 2
    assert "Is a directory" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        kinetrace.check_trace(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="examples"):
        kinetrace.check_trace(tmp_path, examples=-1)
    assert run("check", "--examples", "x", tmp_path) == 2
    capsys.readouterr()


def test_text_report_shape(tmp_path: Path, capsys) -> None:
    path = write_trace(
        tmp_path / "t.json",
        [{"ph": "X", "name": "a", "cat": "c", "pid": 1, "tid": 1, "ts": 1, "dur": 2}],
        schemaVersion=1,
    )
    assert run("check", path) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: loads, nothing to warn about\ninfo:\n")
    assert re.search(r"^  events      1: X 1$", out, re.M), out
    assert "header      schemaVersion 1" in out


# --- what kinetrace writes ---------------------------------------------------------------------


def test_kinetrace_exports_warn_only_as_torch_would(tmp_path: Path) -> None:
    """kinetrace writes torch's bytes: no error, and exactly the warnings torch's own
    exporter's file gets (``compare`` asserts the bytes are the same)."""
    kernels, launches = comms_set()
    usual = chain(
        launch_set(),
        memcpy_memset_set(),
        fwdbwd_set(),
        kernels,
        launches,
        annotation_instant_overhead_set(),
    )
    odd = chain(usual, durations_set(), flow_types_set())  # extreme durations and flow ids
    for name, activities in (("usual", usual), ("odd", odd)):
        text = compare(FakeResult(activities), tmp_path)
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        report = kinetrace.check_trace(path)
        assert report.valid, report.errors
        if name == "usual":
            # What activities of real profiles give: at most flows and overlaps as recorded.
            assert {f.kind for f in report.warnings} <= {"unpaired_flows", "overlapping_slices"}


def test_a_real_profile_exported_by_kinetrace_is_clean(tmp_path: Path) -> None:
    x = torch.randn(16, 16, requires_grad=True)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            (x @ x).relu().sum().backward()
    for name in ("t.json", "t.json.gz"):
        kinetrace.export_chrome_trace(prof, tmp_path / name)
        report = kinetrace.check_trace(tmp_path / name)
        assert report.clean, (report.errors, report.warnings)
        assert report.info.flows_paired > 0


def test_split_and_filter_outputs_load(tmp_path: Path) -> None:
    src = real_path(NS_RESOLUTION)
    result = kinetrace.split_trace(src, 5, out_dir=tmp_path / "parts")
    assert len(result.parts) >= 3
    # Most flow ends a split drops had no other end in the source at all.
    assert result.flow_events_unpaired == kinetrace.check_trace(src).info.flows_unpaired
    for part in result.parts:
        report = kinetrace.check_trace(part.path)
        assert report.valid and report.info.flows_unpaired == 0, report.errors
    kept = tmp_path / "kernels.json"
    filtered = kinetrace.filter_trace(src, kept, include_cats=["kernel", "cuda_runtime"])
    report = kinetrace.check_trace(kept)
    assert report.valid and report.info.flows_unpaired == 0
    assert filtered.flow_events_unpaired > 0
