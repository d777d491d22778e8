"""``kinetrace summary`` / ``kinetrace.summarize`` under the ``exact`` rules: every figure
checked against an independent plain-Python reading of the raw JSON (``Decimal`` times, no
float anywhere), on every real trace of ``../shared/traces``; ranks, damaged traces, the
command line and its JSON contract, and the HTML page in headless Chromium. (The ``hta``
rules are checked against HTA itself in ``test_summary_hta.py``.)"""

from __future__ import annotations

import gzip
import json
import math
import warnings
from dataclasses import astuple
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace import KernelStats, StreamIdle, TemporalBreakdown, _kinetrace
from support import chromium
from support.cli import run
from support.real import REAL_DIR, REAL_TRACES, real_params, require_real

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}
MEMORY_CATS = {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime"}

#: Traces read by the plain-Python reference at most this big by default (larger: slow).
REFERENCE_MAX = 1_700_000


def load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data: dict[str, Any] = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
    return data


def ns(value: Decimal) -> int:
    return int(value * 1000)


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def length(spans: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in spans)


def kind(cat: str, name: str) -> str:
    if cat in MEMORY_CATS or name.startswith(("Memcpy", "Memset", "dma")):
        return "MEMORY"
    if name.startswith("nccl") and "Kernel" in name[4:]:
        return "COMMUNICATION"
    return "COMPUTATION"


def reference(path: Path) -> dict[str, Any]:
    """The exact rules read independently: per-name totals, unions, types, idle, steps."""
    events = load(path)["traceEvents"]
    acts, launches = [], {}
    for e in events:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("cat") in RUNTIME_CATS and "correlation" in args:
            launches.setdefault(int(args["correlation"]), ns(e["ts"]))
        if e.get("ph") == "X" and "dur" in e and e.get("cat") in GPU_CATS:
            start = ns(e["ts"])
            stream = int(args["stream"]) if "stream" in args else -1
            corr = int(args["correlation"]) if "correlation" in args else None
            acts.append(
                (start, start + ns(e["dur"]), kind(e["cat"], e["name"]), e["name"], stream, corr)
            )
    spans = {
        k: union([(a[0], a[1]) for a in acts if a[2] == k])
        for k in ("COMPUTATION", "COMMUNICATION", "MEMORY")
    }
    every = union([(a[0], a[1]) for a in acts])
    kernels: dict[str, list[int]] = {}
    for a in acts:
        kernels.setdefault(a[3], []).append(a[1] - a[0])
    span = max((a[1] for a in acts), default=0) - min((a[0] for a in acts), default=0)
    overlap = None
    comm = length(spans["COMMUNICATION"])
    if comm:
        both = sum(
            max(0, min(e1, e2) - max(s1, s2))
            for s1, e1 in spans["COMMUNICATION"]
            for s2, e2 in spans["COMPUTATION"]
        )
        overlap = round(Decimal(both * 100) / comm, 2)
    steps = [
        (e["name"], ns(e["dur"]))
        for e in events
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("cat") != "gpu_user_annotation"
        and "dur" in e
    ]
    return {
        "temporal": (
            span - length(every),
            length(spans["COMPUTATION"]),
            length(every) - length(spans["COMPUTATION"]),
            span,
        ),
        "kernels": {n: (len(d), sum(d), min(d), max(d)) for n, d in kernels.items()},
        "kinds": {a[3]: a[2] for a in acts},
        "kernel_types": kernel_types(spans),
        "overlap": overlap,
        "idle": idle(acts, launches),
        "steps": steps,
    }


TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")


def kernel_types(spans: dict[str, list[tuple[int, int]]]) -> dict[str, int]:
    """ns per label: the unions swept together, each elementary segment labelled by the
    types active in it (in :data:`TYPES` order, joined by " overlapping "); 0 ns left out."""
    points: dict[int, int] = {}
    for bit, k in enumerate(TYPES):
        for s, e in spans[k]:  # a union's intervals neither overlap nor touch
            points[s] = points.get(s, 0) ^ (1 << bit)
            points[e] = points.get(e, 0) ^ (1 << bit)
    out: dict[str, int] = {}
    active = 0
    at = None
    for x in sorted(points):
        if active and at is not None and x > at:
            label = " overlapping ".join(k for bit, k in enumerate(TYPES) if active >> bit & 1)
            out[label] = out.get(label, 0) + x - at
        active ^= points[x]
        at = x
    return out


def idle(acts: list[tuple[Any, ...]], launches: dict[int, int]) -> dict[str, tuple[int, int, int]]:
    streams: dict[int, list[tuple[Any, ...]]] = {}
    for a in acts:
        streams.setdefault(a[4], []).append(a)
    out = {}
    for stream, rows in streams.items():
        rows.sort(key=lambda a: (a[0], a[1]))
        host = kern = other = 0
        last = rows[0][1]
        for a in rows[1:]:
            gap = a[0] - last
            if gap > 0:
                launch = launches.get(a[5]) if a[5] is not None else None
                if launch is not None and launch > last:
                    host += gap
                elif gap < 30_000:
                    kern += gap
                else:
                    other += gap
            last = max(last, a[1])
        out[str(stream)] = (host, kern, other)
    return out


def us(n: int) -> float:
    return float(Decimal(n) / 1000)


def _reference_params() -> list[Any]:
    return [
        pytest.param(
            p,
            id=str(p.relative_to(REAL_DIR)),
            marks=[pytest.mark.slow] if p.stat().st_size > REFERENCE_MAX else [],
        )
        for p in REAL_TRACES
    ]


def summarize_quietly(*args: Any, **kw: Any) -> kinetrace.Summary:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kinetrace.SummaryWarning)
        return kinetrace.summarize(*args, **kw)


