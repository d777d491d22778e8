"""``kinetrace diff``'s GPU verdict and counts (docs/diff.md, "Three verdicts"): on traces
written here (one kernel 10% longer in every step, one kernel added, more bytes copied, a
kernel renamed, nothing changed) and on the real GPU traces of ``../shared/traces``, whose
steps' figures are checked against the traces' own events, read here by the rules."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace import _kinetrace
from kinetrace._cli import status
from support.cli import run
from support.gpu_traces import gpu_run
from support.real import real_path, require_real

STEPS = 20


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return gpu_run(tmp_path / "base.json", steps=STEPS, seed=1)


def test_a_kernel_ten_percent_longer_is_a_gpu_regression(base, tmp_path, capsys):
    new = gpu_run(tmp_path / "new.json", steps=STEPS, seed=2, longer={"k_b": 1.1})
    result = kinetrace.diff(base, new)
    assert result.gate == "gpu" and result.gpu is not None
    g = result.gpu
    # Busy time per step: 300 + 500 + 20 µs; k_b 50 µs longer: +6.1%, within the jitter.
    assert g.verdict == "slower" and g.significant, g
    assert g.change_pct == pytest.approx(100 * 50 / 820, abs=0.3)
    assert g.ci_low_pct is not None and g.ci_low_pct > 5
    assert (g.base_steps, g.new_steps) == (STEPS, STEPS)
    assert result.kernels[0].name == "k_b"  # named first
    assert result.counts[0].changes == () and not result.count_regression()
    assert [r.gpu.verdict for r in result.ranks if r.gpu] == ["slower"]
    # The CPU verdict is whatever the CPU steps say (±20% noise here): not asserted.
    assert run("diff", base, new, "--fail-above", "5") == status.REGRESSION
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("job GPU time per step (gates): NEW is slower, +6.")
    assert out[3].startswith("job step time: ")
    assert out[-1] != "" and any(line.startswith("counts per step: unchanged") for line in out)
    assert run("diff", base, new, "--fail-above", "7") == status.DONE  # slower by less
    assert run("diff", base, new, "--fail-on-counts") == status.DONE
    assert run("diff", new, base, "--fail-above", "5") == status.DONE  # faster
    capsys.readouterr()


def test_an_unchanged_gpu_run_is_the_same(base, tmp_path):
    other = gpu_run(tmp_path / "other.json", steps=STEPS, seed=3)
    g = kinetrace.diff(base, other).gpu
    assert g is not None and g.verdict == "same", g  # jitter 0.2%: the interval within ±2%
    assert g.ci_low_pct is not None and g.ci_high_pct is not None
    assert -2 <= g.ci_low_pct <= g.ci_high_pct <= 2
    assert kinetrace.diff(base, other, same_within=0.01).gpu.verdict == "unknown"  # type: ignore[union-attr]


def test_an_added_kernel_is_an_exact_count_change(base, tmp_path, capsys):
    new = gpu_run(tmp_path / "new.json", steps=STEPS, seed=2, extra="k_extra")
    result = kinetrace.diff(base, new)
    (rank,) = result.counts
    assert (rank.base_steps, rank.new_steps) == (STEPS, STEPS)
    assert [
        (c.what, c.name, c.kind, c.base_per_step, c.new_per_step, c.status) for c in rank.changes
    ] == [("launches", "k_extra", "COMPUTATION", 0.0, 1.0, "new")]
    assert result.count_regression() and result.to_json()["counts_changed"] is True
    assert run("diff", base, new, "--fail-on-counts") == status.REGRESSION
    out = capsys.readouterr().out.splitlines()
    assert (
        "counts per step: 1 changed on 1 rank (more work per step in NEW): (new) k_extra 0 -> 1"
        in out
    )
    # Gone is no regression; the count change is listed all the same.
    assert run("diff", new, base, "--fail-on-counts", "--json") == status.DONE
    changes = json.loads(capsys.readouterr().out)["counts"][0]["changes"]
    assert [(c["name"], c["status"], c["new_per_step"]) for c in changes] == [
        ("k_extra", "gone", 0)
    ]


def test_bytes_between_host_and_device_are_counted_by_direction(base, tmp_path, capsys):
    new = gpu_run(tmp_path / "new.json", steps=STEPS, seed=2, htod_bytes=8192)
    (rank,) = kinetrace.diff(base, new).counts
    assert [(c.what, c.name, c.base_per_step, c.new_per_step) for c in rank.changes] == [
        ("memcpy bytes", "HtoD", 4096.0, 8192.0)
    ]
    assert run("diff", base, new, "--fail-on-counts") == status.REGRESSION
    assert run("diff", new, base, "--fail-on-counts") == status.DONE
    capsys.readouterr()


def test_more_flops_per_step_is_an_exact_count_change(tmp_path, capsys):
    """One aten::mm a step, its K doubled in NEW: the same kernels, twice the FLOPs that
    ``ops`` models, exact."""
    base = gpu_run(tmp_path / "base.json", steps=STEPS, seed=1, mm=(64, 64, 64))
    new = gpu_run(tmp_path / "new.json", steps=STEPS, seed=2, mm=(64, 128, 64))
    (rank,) = kinetrace.diff(base, new).counts
    assert [(c.what, c.name, c.base_per_step, c.new_per_step) for c in rank.changes] == [
        ("flops", "modelled operators", 2 * 64**3, 2 * 64 * 128 * 64)
    ]
    assert rank.regression()
    assert run("diff", base, new, "--fail-on-counts") == status.REGRESSION
    out = capsys.readouterr().out.splitlines()
    assert (
        "counts per step: 1 changed on 1 rank (more work per step in NEW): "
        "FLOPs 524,288 -> 1,048,576"
    ) in out
    assert run("diff", new, base, "--fail-on-counts") == status.DONE  # fewer: listed only
    assert run("diff", base, new, "--markdown") == status.DONE
    assert "| 0 | 524,288 | 1,048,576 | FLOPs |" in capsys.readouterr().out
    # Without shapes on a side, its FLOPs are none: a change all the same.
    (rank,) = kinetrace.diff(gpu_run(tmp_path / "plain.json", steps=STEPS), new).counts
    assert [c.what for c in rank.changes] == ["flops"]
    (rank,) = kinetrace.diff(
        base, gpu_run(tmp_path / "again.json", steps=STEPS, seed=3, mm=(64, 64, 64))
    ).counts
    assert rank.changes == ()


def test_a_kernel_renamed_between_builds_is_no_count_change(base, tmp_path):
    names = {"k_b": "k_b_0123456789ab"}
    one = gpu_run(tmp_path / "one.json", steps=STEPS, seed=2, names=names)
    other = gpu_run(tmp_path / "other.json", steps=STEPS, seed=3, names={"k_b": "k_b_ba9876543210"})
    (rank,) = kinetrace.diff(one, other).counts
    assert rank.changes == () and not rank.regression()
    (rank,) = kinetrace.diff(base, one).counts  # k_b -> k_b_01...: the family matches too
    assert rank.changes == ()


def test_the_gate_is_named_first_in_every_output(base, tmp_path, capsys):
    new = gpu_run(tmp_path / "new.json", steps=STEPS, seed=2, longer={"k_b": 1.1})
    assert run("diff", base, new, "--gate", "cpu", "--fail-above", "5") in (
        status.DONE,
        status.REGRESSION,
    )
    assert capsys.readouterr().out.startswith("job step time (gates): ")
    assert run("diff", base, new, "--markdown") == status.DONE
    md = capsys.readouterr().out.splitlines()
    assert md[0].startswith("**kinetrace diff**: job GPU time per step (gates): NEW is slower")
    assert md[2].startswith("- job step time: ") and md[3].startswith("- counts per step: ")
    assert run("diff", base, new, "--json") == status.DONE
    out = json.loads(capsys.readouterr().out)
    assert next(iter(out)) == "gate" and out["gate"] == "gpu"
    assert out["gpu"]["verdict"] == "slower"
    page = tmp_path / "page.html"
    assert run("diff", base, new, "--html", page) == status.DONE
    capsys.readouterr()
    html = page.read_text(encoding="utf-8")
    assert '<p class="verdict">job GPU time per step (gates): NEW is slower' in html
    assert html.count('<p class="other-verdict">') == 2


def test_gate_gpu_needs_gpu_samples(tmp_path, capsys):
    cpu = tmp_path / "cpu.json"
    steps = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"ProfilerStep#{i}",
            "pid": 1,
            "tid": 1,
            "ts": 100 * i,
            "dur": 90,
        }
        for i in range(6)
    ]
    cpu.write_text(json.dumps({"traceEvents": steps}))
    assert kinetrace.diff(cpu, cpu).gate == "cpu"
    with pytest.raises(ValueError, match="no GPU activity"):
        kinetrace.diff(cpu, cpu, gate="gpu")
    assert run("diff", cpu, cpu, "--gate", "gpu") == status.FAILED
    assert "no GPU activity" in capsys.readouterr().err
    with pytest.raises(ValueError, match="gate must be"):
        kinetrace.diff(cpu, cpu, gate="GPU")
    with pytest.raises(ValueError, match="same_within"):
        kinetrace.diff(cpu, cpu, same_within=-1)


# --- real traces: the steps' figures against the traces' own events ----------------------

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return json.load(f)["traceEvents"]


def _step_slices(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Each ProfilerStep CPU slice's (start, end) µs, in file order."""
    return [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("cat") != "gpu_user_annotation"
    ]


