"""The Trace Event Format's JSON Array Format (the top level is the array of events; its
closing ``]`` may be missing) through every tool over trace files: ``check`` loads it with a
warning, ``repair`` writes the object form, ``compress`` keeps the text, and ``split``,
``filter``, ``merge``, ``summary`` and ``parquet`` read it as they read the same events in the
object form. Garbage is still an error with its place. torch's legacy autograd profiler
(``torch.autograd.profiler_legacy``, which writes this form) is recorded and read too."""

from __future__ import annotations

import dataclasses
import gzip
import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

import kinetrace
from support.cli import run
from support.traces import strict_loads

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (requirements-dev.txt) is absent")
ds = pytest.importorskip("pyarrow.dataset", reason="pyarrow (requirements-dev.txt) is absent")

# A GPU-shaped rank: names, a CPU op launching a kernel (a flow), a step, an instant, a
# counter, events on a string pid.
EVENTS: list[dict[str, Any]] = [
    {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "main"}},
    {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    {
        "ph": "X",
        "cat": "user_annotation",
        "name": "ProfilerStep#1",
        "pid": 7,
        "tid": 7,
        "ts": 1000.5,
        "dur": 400,
    },
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 7,
        "tid": 7,
        "ts": 1010,
        "dur": 30.25,
        "args": {"External id": 3, "Input Dims": [[64, 64], [64, 64]]},
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 7,
        "tid": 7,
        "ts": 1020,
        "dur": 5,
        "args": {"correlation": 9},
    },
    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 7, "tid": 7, "ts": 1020},
    {
        "ph": "X",
        "cat": "kernel",
        "name": "volta_sgemm",
        "pid": 0,
        "tid": 7,
        "ts": 1030,
        "dur": 120.125,
        "args": {"correlation": 9, "stream": 7, "device": 0},
    },
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 1030, "bp": "e"},
    {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD",
        "pid": 0,
        "tid": 7,
        "ts": 1200,
        "dur": 10,
        "args": {"stream": 7},
    },
    {"ph": "i", "s": "t", "name": "marker", "pid": 7, "tid": 7, "ts": 1300},
    {"ph": "C", "name": "memory", "pid": 7, "ts": 1300, "args": {"bytes": 1024}},
    {
        "ph": "X",
        "cat": "Trace",
        "name": "PyTorch Profiler (0)",
        "pid": "Spans",
        "tid": "PyTorch Profiler",
        "ts": 1000,
        "dur": 500,
    },
]


def body(events: list[dict[str, Any]]) -> str:
    """The events one a line, as array-form writers put them."""
    return ",\n".join(json.dumps(e) for e in events)


# Each kind of the form: (text, closed). Torch's legacy writer puts the `]` right after the
# last event; a writer that stopped early leaves it off, after an event or after its comma.
KINDS: dict[str, tuple[str, bool]] = {
    "closed": ("[" + body(EVENTS) + "]", True),
    "closed_newline": ("[\n" + body(EVENTS) + "\n]\n  \n", True),
    "open": ("[" + body(EVENTS), False),
    "open_comma": ("[" + body(EVENTS) + ",\n", False),
    "open_newline": ("[" + body(EVENTS) + "\n\n", False),
}
EMPTY: dict[str, tuple[str, bool]] = {"empty": ("[]", True), "empty_open": ("[\n", False)}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def object_form(path: Path, events: list[dict[str, Any]]) -> Path:
    return write(path, json.dumps({"traceEvents": events}))


