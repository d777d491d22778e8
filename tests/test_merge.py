"""``kinetrace merge`` / ``kinetrace.merge_traces``: many ranks on one timeline.

Every source event must be in the merged trace exactly once under the documented mapping
(``support.merged``: pid map, exact ts shift, flow ids per rank), processes named and sorted
rank by rank, the result strict JSON that ``kinetrace check`` accepts; bad sources are clear
errors that leave nothing behind. The 2-rank gloo run is merged in ``test_distributed``, and
loaded by Catapult in ``test_consumers``.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from support.aftermath import subprocess_env
from support.interrupts import Sigint, assert_prompt
from support.merged import check_merge
from support.real import DLRM_RANKS, MISSING, real_path
from support.synthetic import SyntheticResult, distributed_info

BASE = 1_790_857_026_000_000_000


def _rank(path: Path, rank: int | None, *, n: int = 1500, base: int = BASE, seed: int = 0) -> Path:
    """One rank's synthetic trace: the same CPU pid (this process's) and GPU 0 in every
    rank, flow ids from the same seed (so they collide across ranks), recorded at the same
    wall-clock times."""
    metadata = None if rank is None else distributed_info(rank, 4)
    kinetrace.export_chrome_trace(
        SyntheticResult(n, seed=seed, gpu=True),
        path,
        base_time_ns=base,
        metadata=metadata,
    )
    return path


def _events_by_name(trace: dict[str, Any], pid: int) -> Counter[tuple[str, str]]:
    return Counter(
        (e["name"], str(e["ts"]))
        for e in trace["traceEvents"]
        if e["pid"] == pid and e["ph"] == "X"
    )


def test_ranks_with_colliding_pids_flow_ids_and_different_bases(tmp_path: Path) -> None:
    # Three ranks recorded at the same instants; each written against its own base (one
    # before, one gzip of two members, one 2.5 ms later), given out of rank order.
    r2 = _rank(tmp_path / "b.json", 2, base=BASE + 2_500_000)
    r0 = _rank(tmp_path / "a.json", 0)
    r1 = tmp_path / "c.json.gz"
    text = _rank(tmp_path / "c.json", 1, base=BASE - 1_000).read_bytes()
    half = len(text) // 2
    r1.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    sources = [r2, r0, r1]
    dst = tmp_path / "merged.json"
    result = kinetrace.merge_traces(sources, dst)
    assert [r.label for r in result.ranks] == ["rank 0", "rank 1", "rank 2"]
    assert [r.rank_from for r in result.ranks] == ["distributedInfo"] * 3
    assert result.base_time_ns == BASE - 1_000
    assert [r.offset_ns for r in result.ranks] == [1_000, 0, 2_501_000]
    merged = check_merge(dst, sources)
    assert kinetrace.check_trace(dst).valid
    # One clock: every rank's CPU ops land at the same merged times.
    record = merged["kinetrace_merge"]["ranks"]
    cpu = [next(p["pid"] for p in r["pids"] if p["source"] == os.getpid()) for r in record]
    strict = json.loads(dst.read_text())
    per_rank = [_events_by_name(strict, pid) for pid in cpu]
    assert per_rank[0] == per_rank[1] == per_rank[2]
    assert sum(per_rank[0].values()) > 1000
    # No arrow joins two ranks: each (cat, id) has one start and one finish.
    ends = Counter((e["cat"], e["id"], e["ph"]) for e in strict["traceEvents"] if "id" in e)
    assert ends and set(ends.values()) == {1}
    # Names and order: rank by rank, CPU then GPU.
    names = [p.name for r in result.ranks for p in r.processes]
    assert names[:3] == [f"rank 0 · pid {os.getpid()}", "rank 0 · GPU 0", "rank 0 · Spans"]
    assert [n.split(" · ")[0] for n in names] == sorted(n.split(" · ")[0] for n in names)
    # Every top-level key of each source, under its rank.
    for rank in record:
        assert rank["header"]["distributedInfo"]["rank"] == int(rank["label"].split()[1])
        assert "baseTimeNanoseconds" in rank["header"]
    assert result.events_read == sum(len(json.loads(_json(p))["traceEvents"]) for p in sources)
    assert result.outputs[0].path == str(dst) and result.warnings == ()


def _json(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_a_log_directory_and_ranks_from_file_names(tmp_path: Path) -> None:
    logs = tmp_path / "log"
    logs.mkdir()
    # As tensorboard_trace_handler names them, without distributedInfo.
    for rank in (1, 0, 3):
        _rank(logs / f"host_rank-{rank}.1700000000.pt.trace.json", None, n=400, seed=rank)
    (logs / "notes.txt").write_text("not a trace")
    (logs / ".hidden.json").write_text("{}")
    dst = logs / "all.json.gz"
    result = kinetrace.merge_traces([logs], dst, threads=1)
    assert [r.rank for r in result.ranks] == [0, 1, 3]
    assert {r.rank_from for r in result.ranks} == {"file name"}
    sources = sorted(logs.glob("host_rank-*.json"))
    check_merge(dst, sources)
    # A second merge into the same folder does not take the first one's output as a source.
    again = kinetrace.merge_traces([logs], dst)
    assert len(again.ranks) == 3
    # No rank anywhere: the order given.
    plain = [tmp_path / "x.json", tmp_path / "y.json"]
    for i, p in enumerate(plain):
        _rank(p, None, n=200, seed=i)
    result = kinetrace.merge_traces(plain, tmp_path / "xy.json")
    assert [(r.rank, r.rank_from) for r in result.ranks] == [(0, "order"), (1, "order")]
    check_merge(tmp_path / "xy.json", plain)


def test_labels_and_duplicate_ranks(tmp_path: Path) -> None:
    a = _rank(tmp_path / "a.json", 0, n=300)
    b = _rank(tmp_path / "b.json", 0, n=300, seed=1)
    dst = tmp_path / "m.json"
    with pytest.raises(ValueError, match=r"a\.json.*b\.json.*rank 0"):
        kinetrace.merge_traces([a, b], dst)
    assert not dst.exists()
    result = kinetrace.merge_traces([a, b], dst, labels=["trainer", "7"])
    assert [r.label for r in result.ranks] == ["rank 7", "trainer"]
    assert result.ranks[0].processes[0].name == f"rank 7 · pid {os.getpid()}"
    assert result.ranks[1].processes[1].name == "trainer · GPU 0"
    check_merge(dst, [a, b])
    with pytest.raises(ValueError, match="one per file"):
        kinetrace.merge_traces([a, b], dst, labels=["x"])


def _step_trace(path: Path, rank: int, first_step_us: int, base: int) -> Path:
    """A small hand-written rank trace (Kineto's layout: the base after the events) with
    ProfilerStep#1..3 starting at ``first_step_us`` (its own clock)."""
    events = [
        {"name": "process_name", "ph": "M", "pid": 77, "tid": 0, "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "pid": 77, "tid": 0, "args": {"labels": "CPU"}},
    ]
    for i, step in enumerate((1, 2, 3)):
        t = first_step_us + i * 1000
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 77,
             "tid": 77, "ts": f"<{t}.250>", "dur": 900},
            {"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{step}", "pid": 0,
             "tid": 7, "ts": f"<{t - 400}.000>", "dur": 500},
            {"ph": "X", "cat": "kernel", "name": "nccl:all_reduce", "pid": 0, "tid": 7,
             "ts": f"<{t + 100}.125>", "dur": 50.5},
        ]  # fmt: skip
    text = json.dumps(
        {
            "schemaVersion": 1,
            "distributedInfo": {"rank": rank},
            "traceEvents": events,
            "traceName": path.name,
            "baseTimeNanoseconds": base,
        },
        indent=1,
    )
    # ts as written by Kineto: three decimals, not a float's repr.
    path.write_text(text.replace('"<', "").replace('>"', ""))
    return path


