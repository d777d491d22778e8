"""``summarize(rules="hta")`` against HolisticTraceAnalysis 0.5.0 itself, on the real traces
of ``../shared/traces``: HTA runs in the test (on a temporary folder of links to one set's
files, as it wants a folder), and every figure it gives must be ours. The only allowance is
HTA's quirk 12 (``../shared/notes/hta-rules.md``): kernel-type labels of 0 µs that its
unstable sort makes up, which we leave out.

HTA is slow (seconds per MB): its figures are computed once per set per session. The sets
of hta-rules.md's match table and every trace under 1.2 MB run by default; the larger ones
(listed in ``LARGE``) are marked slow. HTA missing is a skip, or a failure where
``KINETRACE_REQUIRE_CONSUMERS`` is set (CI installs it)."""

from __future__ import annotations

import functools
import math
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from support.real import MISSING, REAL_DIR, REAL_TRACES

#: The sets of hta-rules.md's match table (paths under ../shared/traces).
MATCH_TABLE = {
    "dlrm8": [
        f"param/dlrm_kineto/{n}"
        for n in (
            "worker0_step_12.1694128201545.pt.trace.json",
            "worker1_step_12.1694128201556.pt.trace.json",
            "worker2_step_12.1694128201554.pt.trace.json",
            "worker3_step_12.1694128201557.pt.trace.json",
            "worker4_step_12.1694128201547.pt.trace.json",
            "worker5_step_12.1694128201549.pt.trace.json",
            "worker6_step_12.1694128201553.pt.trace.json",
            "worker7_step_12.1694128201553.pt.trace.json",
        )
    ],
    "b200": ["TraceLens/b200/eager_trace.json.gz"],
    "mi300_resnet": ["TraceLens/mi300/resnet_act_checkpoint.json.gz"],
    "h100_owlv2": ["TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"],
    "alexnet": ["hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"],
    "v100_2021": [
        "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    ],
}

#: Two ranks of one job, read as one set.
PAIRS = {
    "sampled": [
        "hta/trace_filter__sampled_rank-0.json.gz",
        "hta/trace_filter__sampled_rank-1.json.gz",
    ]
}

#: Traces of 1.2 MB or more outside the match table: slow.
LARGE = 1_200_000


def _other_sets() -> dict[str, list[str]]:
    taken = {p for files in [*MATCH_TABLE.values(), *PAIRS.values()] for p in files}
    return {
        str(p.relative_to(REAL_DIR)): [str(p.relative_to(REAL_DIR))]
        for p in REAL_TRACES
        if str(p.relative_to(REAL_DIR)) not in taken
    }


def _params() -> list[Any]:
    params = [pytest.param(files, id=name) for name, files in {**MATCH_TABLE, **PAIRS}.items()]
    for name, files in _other_sets().items():
        big = (REAL_DIR / files[0]).stat().st_size >= LARGE
        marks = [pytest.mark.slow] if big else []
        params.append(pytest.param(files, id=name, marks=marks))
    return params


def hta_known_failures() -> set[str]:
    """The traces (paths under ``../shared/traces``) docs/summary.md lists as ones HTA 0.5.0
    itself raises on: the backquoted paths between its ``hta-known-failures`` markers."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "summary.md").read_text()
    start, end = "<!-- hta-known-failures:start -->", "<!-- hta-known-failures:end -->"
    listed = doc.split(start, 1)[1].split(end, 1)[0]
    return set(re.findall(r"^- `([^`]+)`", listed, flags=re.MULTILINE))


def _require_hta() -> None:
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError as exc:
        if os.environ.get("KINETRACE_REQUIRE_CONSUMERS"):
            pytest.fail(f"KINETRACE_REQUIRE_CONSUMERS is set but HTA is missing: {exc}")
        pytest.skip(f"HolisticTraceAnalysis is not installed: {exc}")


@functools.cache
def hta_figures(files: tuple[str, ...]) -> dict[str, Any] | str:
    """HTA's own figures for one set, or why HTA cannot read it."""
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in files:
            os.symlink(REAL_DIR / f, Path(d) / Path(f).name)
        try:
            ta = TraceAnalysis(trace_dir=d)
            temporal = ta.get_temporal_breakdown(visualize=False)
            types, kernels = ta.get_gpu_kernel_breakdown(
                visualize=False, duration_ratio=1.0, num_kernels=10**6, include_memory_kernels=True
            )
            overlap = ta.get_comm_comp_overlap(visualize=False)
            idle, _ = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
        except Exception as exc:  # HTA's own failure: the set is not one HTA can read
            return f"{type(exc).__name__}: {exc}"
        finally:
            logging.disable(logging.NOTSET)
    return {
        "temporal": {
            int(r["rank"]): (
                r["idle_time(us)"],
                r["compute_time(us)"],
                r["non_compute_time(us)"],
                r["kernel_time(us)"],
            )
            for _, r in temporal.iterrows()
        },
        "types": {r["kernel_type"]: r["sum"] for _, r in types.iterrows()},
        "kernels": {
            (int(r["rank"]), r["name"]): (
                r["kernel_type"],
                r["sum (us)"],
                r["min (us)"],
                r["max (us)"],
                r["mean (us)"],
            )
            for _, r in kernels.iterrows()
        },
        "overlap": {int(r["rank"]): r["comp_comm_overlap_pctg"] for _, r in overlap.iterrows()},
        "idle": {
            (int(r["rank"]), str(r["stream"]), r["idle_category"]): r["idle_time"]
            for _, r in idle.iterrows()
        },
    }


def ours(files: tuple[str, ...]) -> dict[str, Any]:
    """Our figures under the hta rules, shaped as :func:`hta_figures`."""
    summary = kinetrace.summarize([REAL_DIR / f for f in files], rules="hta")
    types: dict[str, float] = {}
    for r in summary.ranks:
        for label, us in r.kernel_types.items():
            types[label] = types.get(label, 0) + us
    idle = {}
    for r in summary.ranks:
        for stream, s in r.idle_time.items():
            for cat, us in (
                ("host_wait", s.host_wait_us),
                ("kernel_wait", s.kernel_wait_us),
                ("other", s.other_us),
            ):
                idle[(r.rank, stream, cat)] = us
    t = {r.rank: r.temporal_breakdown for r in summary.ranks}
    return {
        "temporal": {
            k: (v.idle_time_us, v.compute_time_us, v.non_compute_time_us, v.kernel_time_us)
            for k, v in t.items()
        },
        "types": types,
        "kernels": {
            (r.rank, k.name): (k.type, k.sum_us, k.min_us, k.max_us, k.mean_us)
            for r in summary.ranks
            for k in r.kernels
        },
        "overlap": {r.rank: r.comm_comp_overlap_pct for r in summary.ranks},
        "idle": idle,
    }


def compare(theirs: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """Every difference, as text (empty when all figures agree)."""
    diffs = []
    if theirs["temporal"] != mine["temporal"]:
        diffs.append(f"temporal: HTA {theirs['temporal']} ours {mine['temporal']}")
    types = {k: v for k, v in theirs["types"].items() if v != 0}  # quirk 12
    if types != mine["types"]:
        diffs.append(f"kernel types: HTA {types} ours {mine['types']}")
    for key in sorted(set(theirs["kernels"]) | set(mine["kernels"]), key=str):
        a, b = theirs["kernels"].get(key), mine["kernels"].get(key)
        if a is None or b is None or a[:4] != b[:4] or not math.isclose(a[4], b[4], rel_tol=1e-12):
            diffs.append(f"kernel {key}: HTA {a} ours {b}")
    for rank, pct in theirs["overlap"].items():
        got = mine["overlap"].get(rank)
        if not ((got is None and math.isnan(pct)) or got == pct):
            diffs.append(f"overlap rank {rank}: HTA {pct} ours {got}")
    for key, us in theirs["idle"].items():
        if mine["idle"].get(key, 0.0) != us:
            diffs.append(f"idle {key}: HTA {us} ours {mine['idle'].get(key)}")
    for key, us in mine["idle"].items():
        if us != 0 and key not in theirs["idle"]:
            diffs.append(f"idle {key}: HTA none ours {us}")
    return diffs


@pytest.mark.parametrize("files", _params())
def test_hta_rules_give_htas_own_figures(files: list[str]) -> None:
    if not REAL_DIR.is_dir():
        pytest.skip(MISSING)
    _require_hta()
    theirs = hta_figures(tuple(files))
    if isinstance(theirs, str):
        # A skip only where docs/summary.md lists the trace as one HTA itself fails on.
        if not set(files) <= hta_known_failures():
            pytest.fail(
                f"HTA 0.5.0 cannot read {files}, which docs/summary.md does not list among its "
                f"known failures: {theirs[:300]}"
            )
        pytest.skip(
            "HTA 0.5.0 cannot read this trace (one of its known failures, docs/summary.md): "
            f"{theirs[:300]}"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kinetrace.SummaryWarning)
        mine = ours(tuple(files))
    diffs = compare(theirs, mine)
    assert not diffs, "\n".join(diffs[:20])
