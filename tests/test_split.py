"""``kinetrace split`` / ``filter`` and ``keep=`` / ``split_mb=`` at export time.

Every part and every filtered trace is checked the same way: strict JSON, accepted by
``kinetrace check`` (flows paired within it), the source's top-level keys, metadata only for
the processes and threads present, and each event's text exactly the source's. For splits,
the union of the parts equals the source as a multiset of events, less the flow events cut
at a window edge (which are counted). Real CPU profiles, constructed GPU-shaped traces, and
(in tests/test_big_traces.py, the slow set) a 1 GB one.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import kinetrace
from support.consumers import consumer
from support.fakes import FakeResult
from support.interrupts import Sigint, assert_prompt
from support.real import RawEvent, raw_events, real_params, real_text
from support.scenarios import chain, comms_set, fwdbwd_set, launch_set, memcpy_memset_set
from support.synthetic import SyntheticResult
from support.traces import read_trace, single_member_text, strict_loads

HERE = Path(__file__).parent


def event_lines(text: bytes) -> list[bytes]:
    """The event texts of a trace written one event per line (kinetrace's and torch's
    layout, kept by split and filter)."""
    out = []
    for line in text.split(b"\n"):
        line = line.rstrip(b",")
        if line.startswith(b'{"ph"'):
            out.append(line)
    return out


def key(event: dict[str, Any]) -> str:
    return json.dumps(event, sort_keys=True)


def assert_kept_trace(path: str | Path, source_text: bytes) -> dict[str, Any]:
    """The assertions every output gets; returns the parsed trace."""
    text = read_trace(path)
    if os.fspath(path).endswith(".gz"):
        assert single_member_text(Path(path).read_bytes()) == text
    trace = strict_loads(text)
    report = kinetrace.check_trace(path)
    assert report.valid, report.errors
    assert report.info.flows_unpaired == 0
    source = strict_loads(source_text)
    for k, v in source.items():
        if k != "traceEvents":
            assert trace[k] == v, k
    # Each event is the source's text.
    source_lines = set(event_lines(source_text))
    lines = event_lines(text)
    assert len(lines) == len(trace["traceEvents"])
    assert set(lines) <= source_lines
    # Metadata for exactly what is present.
    events = trace["traceEvents"]
    pids = {json.dumps(e.get("pid")) for e in events if e["ph"] != "M"}
    threads = {
        (json.dumps(e.get("pid")), json.dumps(e.get("tid"))) for e in events if e["ph"] != "M"
    }
    for m in (e for e in events if e["ph"] == "M"):
        if m["name"].startswith("thread_"):
            assert (json.dumps(m["pid"]), json.dumps(m["tid"])) in threads, m
        else:
            assert json.dumps(m["pid"]) in pids, m
    wanted = [
        m
        for m in source["traceEvents"]
        if m["ph"] == "M"
        and (
            (json.dumps(m["pid"]), json.dumps(m["tid"])) in threads
            if m["name"].startswith("thread_")
            else json.dumps(m["pid"]) in pids
        )
    ]
    assert sorted(map(key, wanted)) == sorted(key(m) for m in events if m["ph"] == "M")
    return trace


def assert_split(result: kinetrace.SplitResult, source_text: bytes, max_mb: float) -> None:
    source = strict_loads(source_text)
    union: collections.Counter[str] = collections.Counter()
    previous_end = float("-inf")
    n = len(result.parts)
    assert n >= 2
    for i, part in enumerate(result.parts, start=1):
        assert f".part-{i:03}-of-{n:03}." in os.path.basename(part.path)
        trace = assert_kept_trace(part.path, source_text)
        assert len(read_trace(part.path)) == part.json_bytes <= max_mb * 1e6
        info = trace["kinetrace_part"]
        assert (info["index"], info["count"]) == (i, n)
        assert info["start_us"] == part.start_us >= previous_end
        assert part.start_us < part.end_us == info["end_us"]
        previous_end = part.end_us
        for e in trace["traceEvents"]:
            if e["ph"] == "X":
                assert part.start_us <= e["ts"] < part.end_us
            if e["ph"] != "M":
                union[key(e)] += 1
    want = collections.Counter(key(e) for e in source["traceEvents"] if e["ph"] != "M")
    assert not union - want, "events that are not in the source"
    lost = want - union
    assert all(json.loads(k)["ph"] in ("s", "f") for k in lost), lost
    assert sum(lost.values()) == result.flow_events_cut + result.flow_events_unpaired
    assert result.oversized_parts == 0


@pytest.fixture(scope="module")
def cpu_profile() -> Any:
    from torch.profiler import profile, record_function

    x = torch.randn(32, 32, requires_grad=True)
    with profile(record_shapes=True) as prof:
        for _ in range(60):
            with record_function("train_step"):
                (x @ x).relu().sum().backward()
    return prof


def gpu_result(id_offset: int = 0) -> FakeResult:
    """Launches on two streams, memcpy/memset, fwdbwd flows, comms kernels.

    ``id_offset`` moves every correlation id (fields and ``"correlation"`` metadata) up, as
    in long real runs: HTA 0.5 fails on a trace whose ``correlation`` values all fit in an
    int8 but that has more than 127 rows (it stores row indices in that column's dtype), a
    bug of its own that the small ids of the constructed sets can hit in one part.
    """
    kernels, comms = comms_set()
    result = FakeResult(
        chain(
            launch_set(40),
            launch_set(30, stream=8),
            memcpy_memset_set(),
            fwdbwd_set(),
            kernels,
            comms,
        )
    )
    if id_offset:
        for act in result.all_activities():
            for field in ("correlation_id", "linked_correlation_id"):
                if act.values[field]:
                    act.values[field] += id_offset
            act.values["metadata_json"] = re.sub(
                r'"correlation": (\d+)',
                lambda m: f'"correlation": {int(m.group(1)) + id_offset}',
                act.values["metadata_json"],
            )
    return result


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_split_real_profile(cpu_profile, tmp_path, name):
    src = tmp_path / name
    kinetrace.export_chrome_trace(cpu_profile, src)
    text = read_trace(src)
    out = tmp_path / "parts"
    out.mkdir()
    max_mb = len(text) / 5 / 1e6
    result = kinetrace.split_trace(src, max_mb, out_dir=out)
    assert 5 <= len(result.parts) <= 7
    assert all(
        p.path.endswith(".json.gz" if name.endswith(".gz") else ".json") for p in result.parts
    )
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in result.paths)
    assert_split(result, text, max_mb)
    assert result.flow_events_cut > 0  # fwdbwd flows run across the steps


def test_split_gpu_shaped_trace(tmp_path):
    src = tmp_path / "gpu.json"
    kinetrace.export_chrome_trace(gpu_result(), src)
    text = src.read_bytes()
    result = kinetrace.split_trace(src, len(text) / 3 / 1e6)
    assert_split(result, text, len(text) / 3 / 1e6)
    kernels = [k for p in result.paths for k in json.loads(read_trace(p))["traceEvents"]]
    assert sum(e.get("cat") == "kernel" for e in kernels) == text.count(b'"cat":"kernel"')
    assert any(e.get("cat") == "ac2g" for e in kernels)


@pytest.mark.parametrize(
    "criteria",
    [
        {"exclude_cats": ["cpu_op"]},
        {"include_cats": ["kernel", "gpu_memcpy"]},
        {"min_dur_us": 5.0},
        {"pids": [0]},
    ],
)
def test_filter_gpu_shaped_trace(tmp_path, criteria):
    src = tmp_path / "gpu.json"
    kinetrace.export_chrome_trace(gpu_result(), src)
    text = src.read_bytes()
    dst = tmp_path / "kept.json.gz"
    result = kinetrace.filter_trace(src, dst, **criteria)
    trace = assert_kept_trace(dst, text)
    assert result.events_written == len(trace["traceEvents"])
    events = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    keep = kinetrace.Keep(**criteria)
    for e in events:
        if e["ph"] in ("s", "f"):
            continue
        if keep.include_cats and "cat" in e:
            assert e["cat"] in keep.include_cats
        assert e.get("cat") not in keep.exclude_cats
        if keep.min_dur_us is not None and "dur" in e:
            assert e["dur"] >= keep.min_dur_us
        if keep.pids:
            assert e["pid"] in keep.pids
    # Every source event that passes is there.
    source = strict_loads(text)["traceEvents"]
    passing = [
        e
        for e in source
        if e["ph"] not in ("M", "s", "f")
        and not (keep.include_cats and "cat" in e and e["cat"] not in keep.include_cats)
        and e.get("cat") not in keep.exclude_cats
        and not (keep.min_dur_us is not None and e.get("dur", 1e99) < keep.min_dur_us)
        and not (keep.pids and e.get("pid") not in keep.pids)
    ]
    assert sorted(map(key, passing)) == sorted(key(e) for e in events if e["ph"] not in ("s", "f"))


def test_export_keep_is_byte_identical(tmp_path, cpu_profile):
    full = tmp_path / "full.json"
    kinetrace.export_chrome_trace(cpu_profile, full)
    full_lines = set(event_lines(full.read_bytes()))
    kept = tmp_path / "kept.json"
    keep = kinetrace.Keep(exclude_cats=["cpu_op"], min_dur_us=1.0)
    result = kinetrace.export_chrome_trace(cpu_profile, kept, keep=keep)
    assert isinstance(result, kinetrace.FilterResult)
    text = kept.read_bytes()
    trace = strict_loads(text)
    assert trace["traceName"] == str(kept)
    assert set(event_lines(text)) <= full_lines
    assert not any(e.get("cat") == "cpu_op" for e in trace["traceEvents"])
    assert any(e.get("cat") == "user_annotation" for e in trace["traceEvents"])
    assert kinetrace.check_trace(kept).valid
    assert sorted(os.listdir(tmp_path)) == ["full.json", "kept.json"]
    # A dict works too, and gzip.
    kinetrace.export_chrome_trace(cpu_profile, tmp_path / "k.json.gz", keep={"pids": ["Spans"]})
    spans = json.loads(gzip.decompress((tmp_path / "k.json.gz").read_bytes()))["traceEvents"]
    assert {e["pid"] for e in spans} == {"Spans"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="workers need fork")
def test_export_keep_same_for_any_worker_count(tmp_path):
    result = SyntheticResult(30_000, gpu=True)
    outputs = []
    for workers in (1, 2, 3):
        path = tmp_path / f"w{workers}.json"
        kinetrace.export_chrome_trace(
            result, path, keep=kinetrace.Keep(exclude_cats=["cpu_op"]), workers=workers
        )
        outputs.append(path.read_bytes().replace(str(path).encode(), b"PATH"))
    assert outputs[0] == outputs[1] == outputs[2]


def test_export_split_mb(tmp_path, cpu_profile):
    path = tmp_path / "trace.json.gz"
    full = tmp_path / "full.json"
    kinetrace.export_chrome_trace(cpu_profile, full)
    text = full.read_bytes()
    result = kinetrace.export_chrome_trace(cpu_profile, path, split_mb=len(text) / 4e6)
    assert isinstance(result, kinetrace.SplitResult)
    assert not path.exists()
    assert [os.path.basename(p) for p in result.paths] == [
        f"trace.part-{i:03}-of-{len(result.parts):03}.json.gz"
        for i in range(1, len(result.parts) + 1)
    ]
    # Same events as the plain export (traceName aside).
    for p in result.paths:
        assert json.loads(read_trace(p))["traceName"] == str(path)
    assert_split(result, text.replace(str(full).encode(), str(path).encode()), len(text) / 4e6)
    # keep and split together.
    both = kinetrace.export_chrome_trace(
        cpu_profile,
        tmp_path / "both.json",
        split_mb=len(text) / 3e6,
        keep={"exclude_cats": ["cpu_op"]},
    )
    for p in both.paths:
        assert not any(e.get("cat") == "cpu_op" for e in json.loads(read_trace(p))["traceEvents"])
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".kinetrace-tmp")]
    with pytest.raises(ValueError, match="background"):
        kinetrace.export_chrome_trace(cpu_profile, path, split_mb=1, background=True)
    with pytest.raises(ValueError, match="more than 0"):
        kinetrace.export_chrome_trace(cpu_profile, path, split_mb=0)
    with pytest.raises(TypeError, match="Keep"):
        kinetrace.export_chrome_trace(cpu_profile, path, keep=["cpu_op"])


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"background": True, "keep": {"include_cats": ["kernel"]}}, ValueError, "background"),
        ({"background": True, "split_mb": 5}, ValueError, "background"),
        ({"split_mb": 0}, ValueError, "more than 0"),
        ({"keep": ["kernel"]}, TypeError, "Keep"),
        ({"keep": {"min_dur_us": -1}}, ValueError, "min_dur_us"),
    ],
)
def test_handler_and_export_refuse_the_same_settings(tmp_path, settings, error, message):
    """One validation for both entry points: what export_chrome_trace refuses, the handler
    refuses when it is made (before any trace), never exporting otherwise than asked."""
    with pytest.raises(error, match=message):
        kinetrace.export_chrome_trace(SyntheticResult(10), tmp_path / "t.json", **settings)
    with pytest.raises(error, match=message):
        kinetrace.tensorboard_trace_handler(tmp_path / "tb", **settings)
    assert os.listdir(tmp_path) == []


def test_handler_exports_every_trace_with_the_options_it_checked(tmp_path, monkeypatch):
    """The handler checks its settings once, when it is made, and hands those same options
    (``keep`` as a :class:`kinetrace.Keep`) to the export of every trace."""
    from kinetrace._export import export as _export

    given = []
    monkeypatch.setattr(_export, "export", lambda prof, path, options: given.append(options))
    handler = kinetrace.tensorboard_trace_handler(
        tmp_path, worker_name="w", keep={"min_dur_us": 2.0}, split_mb=1
    )
    handler(SyntheticResult(10))
    handler(SyntheticResult(10))
    assert len(given) == 2 and given[0] is given[1]
    assert given[0].keep == kinetrace.Keep(min_dur_us=2.0) and given[0].split_mb == 1


def test_tensorboard_handler_split(tmp_path):
    from torch.profiler import profile

    handler = kinetrace.tensorboard_trace_handler(
        tmp_path, worker_name="w0", use_gzip=True, split_mb=0.05, keep={"min_dur_us": 0.0}
    )
    x = torch.randn(32, 32)
    with profile(on_trace_ready=handler):
        for _ in range(200):
            (x @ x).relu()
    names = sorted(os.listdir(tmp_path))
    assert len(names) >= 2, names
    for n in names:
        assert n.startswith("w0.") and ".part-" in n and n.endswith(".pt.trace.json.gz"), n
        assert kinetrace.check_trace(tmp_path / n).valid


@pytest.mark.parametrize("rank_split", [True, False])
@pytest.mark.filterwarnings(r"ignore:The inplace keyword in DataFrame\.\w+ is deprecated")
@pytest.mark.filterwarnings(r"ignore:The copy keyword is deprecated")
def test_parts_load_in_hta(tmp_path, rank_split):
    trace_analysis = consumer("hta.trace_analysis")
    src = tmp_path / "gpu.json"
    kinetrace.export_chrome_trace(gpu_result(id_offset=1_000_000), src)
    text = src.read_bytes()
    if rank_split:
        result = kinetrace.split_trace(src, len(text) / 2.5e6, out_dir=tmp_path)
        paths = result.paths
    else:
        dst = tmp_path / "kept.json"
        kinetrace.filter_trace(src, dst, include_cats=["kernel", "cuda_runtime", "cpu_op"])
        paths = [str(dst)]
    for p in paths:
        directory = tmp_path / f"hta-{os.path.basename(p)}"
        directory.mkdir()
        os.link(p, directory / "rank0.pt.trace.json")
        analysis = trace_analysis.TraceAnalysis(trace_dir=str(directory))
        frame = analysis.t.get_trace(analysis.t.get_ranks()[0])
        # HTA leaves out the "Trace" span on the string pid "Spans", as for a whole trace.
        events = [
            e
            for e in json.loads(read_trace(p))["traceEvents"]
            if e["ph"] == "X" and isinstance(e["pid"], int)
        ]
        assert len(frame) >= len(events) > 0


# ------------------------------------------------------------------------------------------
# command line and bad input
# ------------------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinetrace", *args], capture_output=True, text=True, timeout=300
    )


def test_cli_split_and_filter(tmp_path):
    src = tmp_path / "gpu.json.gz"
    kinetrace.export_chrome_trace(gpu_result(), src)
    size = len(read_trace(src))
    out = tmp_path / "out"
    out.mkdir()
    run = cli("split", str(src), "--max-mb", str(size / 3e6), "--out-dir", str(out))
    assert run.returncode == 0, run.stderr
    names = sorted(os.listdir(out))
    assert len(names) >= 3 and all(n.endswith(".json.gz") for n in names)
    assert "parts" in run.stdout and names[0] in run.stdout
    dst = tmp_path / "f.json"
    run = cli("filter", str(src), str(dst), "--exclude-cat", "kernel", "--min-dur-us", "1")
    assert run.returncode == 0, run.stderr
    assert "kept" in run.stdout
    assert not any(e.get("cat") == "kernel" for e in json.loads(dst.read_text())["traceEvents"])
    run = cli("filter", str(src), str(dst), "--window", "5:4")
    assert run.returncode == 2 and "START must be less than END" in run.stderr
    run = cli("split", str(src), "--max-mb", "0")
    assert run.returncode == 2 and "more than 0" in run.stderr


def test_bad_input_errors_and_leaves_nothing(tmp_path):
    good = tmp_path / "good.json.gz"
    kinetrace.export_chrome_trace(gpu_result(), good)
    blob = good.read_bytes()
    text = gzip.decompress(blob)
    out = tmp_path / "out"
    out.mkdir()
    cases = {
        "cut.json.gz": (blob[: len(blob) // 2], "gzip", "corrupt gzip data"),
        "cut.json": (text[: len(text) // 2], "truncated", "end of file"),
        "nan.json": (
            text.replace(b'"dur":', b'"dur":NaN,"x":', 1),
            "syntax",
            "NaN is not valid JSON",
        ),
        "list.json": (b"[1, 2]", "not_a_trace", "not a trace"),
        "keys.json": (b'{"schemaVersion": 1}', "not_a_trace", 'no "traceEvents"'),
    }
    for name, (data, kind, message) in cases.items():
        src = tmp_path / name
        src.write_bytes(data)
        with pytest.raises(kinetrace.TraceFormatError, match=message) as info:
            kinetrace.split_trace(src, 0.001, out_dir=out)
        error = info.value
        assert error.kind == kind, name  # what code matches: the kind, never the message
        assert isinstance(error, ValueError)  # what callers caught before it existed
        assert error.path == str(src) and str(error).startswith(f"{src}: ")
        # The offset points into the decompressed JSON, at or before where it breaks.
        assert error.offset is not None and 0 <= error.offset <= len(text), name
        assert f"offset {error.offset}" in str(error)
        if name == "nan.json":
            assert error.event_index is not None
            assert f"(traceEvents[{error.event_index}])" in str(error)
        # A copy made by pickling (how a forked worker's error comes back) keeps the fields.
        copy = pickle.loads(pickle.dumps(error))
        fields = (type(copy), str(copy), copy.path, copy.offset, copy.event_index, copy.kind)
        assert fields == (
            type(error),
            str(error),
            error.path,
            error.offset,
            error.event_index,
            error.kind,
        )
        with pytest.raises(kinetrace.TraceFormatError, match=message) as info:
            kinetrace.filter_trace(src, out / "f.json")
        assert info.value.kind == kind, name
        run = cli("split", str(src), "--max-mb", "0.001", "--out-dir", str(out))
        assert run.returncode == 1 and name in run.stderr and message in run.stderr
        assert os.listdir(out) == [], name
    # A window that selects nothing; an existing output stays as it was.
    (out / "f.json").write_text("old")
    with pytest.raises(ValueError, match="selects no events") as caught:
        kinetrace.filter_trace(good, out / "f.json", window_us=(1e15, 2e15))
    # In the user's words, not the code's.
    assert "(none has a span overlapping [1000000000000000, 2000000000000000) us)" in str(
        caught.value
    )
    assert (out / "f.json").read_text() == "old"
    os.remove(out / "f.json")
    # Sizes: not positive, too small for the header.
    with pytest.raises(ValueError, match="more than 0"):
        kinetrace.split_trace(good, -1)
    with pytest.raises(ValueError, match="choose a larger size"):
        kinetrace.split_trace(good, 1e-5, out_dir=out)
    # An out dir that is not a directory; a missing one is created, and removed again (with
    # the parents it needed) when the split fails.
    with pytest.raises(NotADirectoryError):
        kinetrace.split_trace(good, 0.01, out_dir=good)
    with pytest.raises(ValueError, match="choose a larger size"):
        kinetrace.split_trace(good, 1e-5, out_dir=tmp_path / "missing" / "parts")
    assert not (tmp_path / "missing").exists()
    made = kinetrace.split_trace(good, 0.01, out_dir=tmp_path / "new" / "parts")
    assert made.parts and all(
        os.path.dirname(part.path) == str(tmp_path / "new" / "parts") for part in made.parts
    )
    shutil.rmtree(tmp_path / "new")
    assert os.listdir(out) == []
    assert sorted(os.listdir(tmp_path)) == sorted([*cases, "good.json.gz", "out"])


# ------------------------------------------------------------------------------------------
# a plain .json of several chunks: read by one scanning thread per core
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chunked_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~15 MB of JSON: more than two of the 2 MiB chunks a plain .json is scanned in."""
    path = tmp_path_factory.mktemp("chunked") / "big.json"
    synthetic_trace(path, 40_000)
    assert path.stat().st_size > 8 * 2**20
    return path


def test_split_of_a_json_read_in_chunks(chunked_trace, tmp_path):
    text = chunked_trace.read_bytes()
    max_mb = len(text) / 4 / 1e6
    result = kinetrace.split_trace(chunked_trace, max_mb, out_dir=tmp_path)
    assert_split(result, text, max_mb)
    assert result.json_bytes_read == len(text)
    assert result.events_read == len(strict_loads(text)["traceEvents"])


def test_filter_of_a_json_read_in_chunks(chunked_trace, tmp_path):
    text = chunked_trace.read_bytes()
    dst = tmp_path / "kept.json"
    cats = ["kernel", "cuda_runtime"]
    kinetrace.filter_trace(chunked_trace, dst, include_cats=cats)
    trace = assert_kept_trace(dst, text)
    source = strict_loads(text)["traceEvents"]
    timed = [e for e in source if e["ph"] not in ("M", "s", "f")]
    passing = [e for e in timed if e.get("cat", cats[0]) in cats]
    kept = [e for e in trace["traceEvents"] if e["ph"] not in ("M", "s", "f")]
    assert len(passing) > 1000
    assert sorted(map(key, kept)) == sorted(map(key, passing))


def test_split_of_a_json_in_kinetos_layout(chunked_trace, tmp_path):
    """Events over several lines and arrays laid out one element per line: text between
    lines that looks like the start of an event must not fool the chunked reader."""
    source = strict_loads(chunked_trace.read_bytes())
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(source, indent=2))
    max_mb = pretty.stat().st_size / 3 / 1e6
    result = kinetrace.split_trace(pretty, max_mb, out_dir=tmp_path / "parts")
    assert len(result.parts) >= 3 and result.oversized_parts == 0
    union: collections.Counter[str] = collections.Counter()
    for part in result.parts:
        report = kinetrace.check_trace(part.path)
        assert report.valid and report.info.flows_unpaired == 0, report.errors
        events = strict_loads(read_trace(part.path))["traceEvents"]
        union.update(key(e) for e in events if e["ph"] != "M")
    want = collections.Counter(key(e) for e in source["traceEvents"] if e["ph"] != "M")
    lost = want - union
    assert not union - want
    assert all(json.loads(k)["ph"] in ("s", "f") for k in lost)
    assert sum(lost.values()) == result.flow_events_cut + result.flow_events_unpaired