@pytest.mark.parametrize("path", _reference_params())
def test_exact_figures_are_the_traces_own(path: Path) -> None:
    ref = reference(path)
    summary = summarize_quietly(path)
    (r,) = summary.ranks
    t = r.temporal_breakdown
    assert (t.idle_time_us, t.compute_time_us, t.non_compute_time_us, t.kernel_time_us) == tuple(
        us(v) for v in ref["temporal"]
    )
    got = {k.name: (k.count, k.sum_us, k.min_us, k.max_us) for k in r.kernels}
    assert got == {n: (c, us(s), us(lo), us(hi)) for n, (c, s, lo, hi) in ref["kernels"].items()}
    assert {k.name: k.type for k in r.kernels} == ref["kinds"]
    for k in r.kernels:
        c, s, _, _ = ref["kernels"][k.name]
        assert k.mean_us == us(
            int((Decimal(s) / c).quantize(Decimal(1), rounding="ROUND_HALF_EVEN"))
        )
    assert r.kernel_types == {label: us(v) for label, v in ref["kernel_types"].items()}
    assert r.comm_comp_overlap_pct == (None if ref["overlap"] is None else float(ref["overlap"]))
    assert {s: (i.host_wait_us, i.kernel_wait_us, i.other_us) for s, i in r.idle_time.items()} == {
        s: tuple(us(v) for v in vals) for s, vals in ref["idle"].items()
    }
    assert [(s.name, s.dur_us) for s in r.steps] == [(n, us(d)) for n, d in ref["steps"]]
    assert list(summary.steps) == spreads({r.rank: ref["steps"]})
    assert json.loads(json.dumps(summary.to_json()))["ranks"][0]["kernel_types"] == r.kernel_types