def events_of(path: Path) -> list[dict[str, Any]]:
    """The events of an object-form trace file (read strictly)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    doc = strict_loads(data)
    assert isinstance(doc, dict), path
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


def same_events(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> bool:
    """The same events, each as many times (a tool may write metadata after the rest)."""
    return sorted(map(json.dumps, got)) == sorted(map(json.dumps, want))


def warnings_of(report: kinetrace.CheckReport) -> list[str]:
    return [f.kind for f in report.warnings]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_check_loads_it_with_a_warning_naming_the_file(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, closed = KINDS[kind]
    path = write(tmp_path / f"{kind}.json", text)
    report = kinetrace.check_trace(path)
    assert report.valid and report.complete, report.errors
    assert warnings_of(report) == (["array_form"] if closed else ["array_form", "unclosed_array"])
    assert report.finding("array_form").examples[0].message.startswith(str(path))
    assert report.finding("array_form").examples[0].offset == 0
    if not closed:
        end = report.finding("unclosed_array").examples[0]
        assert end.offset == len(text) and end.message.startswith(str(path))
    # The same figures as the same events in the object form, and no top-level key.
    reference = kinetrace.check_trace(object_form(tmp_path / "object.json", EVENTS))
    assert reference.clean
    info, ref = report.info, reference.info
    assert info.events == len(EVENTS) and info.top_level_keys == ()
    assert (info.phases, info.categories, info.processes, info.threads) == (
        ref.phases,
        ref.categories,
        ref.processes,
        ref.threads,
    )
    assert (info.ts_min, info.ts_max, info.flows_paired) == (ref.ts_min, ref.ts_max, 1)
    # The command line: it loads (0), a warning fails --strict (1).
    assert run("check", path) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: loads, with "), out
    assert "  array_form: " in out and f"{path} is a JSON array of events" in out
    assert ("  unclosed_array: " in out) == (not closed)
    assert run("check", "--strict", path) == 1
    capsys.readouterr()
    assert run("check", "--json", path) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["valid"] and printed["info"]["events"] == len(EVENTS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_repair_writes_the_object_form(kind: str, tmp_path: Path) -> None:
    text, closed = KINDS[kind]
    src = write(tmp_path / f"{kind}.json", text)
    for dst in (tmp_path / "out.json", tmp_path / "out.json.gz"):
        report = kinetrace.repair_trace(src, dst)
        changes = {c.kind: c.count for c in report.changes}
        closing = {} if closed else {"closed_array": 1}
        assert changes == {"wrapped_array": 1, **closing}
        assert (report.events_read, report.events_written) == (len(EVENTS), len(EVENTS))
        assert events_of(dst) == EVENTS
        assert kinetrace.check_trace(dst).clean
    # The object form it wrote: its events are the source's text, byte for byte.
    written = (tmp_path / "out.json").read_text()
    assert written.startswith('{"traceEvents": [') and body(EVENTS) in written
    with open(tmp_path / "out.json") as f:
        assert isinstance(json.load(f), dict)
    untangled = kinetrace.repair_trace(src, tmp_path / "untangled.json", untangle=True)
    assert "wrapped_array" in {c.kind for c in untangled.changes}
    assert events_of(tmp_path / "untangled.json") == EVENTS


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_compress_keeps_the_text(kind: str, tmp_path: Path) -> None:
    text, closed = KINDS[kind]
    src = write(tmp_path / f"{kind}.json", text)
    result = kinetrace.compress_trace(src, tmp_path / "out.json.gz")
    assert result.json_bytes == len(text)
    assert gzip.decompress((tmp_path / "out.json.gz").read_bytes()) == text.encode()
    again = kinetrace.check_trace(tmp_path / "out.json.gz")
    assert again.valid and "array_form" in warnings_of(again)
    assert ("unclosed_array" in warnings_of(again)) == (not closed)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_split_and_filter_write_the_object_form(kind: str, tmp_path: Path) -> None:
    text, _ = KINDS[kind]
    src = write(tmp_path / f"{kind}.json", text)
    kept = kinetrace.filter_trace(src, tmp_path / "all.json")
    assert (kept.events_read, kept.events_written) == (len(EVENTS), len(EVENTS))
    assert same_events(events_of(tmp_path / "all.json"), EVENTS)
    assert kinetrace.check_trace(tmp_path / "all.json").clean
    # A criterion: only the GPU's events, with the metadata of what remains (the flow's
    # end goes: its start is on the CPU).
    gpu = kinetrace.filter_trace(src, tmp_path / "gpu.json", pids=[0])
    want = [e for e in EVENTS if e["pid"] == 0 and e["ph"] != "f"]
    assert same_events(events_of(tmp_path / "gpu.json"), want)
    assert (gpu.events_written, gpu.flow_events_cut) == (len(want), 1)
    # Parts: the parts of the same events in the object form, event for event.
    ref = object_form(tmp_path / "object" / src.name, EVENTS)
    parts = kinetrace.split_trace(src, 0.001, out_dir=tmp_path / "parts")
    want_parts = kinetrace.split_trace(ref, 0.001, out_dir=tmp_path / "want")
    assert len(parts.parts) >= 2
    assert (parts.events_read, parts.flow_events_cut) == (len(EVENTS), want_parts.flow_events_cut)
    for got, want_part in zip(parts.parts, want_parts.parts, strict=True):
        assert events_of(Path(got.path)) == events_of(Path(want_part.path))
        assert got.events == want_part.events
        assert kinetrace.check_trace(got.path).valid
    seen = {json.dumps(e) for p in parts.parts for e in events_of(Path(p.path))}
    assert seen >= {json.dumps(e) for e in EVENTS if e["ph"] not in "sf"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_merge_reads_it(kind: str, tmp_path: Path) -> None:
    text, _ = KINDS[kind]
    a = write(tmp_path / "a" / "rank0.json", text)
    b = object_form(tmp_path / "b" / "rank1.json", EVENTS)
    merged = kinetrace.merge_traces([a, b], tmp_path / "m.json")
    assert [r.events_read for r in merged.ranks] == [len(EVENTS), len(EVENTS)]
    assert [r.rank for r in merged.ranks] == [0, 1]
    # Both ranks wrote the same events (process names are the merge's own).
    assert merged.ranks[0].events_written == merged.ranks[1].events_written
    out = events_of(tmp_path / "m.json")
    assert len(out) == merged.events_written
    assert sum(e["name"] == "volta_sgemm" for e in out) == 2
    assert kinetrace.check_trace(tmp_path / "m.json").valid


def figures(summary: kinetrace.Summary) -> list[dict[str, Any]]:
    """Every figure of each rank, but where it came from and the bytes read."""
    return [
        {k: v for k, v in dataclasses.asdict(r).items() if k not in ("source", "json_bytes")}
        for r in summary.ranks
    ]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_summary_equals_the_object_forms(kind: str, tmp_path: Path) -> None:
    text, _ = KINDS[kind]
    src = write(tmp_path / "array" / "trace.json", text)
    ref = object_form(tmp_path / "object" / "trace.json", EVENTS)
    for rules in ("exact", "hta"):
        got, want = kinetrace.summarize(src, rules), kinetrace.summarize(ref, rules)
        assert figures(got) == figures(want), rules
        assert got.ranks[0].events == len(EVENTS)
        assert got.ranks[0].json_bytes == len(text)
    assert figures(kinetrace.summarize(src))[0]["kernels"][0]["name"] == "volta_sgemm"


def rows(root: Path, table: str) -> list[dict[str, Any]]:
    dataset = ds.dataset(root / table, format="parquet", partitioning="hive")
    found: list[dict[str, Any]] = dataset.to_table().to_pylist()
    return found


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_parquet_rows_equal_the_object_forms(kind: str, tmp_path: Path) -> None:
    text, _ = KINDS[kind]
    src = write(tmp_path / "array" / "trace.json", text)
    ref = object_form(tmp_path / "object" / "trace.json", EVENTS)
    got = kinetrace.to_parquet(src, tmp_path / "got")
    want = kinetrace.to_parquet(ref, tmp_path / "want")
    assert (got.ranks[0].events, got.ranks[0].flows, got.ranks[0].tracks) == (8, 2, 3)
    assert got.ranks[0].events == want.ranks[0].events
    for table in ("events", "flows", "tracks"):
        assert rows(tmp_path / "got", table) == rows(tmp_path / "want", table), table
    (meta,) = rows(tmp_path / "got", "meta")
    assert meta["header"] is None and meta["json_bytes"] == len(text)
    assert (meta["events"], meta["flows"], meta["tracks"]) == (8, 2, 3)


@pytest.mark.parametrize("kind", sorted(EMPTY))
def test_an_empty_array_through_every_tool(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, closed = EMPTY[kind]
    src = write(tmp_path / "array" / "trace.json", text)
    empty_object = write(tmp_path / "object" / "trace.json", '{"traceEvents": []}')
    report = kinetrace.check_trace(src)
    assert report.valid and report.info.events == 0
    assert warnings_of(report) == (["array_form"] if closed else ["array_form", "unclosed_array"])
    assert run("check", src) == 0
    assert "array_form" in capsys.readouterr().out
    kinetrace.repair_trace(src, tmp_path / "r.json")
    assert strict_loads((tmp_path / "r.json").read_text()) == {"traceEvents": []}
    kinetrace.compress_trace(src, tmp_path / "c.json.gz")
    assert gzip.decompress((tmp_path / "c.json.gz").read_bytes()) == text.encode()
    # Nothing to keep or split: what the empty object form gets, word for word.
    for path in (src, empty_object):
        with pytest.raises(kinetrace.TraceFormatError, match="no events to keep"):
            kinetrace.filter_trace(path, tmp_path / "f.json")
        with pytest.raises(kinetrace.TraceFormatError, match="no events to split"):
            kinetrace.split_trace(path, 1, out_dir=tmp_path / "parts")
    summary = kinetrace.summarize(src)
    assert figures(summary) == figures(kinetrace.summarize(empty_object))
    assert summary.ranks[0].events == 0
    assert kinetrace.to_parquet(src, tmp_path / "pq").events == 0
    other = object_form(tmp_path / "rank1.json", EVENTS)
    merged = kinetrace.merge_traces([src, other], tmp_path / "m.json")
    assert [r.events_read for r in merged.ranks] == [0, len(EVENTS)]
    assert len(events_of(tmp_path / "m.json")) == merged.events_written


def test_garbage_is_still_an_error_with_its_place(tmp_path: Path) -> None:
    text = KINDS["closed"][0]
    cut = text.index('"volta_sgemm') + 3  # inside the string that starts there
    cases = {
        # (text, check's error, where)
        "cut.json": (text[:cut], "truncated", cut - 3),
        "comma.json": (text[:-1] + ",]", "syntax", len(text)),
        "after.json": (text + " {}", "syntax", len(text) + 1),
        "element.json": ("[" + body(EVENTS) + ",\n7]", "not_an_object", len(text) + 1),
        "scalar.json": ('"x"', "not_a_trace", 0),
    }
    for name, (data, kind, offset) in cases.items():
        path = write(tmp_path / name, data)
        report = kinetrace.check_trace(path)
        assert [f.kind for f in report.errors] == [kind], name
        assert report.errors[0].examples[0].offset == offset, name
        assert run("check", path) == 1
        for tool in (
            partial(kinetrace.compress_trace, path, tmp_path / "out.json.gz"),
            partial(kinetrace.filter_trace, path, tmp_path / "out.json"),
            partial(kinetrace.split_trace, path, 1, out_dir=tmp_path / "parts"),
            partial(kinetrace.to_parquet, path, tmp_path / "pq"),
        ):
            with pytest.raises(kinetrace.TraceFormatError) as raised:
                tool()
            assert raised.value.path == str(path) and raised.value.offset == offset, name
        assert not (tmp_path / "out.json.gz").exists() and not (tmp_path / "pq").exists()


def test_torch_legacy_profiler_writes_it_and_every_tool_reads_it(tmp_path: Path) -> None:
    # torch 2.15: `torch.autograd.profiler.profile(...).export_chrome_trace` goes through
    # Kineto (the object form) wherever Kineto is built in; the legacy profiler (and any
    # `EventList.export_chrome_trace`) still writes the array form.
    from torch.autograd import profiler_legacy

    with profiler_legacy.profile() as prof:
        x = torch.randn(32, 32)
        for _ in range(3):
            x = torch.relu(x @ x)
    src = tmp_path / "legacy" / "trace.json"
    src.parent.mkdir()
    prof.export_chrome_trace(str(src))
    text = src.read_text()
    events = json.loads(text)
    assert text.startswith("[") and isinstance(events, list) and len(events) >= 6
    report = kinetrace.check_trace(src)
    assert report.valid and warnings_of(report) == ["array_form"]
    assert report.info.events == len(events)
    assert run("check", src) == 0
    kinetrace.repair_trace(src, tmp_path / "r.json")
    assert events_of(tmp_path / "r.json") == events
    ref = object_form(tmp_path / "object" / "trace.json", events)
    assert figures(kinetrace.summarize(src)) == figures(kinetrace.summarize(ref))
    kinetrace.to_parquet(src, tmp_path / "got")
    kinetrace.to_parquet(ref, tmp_path / "want")
    assert rows(tmp_path / "got", "events") == rows(tmp_path / "want", "events")
    assert len(rows(tmp_path / "got", "events")) == len(events)
    kept = kinetrace.filter_trace(src, tmp_path / "f.json")
    assert events_of(tmp_path / "f.json") == events and kept.events_read == len(events)
    parts = kinetrace.split_trace(src, 1, out_dir=tmp_path / "parts")
    assert [e for p in parts.parts for e in events_of(Path(p.path))] == events
    merged = kinetrace.merge_traces([src, ref], tmp_path / "m.json", labels=["a", "b"])
    assert [r.events_read for r in merged.ranks] == [len(events), len(events)]
    kinetrace.compress_trace(src, tmp_path / "c.json.gz")
    assert gzip.decompress((tmp_path / "c.json.gz").read_bytes()) == text.encode()