def test_ctrl_c_while_reading_in_chunks(tmp_path_factory, tmp_path):
    """Ctrl-C reaches a split whose reading threads are busy: prompt, and nothing left."""
    src = tmp_path_factory.mktemp("ctrl-c") / "big.json"
    synthetic_trace(src, 300_000)
    out = tmp_path / "parts"
    with Sigint().installed() as sigint:
        sigint.after(0.02)
        latency = sigint.expect(lambda: kinetrace.split_trace(src, 10.0, out_dir=out))
    assert_prompt(latency)
    assert not out.exists() or list(out.iterdir()) == []
    assert sorted(os.listdir(src.parent)) == ["big.json"]


# The multi-GB split and filter: tests/test_big_traces.py (the slow set).


def synthetic_trace(path: Path, activities: int) -> None:
    run = subprocess.run(
        [sys.executable, str(HERE / "synthetic.py"), "export", str(activities), str(path), "--gpu"],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert run.returncode == 0, run.stderr


# --- every real trace (../shared/traces) ------------------------------------------------------


def _non_meta(events: list[RawEvent]) -> collections.Counter[bytes]:
    return collections.Counter(e.raw for e in events if e.ph != "M")


def _output_events(path: str | Path) -> list[RawEvent]:
    """The events of an output, checked first: it loads."""
    report = kinetrace.check_trace(path)
    assert report.valid, report.errors
    return raw_events(read_trace(path))


def _flows(events: list[RawEvent]) -> dict[tuple[Any, str | None], collections.Counter[bytes]]:
    """The flow ends (``s``, ``t``, ``f``) of each flow, by (``cat``, ``id``)."""
    flows: dict[tuple[Any, str | None], collections.Counter[bytes]] = collections.defaultdict(
        collections.Counter
    )
    for e in events:
        if e.ph in ("s", "t", "f"):
            flows[(e.cat, e.id)][e.raw] += 1
    return flows


def _assert_flows_whole(events: list[RawEvent], source: list[RawEvent]) -> None:
    """Every flow of the output has all the ends it has in the source, and more than one
    (some real flows have several ``f`` to one ``s``, or no other end at all)."""
    every = _flows(source)
    for flow, ends in _flows(events).items():
        assert ends == every[flow], flow
        assert sum(ends.values()) > 1, flow


def _assert_metadata_follows(events: list[RawEvent], source: list[RawEvent]) -> None:
    """The output's metadata events are exactly the source's for the processes and threads
    its other events are on."""
    pids = {e.pid for e in events if e.ph != "M"}
    threads = {(e.pid, e.tid) for e in events if e.ph != "M"}

    def wanted(m: RawEvent) -> bool:
        thread = (m.name or "").startswith("thread_")
        return (m.pid, m.tid) in threads if thread else m.pid in pids

    got = collections.Counter(e.raw for e in events if e.ph == "M")
    want = collections.Counter(m.raw for m in source if m.ph == "M" and wanted(m))
    assert got == want


@pytest.mark.parametrize("path", real_params())
def test_split_every_real_trace(path: Path, tmp_path: Path) -> None:
    """A real trace in three or four parts: each part loads and holds the metadata of what it
    has, and together they hold every event of the source exactly once, byte for byte,
    except the flow ends a split drops (of flows cut between parts, or without another end
    in the source already). Flow ends are paired in file order, as viewers do: an ``id``
    reused by later flows (hundreds of ends in hta/trace_diff__test) is not one flow."""
    text = real_text(path)
    source = raw_events(text)
    # Each part holds the top-level keys and the metadata of what it has (39 MB of the 87 of
    # hta/mtia_trace_single_rank): room for all of them and a third of the other events.
    header = len(text) - sum(len(e.raw) for e in source if e.ph != "M")
    max_bytes = header + max((len(text) - header) // 3, 4 * max(len(e.raw) for e in source))
    out = tmp_path / "parts"
    result = kinetrace.split_trace(path, max_bytes / 1e6, out_dir=out, gzip=False)
    assert len(result.parts) >= 2 or len(source) < 8
    together: collections.Counter[bytes] = collections.Counter()
    for part in result.parts:
        events = _output_events(part.path)
        assert part.json_bytes <= max_bytes or result.oversized_parts > 0
        _assert_metadata_follows(events, source)
        together += _non_meta(events)
    want = _non_meta(source)
    assert not together - want, "events that are not the source's"
    flows = {e.raw for e in source if e.ph in ("s", "t", "f")}
    lost = want - together
    assert set(lost) <= flows
    assert sum(lost.values()) == result.flow_events_cut + result.flow_events_unpaired
    assert sum(part.json_bytes > max_bytes for part in result.parts) <= result.oversized_parts
    shutil.rmtree(out)  # ~90 MB for the largest: not kept for pytest's last three runs


@pytest.mark.parametrize("path", real_params())
def test_filter_every_real_trace(path: Path, tmp_path: Path) -> None:
    """A real trace without its most common category and its slices under 1 µs: the output
    loads and holds exactly the source's events that pass (byte for byte), only whole flows,
    and the metadata of what remains."""
    source = raw_events(real_text(path))
    cats = collections.Counter(e.cat for e in source if e.ph not in ("M", "s", "t", "f") and e.cat)
    drop = [cats.most_common(1)[0][0]] if cats else []
    dst = tmp_path / "kept.json"
    result = kinetrace.filter_trace(path, dst, exclude_cats=drop, min_dur_us=1.0)
    events = _output_events(dst)
    assert result.events_written == len(events)

    def passes(e: RawEvent) -> bool:
        return e.cat not in drop and (e.dur is None or e.dur >= 1.0)

    others = [e for e in source if e.ph not in ("M", "s", "t", "f")]
    kept = [e for e in events if e.ph not in ("M", "s", "t", "f")]
    assert collections.Counter(e.raw for e in kept) == collections.Counter(
        e.raw for e in others if passes(e)
    )
    _assert_flows_whole(events, source)
    _assert_metadata_follows(events, source)
    dst.unlink()