def spreads(steps: dict[int, list[tuple[str, int]]]) -> list[kinetrace.StepSpread]:
    """Per step name, in the order first met (ranks in rank order), over the first slice of
    that name on each rank: the slowest rank (ties: the lowest rank) and the fastest (ties:
    the lowest rank); their ratio from the exact ns, None when the fastest took 0 ns."""
    per: dict[str, list[tuple[int, int]]] = {}
    for rank in sorted(steps):
        firsts: dict[str, int] = {}
        for name, dur in steps[rank]:
            firsts.setdefault(name, dur)
        for name, dur in firsts.items():
            per.setdefault(name, []).append((rank, dur))
    out = []
    for name, durs in per.items():
        slow = max(durs, key=lambda d: (d[1], -d[0]))
        fast = min(durs, key=lambda d: (d[1], d[0]))
        ratio = float(Decimal(slow[1]) / Decimal(fast[1])) if fast[1] else None
        out.append(
            kinetrace.StepSpread(name, len(durs), slow[0], us(slow[1]), fast[0], us(fast[1]), ratio)
        )
    return out


def assert_spreads(got: tuple[kinetrace.StepSpread, ...], want: list[kinetrace.StepSpread]) -> None:
    """Equal, the ratio to the exact quotient within 2 ulp: the summary divides the two
    durations as doubles (each within half an ulp of its exact µs)."""
    assert [(*s[:6],) for s in map(astuple, got)] == [(*s[:6],) for s in map(astuple, want)]
    for g, w in zip(got, want, strict=True):
        if w.ratio is None:
            assert g.ratio is None, g
        else:
            assert g.ratio == pytest.approx(w.ratio, rel=4.5e-16, abs=0), g


def test_step_spread_across_the_eight_dlrm_ranks() -> None:
    """The cross-rank figures of a real job, from each rank's steps read independently."""
    require_real()
    folder = REAL_DIR / "param" / "dlrm_kineto"
    steps = {}
    for path in sorted(folder.glob("*.json")):
        data = load(path)
        steps[int(data["distributedInfo"]["rank"])] = reference(path)["steps"]
    assert sorted(steps) == list(range(8))
    summary = kinetrace.summarize(folder)
    assert [r.rank for r in summary.ranks] == list(range(8))
    for r in summary.ranks:
        assert [(s.name, s.dur_us) for s in r.steps] == [(n, us(d)) for n, d in steps[r.rank]]
    want = spreads(steps)
    assert [w.ranks for w in want] == [8]  # one step, on every rank
    assert want[0].slowest_rank != want[0].fastest_rank
    assert_spreads(summary.steps, want)


def test_step_spread_ties_missing_steps_and_a_zero_step(tmp_path: Path) -> None:
    """Steps some ranks lack, a step twice on one rank (its first slice counts), ties (the
    lowest rank), a fastest of 0 µs (no ratio)."""

    def step(name: str, ts: str, dur: str) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 0,
            "tid": 1,
            "ts": Decimal(ts),
            "dur": Decimal(dur),
        }

    ranks = {
        0: [("ProfilerStep#1", "0", "100.5"), ("ProfilerStep#2", "200", "0.001")],
        1: [
            ("ProfilerStep#2", "0", "0.003"),
            ("ProfilerStep#1", "5", "100.5"),
            ("ProfilerStep#1", "900", "999"),
        ],
        2: [("ProfilerStep#1", "0", "50.25"), ("ProfilerStep#3", "100", "0")],
        3: [("ProfilerStep#3", "0", "7.125"), ("ProfilerStep#2", "10", "0.003")],
    }
    for rank, rows in ranks.items():
        events = [step(*row) for row in rows]
        (tmp_path / f"trace_rank{rank}.json").write_text(_dump({"traceEvents": events}))
    summary = kinetrace.summarize(tmp_path)
    want = [
        kinetrace.StepSpread("ProfilerStep#1", 3, 0, 100.5, 2, 50.25, 2.0),
        kinetrace.StepSpread("ProfilerStep#2", 3, 1, 0.003, 0, 0.001, 3.0),
        kinetrace.StepSpread("ProfilerStep#3", 2, 3, 7.125, 2, 0.0, None),
    ]
    assert_spreads(summary.steps, want)
    steps = {rank: [(n, ns(Decimal(d))) for n, _, d in rows] for rank, rows in ranks.items()}
    assert spreads(steps) == want  # the reference agrees with the figures worked out by hand