def test_align_step(tmp_path: Path) -> None:
    a = _step_trace(tmp_path / "r0.json", 0, 5000, BASE)
    b = _step_trace(tmp_path / "r1.json", 1, 3000, BASE + 1_000_000)  # 1 ms later base
    dst = tmp_path / "m.json"
    plain = kinetrace.merge_traces([a, b], dst)
    assert plain.aligned_step is None
    check_merge(dst, [a, b])
    # The sources' blocks interleave as their readers hand them over; a source's pids
    # (source x PID_STRIDE + n) put rank 0's step first.
    steps = [
        e["ts"]
        for e in sorted(json.loads(dst.read_text())["traceEvents"], key=lambda e: e["pid"])
        if e["name"] == "ProfilerStep#1" and e["cat"] == "user_annotation"
    ]
    assert steps == [5000.25, 4000.25]
    result = kinetrace.merge_traces([a, b], dst, align="step")
    assert result.aligned_step == 1
    assert [(r.offset_ns, r.align_offset_ns) for r in result.ranks] == [
        (0, 0),
        (2_000_000, 1_000_000),
    ]
    merged = check_merge(dst, [a, b])
    assert [r["align_offset_ns"] for r in merged["kinetrace_merge"]["ranks"]] == [0, 1_000_000]
    strict = json.loads(dst.read_text())
    starts = {
        (e["pid"], e["ts"]) for e in strict["traceEvents"] if e.get("cat") == "user_annotation"
    }
    assert sorted(ts for _, ts in starts) == [5000.25, 5000.25, 6000.25, 6000.25, 7000.25, 7000.25]
    # ts keep three decimals, shifted or not.
    text = dst.read_text()
    assert '"ts": 5000.250' in text and '"ts": 5100.125' in text
    # No common step: an error naming the source without steps.
    c = tmp_path / "r2.json"
    c.write_text(a.read_text().replace("ProfilerStep#", "Step#").replace('"rank": 0', '"rank": 2'))
    with pytest.raises(ValueError, match=r"no ProfilerStep#N in .*r2\.json"):
        kinetrace.merge_traces([a, b, c], tmp_path / "none.json", align="step")
    assert not (tmp_path / "none.json").exists()