def _step_at(steps: list[tuple[float, float]], t: float) -> int | None:
    """The last step (file order) whose slice holds ``t``."""
    inside = [k for k, (s, end) in enumerate(steps) if s <= t < end]
    return inside[-1] if inside else None


def _by_the_rules(path: Path) -> list[tuple[float | None, Counter[str], int]]:
    """Per ProfilerStep (file order): its GPU busy µs (None: no window), the activities it
    launched by name, its HtoD memcpy bytes, read from the JSON here by docs/diff.md's
    rules (written apart from the native reader)."""
    events = _events(path)
    steps = _step_slices(events)
    launch_at: dict[int, float] = {}
    for e in events:
        c = (e.get("args") or {}).get("correlation") if isinstance(e.get("args"), dict) else None
        if e.get("cat") in LAUNCH_CATS and e.get("ph") == "X" and isinstance(c, int) and c != -1:
            launch_at.setdefault(c, e["ts"])
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]

    launched_by = []
    for e in gpu:
        c = e.get("args", {}).get("correlation")
        launched_by.append(_step_at(steps, launch_at[c]) if c in launch_at else None)
    windows: list[tuple[int, float, float]] = []
    floor = float("-inf")
    for k in sorted(range(len(steps)), key=lambda k: steps[k][0]):
        own = [e for e, s in zip(gpu, launched_by, strict=True) if s == k]
        if own:
            floor = max(floor, min(e["ts"] for e in own))
            if windows:
                windows[-1] = (windows[-1][0], windows[-1][1], floor)
            windows.append((k, floor, max(e["ts"] + e["dur"] for e in own)))
    if windows:
        k, start, end = windows[-1]
        windows[-1] = (k, start, max(end, start))
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in gpu)
    busy: list[float | None] = [None] * len(steps)
    for k, start, end in windows:
        total, reach = 0.0, start
        for s, e in spans:
            s, e = max(s, reach), min(e, end)
            if e > s:
                total += e - s
                reach = e
        busy[k] = total
    counts: list[Counter[str]] = [Counter() for _ in steps]
    htod = [0] * len(steps)
    for e, s in zip(gpu, launched_by, strict=True):
        if s is None:
            s = next((k for k, a, b in windows if a <= e["ts"] < b), None)
        if s is None:
            continue
        counts[s][e["name"]] += 1
        if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"]:
            htod[s] += e["args"].get("bytes", 0)
    return [(busy[k], counts[k], htod[k]) for k in range(len(steps))]