def hta_kind(name: str) -> str:
    """HTA 0.5.0's ``get_kernel_type`` (../shared/notes/hta-rules.md)."""
    if name.startswith("nccl") and "Kernel" in name[4:]:
        return "COMMUNICATION"
    if name.startswith(("Memcpy", "Memset", "dma")):
        return "MEMORY"
    if "Memcpy" not in name and not name.startswith("Memset") and "Sync" not in name:
        return "COMPUTATION"
    return "OTHER"


def hta_int(value: Any) -> int:
    """HTA's ``int()`` of ``args.stream``: a whole number or a string of one, else -1."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else -1
    if isinstance(value, str):
        for parse in (int, float):
            try:
                n = parse(value.strip())
            except ValueError:
                continue
            return int(n) if float(n).is_integer() else -1
    return -1


def hta_reading(path: Path) -> dict[str, Any]:
    """What the ``hta`` rules read, from the raw JSON parsed as HTA parses it (plain
    ``json``, float µs): whether the last-step filter runs, and the kernel set's totals per
    name without it (times ns-rounded where HTA rounds them)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    events = json.loads(raw)["traceEvents"]
    step_strings = set()
    float_ts = False
    rows = []
    # Names with an event that is a row under one rule set only.
    differ = set()
    for e in events:
        ts, dur, cat, name = e.get("ts"), e.get("dur"), e.get("cat"), str(e.get("name", ""))
        if not isinstance(ts, int) or isinstance(ts, bool):
            float_ts = True
        for text in (e.get("name"), cat):
            if isinstance(text, str) and "ProfilerStep" in text:
                step_strings.add(text)
        timed = ts is not None and dur is not None
        in_exact = timed and e.get("ph") == "X" and cat in GPU_CATS
        in_hta = timed and isinstance(cat, str) and cat != "Trace"
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        stream = hta_int(args.get("stream")) if in_hta else -1
        if stream != -1:
            rows.append((name, ts, dur, stream, cat in GPU_CATS))
        if in_exact != (stream != -1):
            differ.add(name)
    kernels: dict[str, list[Any]] = {}
    for name, ts, dur, _, _ in rows:
        if hta_kind(name) == "OTHER":
            continue
        d = float(math.floor(ts + dur) - math.ceil(ts)) if float_ts else dur
        k = kernels.setdefault(name, [0, 0.0, d, d])
        k[0] += 1
        k[1] += d
        k[2] = min(k[2], d)
        k[3] = max(k[3], d)
    return {
        "filter": len(step_strings) >= 2,
        # name -> (count, sum, min, max) in file order, as HTA sums them
        "kernels": {n: tuple(v) for n, v in kernels.items()},
        "same_rows": set(kernels) - differ,
        "set": len(rows),
        "streams": {str(r[3]) for r in rows if r[4]},
    }