def test_filter_and_parts_during_the_merge(tmp_path: Path) -> None:
    sources = [_rank(tmp_path / f"r{i}.json", i, n=3000, seed=i) for i in range(3)]
    dst = tmp_path / "k.json"
    result = kinetrace.merge_traces(sources, dst, include_cats=["kernel"])
    trace = json.loads(dst.read_text())
    kept = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    kernels = [e for e in kept if e.get("cat") == "kernel"]
    want = sum(
        1
        for p in sources
        for e in json.loads(p.read_text())["traceEvents"]
        if e.get("cat") == "kernel"
    )
    assert len(kernels) == want
    # Events without a category pass a category filter (as with kinetrace filter).
    assert all("cat" not in e for e in kept if e not in kernels)
    names = sorted(e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name")
    assert [n for n in names if "GPU" in n] == [
        "rank 0 · GPU 0",
        "rank 1 · GPU 0",
        "rank 2 · GPU 0",
    ]
    assert not [n for n in names if "pid" in n and '""' not in n]  # no CPU process left
    assert result.flow_events_cut == want  # each kernel's ac2g finish lost its start
    assert kinetrace.check_trace(dst).valid
    # Parts of the merged timeline, gzip: every event once over all parts.
    parts = kinetrace.merge_traces(sources, tmp_path / "p.json.gz", max_mb=0.4, compresslevel=1)
    assert len(parts.outputs) > 2
    # No time cell of these ranks holds 0.4 MB: every part keeps the bound, and a part over
    # it would be counted in oversized_parts.
    oversized = [out.json_bytes for out in parts.outputs if out.json_bytes > 400_000]
    assert (oversized, parts.oversized_parts) == ([], 0)
    total = Counter()
    for out in parts.outputs:
        assert out.path.endswith(f"-of-{len(parts.outputs):03}.json.gz")
        assert kinetrace.check_trace(out.path).valid
        part = json.loads(gzip.decompress(Path(out.path).read_bytes()))
        assert part["kinetrace_part"]["count"] == len(parts.outputs)
        total.update(e["ph"] for e in part["traceEvents"] if e["ph"] != "M")
    source_total = Counter(
        e["ph"] for p in sources for e in json.loads(p.read_text())["traceEvents"] if e["ph"] != "M"
    )
    cut = parts.flow_events_cut
    assert sum(source_total.values()) == sum(total.values()) + cut
    assert total["X"] == source_total["X"]
    # Nothing selected: an error, nothing written.
    with pytest.raises(ValueError, match="selects no events"):
        kinetrace.merge_traces(sources, tmp_path / "none.json", window_us=(1e15, 2e15))
    assert not (tmp_path / "none.json").exists()


def test_parts_larger_than_asked_are_counted(tmp_path: Path) -> None:
    """More than ``max_mb`` within one time cell: such parts exceed it, and each is counted
    in ``oversized_parts``, the others keep the bound."""
    spread = [
        {"ph": "X", "name": f"spread {i}", "pid": 1, "tid": 1, "ts": 1000 * i, "dur": 1}
        for i in range(1, 200)
    ]
    burst = [  # ~10 kB at one time: one cell
        {"ph": "X", "name": f"burst {i}", "pid": 1, "tid": 2, "ts": 50_000, "dur": 0}
        for i in range(150)
    ]
    sources = [tmp_path / "r0.json", tmp_path / "r1.json"]
    for rank, (path, events) in enumerate(zip(sources, [spread, burst], strict=True)):
        info = {"rank": rank, "world_size": 2}
        path.write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
    limit = 5_000  # bytes: the burst's cell holds more
    parts = kinetrace.merge_traces(sources, tmp_path / "p.json", max_mb=limit / 1e6)
    oversized = [out for out in parts.outputs if out.json_bytes > limit]
    assert oversized
    assert parts.oversized_parts == len(oversized)


#: Six of HolisticTraceAnalysis' traces (../shared/traces/hta), recorded on CUDA, ROCm and
#: MTIA machines: pretty-printed, ns resolution, string pids, bases after the events or none.
HTA_SIX = [
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "triton_example__triton_example.json.gz",
]


def test_real_kineto_traces(tmp_path: Path) -> None:
    """Traces of different machines and years: each event once, mapped."""
    sources = [real_path(f"hta/{name}") for name in HTA_SIX]
    dst = tmp_path / "all.json"
    with pytest.warns(kinetrace.MergeWarning, match="do not all overlap"):
        result = kinetrace.merge_traces(sources, dst, labels=[str(i) for i in range(len(sources))])
    assert result.base_time_ns is None  # some have no base: absolute time
    check_merge(dst, sources)
    # check finds in the merge what it finds in the sources (their unpaired flow ends).
    report = kinetrace.check_trace(dst)
    assert report.valid and report.complete
    unpaired = report.info.flows_unpaired
    assert unpaired == sum(kinetrace.check_trace(p).info.flows_unpaired for p in sources)
    # Two of them alone: one base, the later shifted by the difference.
    pair = [p for p in sources if "triton" in p.name or "amd_trace" in p.name]
    with pytest.warns(kinetrace.MergeWarning):  # recorded years apart
        result = kinetrace.merge_traces(pair, tmp_path / "pair.json.gz", labels=["0", "1"])
    assert result.base_time_ns == 1727743122000000000
    assert result.ranks[0].offset_ns == 1735632360000000000 - 1727743122000000000
    check_merge(tmp_path / "pair.json.gz", pair)


@pytest.mark.skipif(len(DLRM_RANKS) != 8, reason=MISSING)
def test_real_eight_rank_job(tmp_path: Path) -> None:
    """The 8 ranks of one DLRM job on 8x V100 (NCCL; ``distributedInfo`` rank 0-7; absolute
    µs, no base time; pretty-printed plain JSON), given in reverse: each rank found by its
    ``distributedInfo``, every event of each rank in the merge exactly once, mapped, and
    one clock for all (absolute time: no shift)."""
    sources = list(reversed(DLRM_RANKS))
    dst = tmp_path / "job.json.gz"
    result = kinetrace.merge_traces(sources, dst)
    assert [(r.rank, r.rank_from) for r in result.ranks] == [
        (i, "distributedInfo") for i in range(8)
    ]
    assert [Path(r.source).name for r in result.ranks] == [p.name for p in DLRM_RANKS]
    assert result.base_time_ns is None
    assert all(r.offset_ns == 0 for r in result.ranks)
    assert result.events_read == sum(kinetrace.check_trace(p).info.events for p in sources)
    check_merge(dst, sources)
    report = kinetrace.check_trace(dst)
    assert report.valid and report.complete, report.errors
    # Flow ids are per rank: the merge pairs no end with another rank's.
    assert report.info.flows_unpaired == sum(
        kinetrace.check_trace(p).info.flows_unpaired for p in sources
    )


def _cli(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinetrace", "merge", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=subprocess_env(),
        timeout=120,
    )


def test_cli(tmp_path: Path) -> None:
    a = _rank(tmp_path / "a.json", 0, n=300)
    b = _rank(tmp_path / "b.json", 1, n=300, seed=1)
    run = _cli(a, b, "-o", "m.json", "--align", "step", cwd=tmp_path)
    assert run.returncode == 0 and "aligned on ProfilerStep#" in run.stdout, run.stderr
    check_merge(tmp_path / "m.json", [a, b])
    run = _cli(a, b, "-o", "m.json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "rank 0 (distributedInfo)" in run.stdout and "rank 1 (distributedInfo)" in run.stdout
    check_merge(tmp_path / "m.json", [a, b])
    run = _cli(
        a,
        b,
        "-o",
        "k.json.gz",
        "--include-cat",
        "kernel",
        "--label",
        "x",
        "--label",
        "y",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    kernels = json.loads(gzip.decompress((tmp_path / "k.json.gz").read_bytes()))
    names = {e["args"]["name"] for e in kernels["traceEvents"] if e["name"] == "process_name"}
    assert {"x · GPU 0", "y · GPU 0"} <= names


@pytest.mark.parametrize("bad", ["truncated", "truncated-gz", "not-a-trace", "text"])
def test_bad_sources_exit_1_and_write_nothing(tmp_path: Path, bad: str) -> None:
    good = _rank(tmp_path / "good.json", 0, n=300)
    text = _rank(tmp_path / "r1.json", 1, n=2000).read_bytes()
    src = tmp_path / "bad.json"
    if bad == "truncated":
        src.write_bytes(text[: len(text) * 2 // 3])
        want = "end of file"
    elif bad == "truncated-gz":
        src = tmp_path / "bad.json.gz"
        z = gzip.compress(text)
        src.write_bytes(z[: len(z) // 2])
        want = "corrupt gzip data"
    elif bad == "not-a-trace":
        src.write_text('{"a": [1, 2]}')
        want = 'no "traceEvents"'
    else:
        src.write_text("hello")
        want = "offset 0"
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.json").write_text("old")
    run = _cli(good, src, "-o", out / "m.json", cwd=tmp_path)
    assert run.returncode == 1
    assert src.name in run.stderr and want in run.stderr, run.stderr
    assert "offset" in run.stderr
    assert sorted(os.listdir(out)) == ["m.json"]
    assert (out / "m.json").read_text() == "old"
    with pytest.raises(ValueError, match=want):
        kinetrace.merge_traces([good, src], out / "n.json")
    assert sorted(os.listdir(out)) == ["m.json"]


def test_ranks_of_different_runs_warn(tmp_path: Path) -> None:
    a = _rank(tmp_path / "a.json", 0, n=300)
    b = _rank(tmp_path / "b.json", 1, n=300)
    # The same ts against a base an hour later: recorded an hour later.
    b.write_text(b.read_text().replace(f": {BASE},", f": {BASE + 3_600 * 10**9},", 1))
    with pytest.warns(
        kinetrace.MergeWarning, match=r"rank 0 \(.*a\.json\) ends at .* before rank 1"
    ):
        kinetrace.merge_traces([a, b], tmp_path / "m.json")
    run = _cli(a, b, "-o", "m2.json", cwd=tmp_path)
    assert run.returncode == 0 and "warning: the ranks' time spans do not all overlap" in run.stderr
    assert (tmp_path / "m2.json").exists()


def test_arguments(tmp_path: Path) -> None:
    a = _rank(tmp_path / "a.json", 0, n=100)
    with pytest.raises(FileNotFoundError):
        kinetrace.merge_traces([a, tmp_path / "missing.json"], tmp_path / "m.json")
    with pytest.raises(ValueError, match="no trace file"):
        (tmp_path / "empty").mkdir()
        kinetrace.merge_traces([tmp_path / "empty"], tmp_path / "m.json")
    with pytest.raises(ValueError, match="given twice"):
        kinetrace.merge_traces([a, a], tmp_path / "m.json")
    with pytest.raises(ValueError, match="align"):
        kinetrace.merge_traces([a], tmp_path / "m.json", align="steps")
    with pytest.raises(TypeError, match="not both"):
        kinetrace.merge_traces([a], tmp_path / "m.json", keep=kinetrace.Keep(), pids=[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "empty"]


@pytest.fixture(scope="module")
def big_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three ranks of ~55 MB each: a merge of them lasts long enough to be interrupted."""
    src = tmp_path_factory.mktemp("ctrl-c")
    return [_rank(src / f"r{i}.json", i, n=150_000, seed=i) for i in range(3)]


def _fire_when_writing_starts(sigint: Sigint, out_dir: Path) -> None:
    """Sends the signal as soon as the merge's temporary output appears in ``out_dir`` (its
    rewriting pass has begun), whatever the machine's speed."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while sigint.sent is None and time.monotonic() < deadline:
            if any(name != "m.json" for name in os.listdir(out_dir)):
                sigint.fire()
            time.sleep(0.001)

    threading.Thread(target=watch, daemon=True, name="watch merge output").start()


@pytest.mark.parametrize("phase", ["probing", "rewriting"])
def test_ctrl_c_while_the_readers_run(big_ranks: list[Path], tmp_path: Path, phase: str) -> None:
    """Ctrl-C reaches a merge whose reader threads are busy (probing the sources 20 ms in,
    or rewriting them once the output's temporary file exists): prompt, and nothing left,
    an existing output included."""
    (tmp_path / "m.json").write_text("old")
    with Sigint().installed() as sigint:
        if phase == "probing":
            sigint.after(0.02)
        else:
            _fire_when_writing_starts(sigint, tmp_path)
        latency = sigint.expect(lambda: kinetrace.merge_traces(big_ranks, tmp_path / "m.json"))
    assert_prompt(latency)
    assert sorted(os.listdir(tmp_path)) == ["m.json"] and (tmp_path / "m.json").read_text() == "old"