REAL = [
    "hta/trace_diff__control__control.json.gz",
    "hta/trace_diff__test__test.json.gz",
    "hta/trace_compare__base__base.json.gz",
    "hta/trace_compare__test__test.json.gz",
    "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json",
    "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json",
]


@pytest.mark.parametrize("name", REAL)
def test_real_steps_figures_are_the_events_read_by_the_rules(name: str) -> None:
    path = real_path(name)
    _, _, found = _kinetrace.diff_read([[path]], 2)
    (steps,) = found.values()
    native = []
    for s in steps["steps"]:
        busy = None if s["gpu_busy_ns"] is None else s["gpu_busy_ns"] / 1000
        launched = Counter(
            {steps["names"][i]: n for i, n in zip(s["names"], s["counts"], strict=True)}
        )
        native.append((busy, launched, s["memcpy_bytes"][steps["directions"].index("HtoD")]))
    want = _by_the_rules(path)
    assert len(native) == len(want) >= 1
    for (b, c, h), (wb, wc, wh) in zip(native, want, strict=True):
        assert (b is None) == (wb is None)
        if b is not None:
            assert b == pytest.approx(wb, abs=1e-6)
        assert c == wc and h == wh
    assert any(c for _, c, _ in native)  # GPU work in the steps: the check checked something
    flops = [s["flops"] for s in steps["steps"]]
    assert flops == _flops_by_step(path)
    if name in WITH_SHAPES:
        assert any(flops)


#: The traces of REAL whose operators record their shapes.
WITH_SHAPES = (REAL[0], REAL[1], REAL[4], REAL[5])


def _flops_by_step(path: Path) -> list[int]:
    """Per ProfilerStep (file order), the FLOPs of the operators ``ops`` gives figures for
    (its ``exact`` rows) whose event starts in the step's slice, each rounded."""
    events = _events(path)
    steps = _step_slices(events)
    out = [0] * len(steps)
    for row in kinetrace.ops(path).rows:
        if row["flops"] is None:
            continue
        k = _step_at(steps, events[row["uid"]]["ts"])
        if k is not None:
            out[k] += round(row["flops"])
    return out


def test_real_pairs_and_ranks(capsys):
    """HTA's trace_diff pair (NEW's step launches other kernels: exact count changes, a
    regression under --fail-on-counts); DLRM's ranks against themselves and each other
    (8 ranks, one step each: counts unchanged against itself, too few steps for a time)."""
    control, test = real_path(REAL[0]), real_path(REAL[1])
    result = kinetrace.diff(control, test)
    assert result.gate == "gpu" and result.count_regression()
    (rank,) = result.counts
    news = {c.name for c in rank.changes if c.status == "new"}
    assert "volta_sgemm_32x32_sliced1x4_tn" in news
    assert run("diff", control, test, "--fail-on-counts") == status.REGRESSION
    job = require_real() / "param" / "dlrm_kineto"
    same = kinetrace.diff(job, job)
    assert len(same.counts) == 8 and all(r.changes == () for r in same.counts)
    assert same.gpu is not None and same.gpu.verdict == "too few steps"
    assert run("diff", job, job, "--fail-on-counts") == status.DONE
    capsys.readouterr()