@pytest.mark.parametrize("path", real_params())
def test_hta_figures_hold_what_the_rules_promise(path: Path) -> None:
    """Every real trace under both rule sets: the ``hta`` figures against HTA's rules read
    independently (types by name, the kernel set's counts and totals, the streams of the idle
    time when no last-step filter runs), against the ``exact`` figures where the rules agree
    (steps; a name's count when its rows are the same under both), and their invariants.
    HTA's own numbers are ``test_summary_hta.py``'s."""
    exact = summarize_quietly(path).ranks[0]
    (hta,) = summarize_quietly(path, rules="hta").ranks
    seen = hta_reading(path)
    assert hta.steps == exact.steps
    assert all(k.type == hta_kind(k.name) != "OTHER" for k in hta.kernels)
    exact_kernels = {k.name: k for k in exact.kernels}
    if not seen["filter"]:
        got = {k.name: (k.count, k.sum_us, k.min_us, k.max_us) for k in hta.kernels}
        assert got == seen["kernels"]
        hta_kernels = {k.name: k for k in hta.kernels}
        for name in seen["same_rows"]:  # the same rows under both rules: the same count
            assert hta_kernels[name].count == exact_kernels[name].count, name
        assert hta.gpu_activities == seen["set"]
        assert set(hta.idle_time) == seen["streams"]
    else:  # the filter keeps a subset: names of the kernel set only
        assert {k.name for k in hta.kernels} <= set(seen["kernels"])
    # HTA's rounding can make times negative (an event under 1 µs lasts -1 µs): only the sum.
    t = hta.temporal_breakdown
    assert t.idle_time_us + t.compute_time_us + t.non_compute_time_us == pytest.approx(
        t.kernel_time_us, rel=1e-12, abs=1e-6
    )
    # Segments truncated to whole µs (HTA's int()).
    assert all(v == int(v) and v > 0 for v in hta.kernel_types.values()), hta.kernel_types
    comm = any(k.type == "COMMUNICATION" and k.max_us > 0 for k in hta.kernels)
    assert (hta.comm_comp_overlap_pct is not None) == comm
    if comm:
        assert 0 <= hta.comm_comp_overlap_pct <= 100
    assert all(round(v, 2) == v for i in hta.idle_time.values() for v in astuple(i))


def test_owlv2_memset_times_are_exact() -> None:
    """The issue's example: HTA's rounding turns 750 Memset (Device), 737.6 µs, into 3 µs."""
    require_real()
    path = REAL_DIR / "TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
    exact = {k.name: k for k in summarize_quietly(path).ranks[0].kernels}["Memset (Device)"]
    hta = {k.name: k for k in summarize_quietly(path, rules="hta").ranks[0].kernels}[
        "Memset (Device)"
    ]
    assert (exact.count, exact.sum_us) == (750, 737.591)
    assert (hta.count, hta.sum_us) == (750, 3.0)


def _trace(path: Path, events: list[dict[str, Any]], **header: Any) -> Path:
    path.write_text(json.dumps({**header, "traceEvents": events}, indent=1))
    return path


def _kernel(ts: str, dur: str, name: str = "k", stream: int = 7, corr: int = 1) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": Decimal(ts),
        "dur": Decimal(dur),
        "args": {"stream": stream, "correlation": corr},
    }


def _dump(obj: Any) -> str:
    return json.dumps(obj, default=lambda d: float(d) if isinstance(d, Decimal) else d)


def test_ranks_are_found_as_merge_finds_them(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    (a / "x.json").write_text(
        _dump({"distributedInfo": {"rank": 5}, "traceEvents": [_kernel("1", "2")]})
    )
    (a / "trace_rank-3.json").write_text(_dump({"traceEvents": [_kernel("1", "2")]}))
    (a / "z.json").write_text(_dump({"traceEvents": [_kernel("1", "2")]}))
    ranks = kinetrace.summarize(a).ranks
    assert [(r.rank, r.rank_from) for r in ranks] == [
        (2, "order"),
        (3, "file name"),
        (5, "distributedInfo"),
    ]
    (a / "y_rank5.json").write_text(_dump({"traceEvents": [_kernel("1", "2")]}))
    with pytest.raises(ValueError, match="are both rank 5"):
        kinetrace.summarize(a)
    assert run("summary", a) == 1


def test_touching_and_overlapping_activities(tmp_path: Path) -> None:
    events = [
        _kernel("10.5", "2.25", "gemm", corr=1),
        _kernel("12.75", "1", "gemm", corr=2),  # touches: no idle between
        {**_kernel("20", "5", "ncclKernel_AllReduce", corr=3)},
        {
            **_kernel("22", "6", "Memcpy HtoD", corr=4),
            "cat": "gpu_memcpy",
            "args": {"stream": 8, "correlation": 4},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 0,
            "tid": 1,
            "ts": Decimal("19"),
            "dur": Decimal("1"),
            "args": {"correlation": 3},
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(_dump({"traceEvents": events}))
    (r,) = kinetrace.summarize(path).ranks
    assert r.temporal_breakdown == kinetrace.TemporalBreakdown(6.25, 3.25, 8.0, 17.5)
    assert r.kernel_types == {
        "COMPUTATION": 3.25,
        "COMMUNICATION": 2.0,
        "COMMUNICATION overlapping MEMORY": 3.0,
        "MEMORY": 3.0,
    }
    assert r.comm_comp_overlap_pct == 0.0
    # stream 7: gap 13.75 -> 20 is 6.25 µs; the launch (19) is after the end so far: host wait.
    assert r.idle_time["7"] == kinetrace.StreamIdle(6.25, 0.0, 0.0)
    assert [k.name for k in r.kernels] == ["Memcpy HtoD", "ncclKernel_AllReduce", "gemm"]


def assert_first_kernels(r: kinetrace.RankSummary, n: int) -> None:
    """The figures of the first ``n`` kernels "k" of 5 µs every 10 µs on stream 7, no launch:
    5 µs gaps, each a kernel wait."""
    assert r.temporal_breakdown == kinetrace.TemporalBreakdown(
        (n - 1) * 5.0, n * 5.0, 0.0, (n - 1) * 10.0 + 5
    )
    assert r.kernels == (kinetrace.KernelStats("k", "COMPUTATION", n, n * 5.0, 5.0, 5.0, 5.0),)
    assert r.idle_time == {"7": kinetrace.StreamIdle(0.0, (n - 1) * 5.0, 0.0)}


def test_damaged_traces_are_summarised_as_far_as_they_load(tmp_path: Path) -> None:
    good = _dump({"traceEvents": [_kernel(str(i * 10), "5", corr=i) for i in range(50)]})
    cut = tmp_path / "cut.json"
    cut.write_text(good[: len(good) // 2])
    with pytest.warns(kinetrace.SummaryWarning, match=r"cut\.json: offset \d+"):
        (r,) = kinetrace.summarize(cut).ranks
    # Each event ends with its args' "}}": the complete ones before the cut are summarised.
    assert r.gpu_activities == good[: len(good) // 2].count("}}") == 25
    assert_first_kernels(r, 25)
    gz = tmp_path / "cut.json.gz"
    many = _dump({"traceEvents": [_kernel(str(i * 10), "5", corr=i) for i in range(20_000)]})
    packed = gzip.compress(many.encode())
    gz.write_bytes(packed[: len(packed) // 2])
    with pytest.warns(kinetrace.SummaryWarning, match=r"cut\.json\.gz: offset \d+"):
        (r,) = kinetrace.summarize(gz).ranks
    assert 0 < r.gpu_activities < 20_000
    assert_first_kernels(r, r.gpu_activities)
    junk = tmp_path / "junk.json"
    junk.write_text('{"traceEvents": [nope')
    with pytest.raises(kinetrace.TraceFormatError, match=r"junk\.json: offset 17"):
        kinetrace.summarize(junk)
    assert run("summary", junk) == 1


def test_json_follows_the_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json"
    events = [
        _kernel("1", "2"),
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "ProfilerStep#3",
            "pid": 0,
            "tid": 1,
            "ts": Decimal(0),
            "dur": Decimal("737.6"),
        },
    ]
    path.write_text(_dump({"traceEvents": events}))
    assert run("summary", path, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    (rank,) = out["ranks"]
    assert {
        "rank",
        "source",
        "temporal_breakdown",
        "kernel_types",
        "kernels",
        "comm_comp_overlap_pct",
        "idle_time",
        "steps",
    } <= set(rank)
    assert set(rank["temporal_breakdown"]) == {
        "idle_time_us",
        "compute_time_us",
        "non_compute_time_us",
        "kernel_time_us",
    }
    assert set(rank["kernels"][0]) == {
        "name",
        "type",
        "count",
        "sum_us",
        "mean_us",
        "min_us",
        "max_us",
    }
    assert set(rank["idle_time"]["7"]) == {"host_wait_us", "kernel_wait_us", "other_us"}
    assert rank["steps"] == [{"name": "ProfilerStep#3", "dur_us": 737.6}]
    assert rank["comm_comp_overlap_pct"] is None
    assert out["steps"][0]["name"] == "ProfilerStep#3"
    assert run("summary", path) == 0
    assert "Top 10 GPU activities" in capsys.readouterr().out


def test_each_figure_has_one_name_from_rust_to_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The native module hands every figure under the name the dataclass and the JSON use
    (src/tools/summary/report.rs): no renaming table in between to drift."""
    path = tmp_path / "t.json"
    path.write_text(_dump({"traceEvents": [_kernel("1", "2")]}))
    (native,) = _kinetrace.summarize([str(path)], "exact", 1)
    assert run("summary", path, "--json") == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert set(native) - {"steps"} <= set(rank)
    temporal = native["temporal_breakdown"]
    assert set(temporal) == set(rank["temporal_breakdown"])
    assert set(temporal) == set(TemporalBreakdown.__dataclass_fields__)
    assert set(native["kernels"][0]) == set(rank["kernels"][0])
    assert set(native["kernels"][0]) == set(KernelStats.__dataclass_fields__)
    assert set(native["idle_time"]) == set(rank["idle_time"])
    (idle,) = native["idle_time"].values()
    assert set(idle) == set(StreamIdle.__dataclass_fields__)


#: What the summary page's probe measures once Chromium has drawn it.
_PROBE = """{
  svgs: document.querySelectorAll('svg').length,
  bad: Array.from(document.querySelectorAll('svg')).filter(function (s) {
    return s.namespaceURI !== 'http://www.w3.org/2000/svg'; }).length,
  rects: document.querySelectorAll('svg rect').length,
  widths: Array.from(document.querySelectorAll('svg rect')).every(function (r) {
    return r.width.baseVal.value >= 0;
  }),
  // Every label drawn whole inside its chart: the text boxes the browser measured.
  clipped: Array.from(document.querySelectorAll('svg text')).filter(function (t) {
    const box = t.getBBox(), svg = t.ownerSVGElement;
    return box.x < 0 || box.x + box.width > svg.width.baseVal.value;
  }).map(function (t) { return t.textContent; }),
  cut: Array.from(document.querySelectorAll('svg text.label')).filter(function (t) {
    const title = t.querySelector('title');
    return title && t.textContent.endsWith('\u2026') &&
      t.textContent.slice(title.textContent.length, -1) !== '' &&
      title.textContent.startsWith(t.textContent.slice(title.textContent.length, -1));
  }).length}"""


def test_html_page_loads_in_chromium(tmp_path: Path) -> None:
    require_real()
    browser = chromium.require_browser()
    page = tmp_path / "summary.html"
    assert run("summary", REAL_DIR / "param" / "dlrm_kineto", "--html", page) == 0
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    result = chromium.load(browser, text, tmp_path, _PROBE)
    assert result["errors"] == [] and result["resources"] == []
    assert result["svgs"] == 3 and result["bad"] == 0 and result["widths"]
    assert result["clipped"] == [], result["clipped"]
    # The DLRM ranks' NCCL kernel names are longer than the label room: cut with an
    # ellipsis, the whole name in the tooltip.
    assert result["cut"] > 0
    # 8 ranks x 3 parts + legend 3, the top 15 kernels, 8 ranks x 1 step.
    assert result["rects"] == 8 * 3 + 3 + 15 + 8
