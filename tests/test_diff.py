"""``kinetrace diff`` (docs/diff.md): the statistics against hand-computed values, and real
CPU profiles made here: a trace against itself changes nothing, and a workload with an
operator added to every step is a significant regression."""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from itertools import product
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace._cli import status
from kinetrace._cli.diff import MARKDOWN_LINES, WIDTH
from kinetrace._tools.diff import MIN_STEPS, compare_runs, compare_steps
from kinetrace._tools.diff_stats import (
    _resampled_median,
    bootstrap_change_ci,
    bootstrap_runs_change,
    mann_whitney,
    median,
    percentile,
)
from support.cli import run
from support.gpu_traces import gpu_run
from support.profiles import sides_in_turns
from support.recorders import record_in_processes

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"

#: Profiles per side, recorded steps in each (only the first profile of a process is slow:
#: ~12 s to start Kineto; the next take ~0.03 s each: 200 in 11-31 s at load 3-5). The
#: interval resamples runs, so it narrows with their number: with 40 a side its low end
#: was -2.3 to +10.2% (one set of nine "~"), with 100 +9.5 to +13.0% (three sets).
RUNS = 100
STEPS = 6
#: torch.mm calls of SIZE x SIZE per step; NEW adds one of EXTRA x EXTRA, 1.27 times one of
#: them in FLOPs: ~13% of a step (measured +16.6, +17.7, +18.2% with 100 runs a side on 2
#: busy cores), so the 5% threshold keeps a margin over this machine's noise.
MMS = 10
SIZE = 192
EXTRA = 208

# --- the statistics, by hand --------------------------------------------------------------


def test_median_and_percentile():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert percentile([10, 20, 30, 40, 50], 25) == 20
    assert percentile([10, 20], 50) == 15


def test_mann_whitney_exact_on_a_textbook_example():
    """SciPy's documented example (ages of 5 males and 4 females): ranks of the males in the
    9 values 5, 7, 3, 9, 8 sum to 32, so U = 32 - 5·6/2 = 17; U ≤ 3 happens in 1 + 1 + 2 + 3
    of the C(9, 4) = 126 orderings (U = 0, 1, 2, 3), so p = 2 · 7 / 126 = 0.1111."""
    test = mann_whitney([19, 22, 16, 29, 24], [20, 11, 17, 12])
    assert test.u == 17
    assert test.method == "exact"
    assert test.p_value == pytest.approx(14 / 126, rel=1e-12)


def test_mann_whitney_exact_separated_samples():
    """1..5 against 6..10: U = 0, which one of C(10, 5) = 252 orderings gives: p = 2/252."""
    test = mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert (test.u, test.method) == (0, "exact")
    assert test.p_value == pytest.approx(2 / 252, rel=1e-12)


def test_mann_whitney_normal_with_ties():
    """a = 1, 2, 3, 3 against b = 3, 4, 5, 6: the three 3s share rank 4, so R_a = 1 + 2 + 4 +
    4 = 11 and U = 11 - 10 = 1; the variance is 4·4/12 · (9 - (27 - 3)/(8·7)) = 80/7, and
    with the continuity correction z = (|1 - 8| - 0.5) / sqrt(80/7) = 1.9228: p = 0.0545."""
    test = mann_whitney([1, 2, 3, 3], [3, 4, 5, 6])
    assert (test.u, test.method) == (1, "normal")
    assert test.p_value == pytest.approx(math.erfc(6.5 / math.sqrt(80 / 7) / math.sqrt(2)))
    assert test.p_value == pytest.approx(0.05452, abs=1e-5)


def test_mann_whitney_identical_samples_is_p_one():
    assert mann_whitney([5, 6, 7], [5, 6, 7]).p_value == 1
    assert mann_whitney([4, 4, 4], [4, 4]).p_value == 1


def test_bootstrap_is_deterministic_and_exact_on_constants():
    base = [100.0 + (i * 7) % 11 for i in range(15)]
    new = [105.0 + (i * 5) % 13 for i in range(15)]
    first = bootstrap_change_ci(base, new, resamples=2000, seed=0)
    assert bootstrap_change_ci(base, new, resamples=2000, seed=0) == first
    assert bootstrap_change_ci(base, new, resamples=2000, seed=1) != first
    assert first[0] < 100 * (median(new) / median(base) - 1) < first[1]
    # Every resample of a constant side has its median: the interval is the change itself.
    assert bootstrap_change_ci([100.0] * 10, [110.0] * 10) == pytest.approx((10.0, 10.0))


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 4.0, 8.0, 16.0]])
def test_a_resamples_median_drawn_directly_has_the_resamples_distribution(values):
    """Every one of the n^n resamples enumerated (256 and 3125): how often each median comes
    out, against 40000 medians drawn directly from the order statistics (each frequency
    within 0.012, ~5 standard errors)."""
    n = len(values)
    exact = Counter(median([values[i] for i in idx]) for idx in product(range(n), repeat=n))
    rng = random.Random(0)
    drawn = Counter(_resampled_median(rng, values) for _ in range(40000))
    assert set(drawn) <= set(exact)
    for m, count in exact.items():
        assert drawn[m] / 40000 == pytest.approx(count / n**n, abs=0.012), m


def test_the_runs_bootstrap_counts_the_spread_between_runs():
    """Four runs a side, each tight, some at a level 20% above the others (the machine's
    speed between processes): one of BASE's, three of NEW's. Pooled, the steps look like a
    sure +20% (the rank test's p < 0.001, the steps' interval +17.6 to +19.8%), yet a run
    more or less at either level moves the medians: resampling the runs first covers 0, its
    p-value is far from significant, and the verdict is "unknown": four runs a side cannot
    tell, and many more would be needed to."""
    base = [[level + i % 3 for i in range(10)] for level in (100.0, 100.0, 100.0, 120.0)]
    new = [[level + i % 3 for i in range(10)] for level in (100.0, 120.0, 120.0, 120.0)]
    pooled = ([d for run in base for d in run], [d for run in new for d in run])
    assert bootstrap_change_ci(*pooled)[0] > 15
    assert mann_whitney(pooled[1], pooled[0]).p_value < 0.001
    boot = bootstrap_runs_change(base, new)
    low, high = boot.low, boot.high
    assert low <= 0 < 15 < high
    assert bootstrap_runs_change(base, new) == boot  # seeded
    assert boot.p_value > 0.05
    v = compare_runs(base, new)
    assert (v.p_value, v.test) == (boot.p_value, "bootstrap")
    assert (v.verdict, v.significant, v.ci_low_pct) == ("unknown", False, low)
    # The interval's low end must come above 0: its reach below the change shrinks as
    # 1/sqrt(runs), so about 4 x ((change - low) / change)^2 runs a side, more than 4.
    assert v.change_pct is not None
    want = math.ceil(4 * ((v.change_pct - low) / v.change_pct) ** 2)
    assert v.needed_unit == "runs" and v.needed == max(5, want), v
    # Constant runs: every resample has the side's median, the interval is the change, and
    # no resample is on the other side of 0: the smallest p the resamples can give.
    constant = bootstrap_runs_change([[100.0] * 5] * 3, [[110.0] * 5] * 2, resamples=999)
    assert (constant.low, constant.high) == pytest.approx((10.0, 10.0))
    assert constant.p_value == pytest.approx(2 / 1000)
    assert compare_runs([[100.0] * 5] * 3, [[110.0] * 5] * 2).verdict == "slower"
    # Equal runs on both sides: resamples at 0 count on both sides, p is 1.
    assert bootstrap_runs_change([[100.0] * 5] * 3, [[100.0] * 5] * 2).p_value == 1
    # One run a side: the rank test, as without --runs.
    assert compare_runs([pooled[0]], [pooled[1]]).test in {"exact", "normal"}
    with pytest.raises(ValueError, match="every run a step"):
        bootstrap_runs_change([[1.0], []], [[2.0]])


def test_per_run_estimators_compare_each_run_s_fast_steps():
    """Preemption adds time to some steps of a run, never takes it away: each run's lower
    quartile (or fastest step) is its time without the stalls, and the runs, one figure
    each, are the samples. NEW's runs are all 10% slower but BASE's stalled far more often:
    the pooled medians call NEW faster, the per-run figures see it slower."""
    rng = random.Random(1)

    def run(level: float, stalled: int) -> list[float]:
        steps = [level * (1 + rng.uniform(0, 0.02)) for _ in range(12)]
        return [d + 4000 if i < stalled else d for i, d in enumerate(steps)]

    base = [run(1000.0, 7) for _ in range(5)]
    new = [run(1100.0, 1) for _ in range(5)]
    assert compare_runs(base, new, estimator="median").change_pct < -50
    for estimator in ("quartile", "fastest"):
        v = compare_runs(base, new, estimator=estimator)
        assert (v.estimator, v.verdict, v.test) == (estimator, "slower", "exact"), v
        assert v.p_value == pytest.approx(2 / 252)  # every NEW run above every BASE run
        assert 8 < v.change_pct < 12 and 0 < v.ci_low_pct <= v.change_pct <= v.ci_high_pct
        figures = sorted(
            percentile(sorted(r), 25) if estimator == "quartile" else min(r) for r in base
        )
        assert v.base_median_us == figures[2]
        assert (v.base_steps, v.new_steps) == (60, 60)
    # The code unchanged, each run stalled in 0 to 8 of its 12 steps: the pooled medians
    # move with the stalls, the runs' quartiles stay within the steps' 2% jitter.
    moved = []
    for _ in range(20):
        sides = [[run(1000.0, rng.randint(0, 8)) for _ in range(5)] for _ in range(2)]
        same = compare_runs(*sides, estimator="quartile")
        assert same.change_pct is not None and abs(same.change_pct) < 2, same
        moved.append(abs(compare_runs(*sides, estimator="median").change_pct or 0))
    assert max(moved) > 100  # five runs' pooled steps: a median among the stalls
    # Fewer than 4 runs a side: the rank test of 3 against 3 cannot reach p < 0.05, so the
    # pooled steps' median and the runs' bootstrap decide.
    few = compare_runs(base[:3], new, estimator="quartile")
    assert (few.estimator, few.test) == ("median", "bootstrap")
    with pytest.raises(ValueError, match="estimator must be one of"):
        compare_runs(base, new, estimator="mean")


def test_too_few_steps_give_no_verdict():
    v = compare_steps([1.0] * (MIN_STEPS - 1), [2.0] * 20)
    assert v.verdict == "too few steps" and v.p_value is None and not v.significant
    assert compare_steps([1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.1, 2.2, 2.3, 2.4]).verdict == "slower"


# --- real profiles -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """BASE and NEW, each a folder of RUNS profiles, made in turns (base, new, base, ...):
    on this shared machine the step time drifts by more than 10% within seconds (measured:
    medians of two back-to-back profiles of one workload 0.3 to 6 ms apart), and turns
    share the drift between the sides."""
    return sides_in_turns(
        tmp_path_factory.mktemp("diff"), runs=RUNS, steps=STEPS, mms=MMS, size=SIZE, extra=EXTRA
    )


def test_a_trace_against_itself_changes_nothing(profiles, capsys):
    base, _ = profiles
    one = base / "run0.json"
    assert kinetrace.diff(one, one).verdict.change_pct == 0
    result = kinetrace.diff(base, base, runs=True)
    v = result.verdict
    assert (result.base_runs, v.base_steps, v.new_steps) == (RUNS, RUNS * STEPS, RUNS * STEPS)
    assert (v.change_pct, v.estimator, v.test, v.significant) == (0, "median", "bootstrap", False)
    # Each run's fastest step: the runs' rank test (normal beyond 30 runs), nothing apart.
    fastest = kinetrace.diff(base, base, runs=True, cpu_estimator="fastest").verdict
    assert (fastest.change_pct, fastest.estimator, fastest.test) == (0, "fastest", "normal")
    assert fastest.p_value == 1 and fastest.verdict in ("same", "unknown")
    # The same runs on both sides: never a change; "same" when the interval fits in ±2%,
    # "unknown" when the runs spread wider than that.
    assert v.verdict in ("same", "unknown"), v
    assert v.p_value is not None and v.p_value > 0.5  # the runs' bootstrap, centred on 0
    assert [r.steps.change_pct for r in result.ranks] == [0]
    assert all(c.change_us == 0 for r in result.ranks for c in r.breakdown)
    assert all(k.change_us == 0 for k in result.kernels)
    assert run("diff", "--runs", base, base, "--fail-above", "0.1") == status.DONE == 0
    out = capsys.readouterr().out.splitlines()
    # CPU profiles: no GPU verdict, so the CPU's gates, named first.
    assert result.gate == "cpu" and result.gpu is None
    assert re.match(r"job step time \(gates\): (same \(within ±2%\)|unknown .*), \+0\.0%", out[0])
    assert "job GPU time per step: none (a side has no GPU activity in its steps)" in out
    assert any(line.startswith("counts per step: unchanged") for line in out)


def test_an_added_operator_is_a_regression_or_unknown_never_faster(profiles, capsys):
    """A real +13% (measured +16.6 to +18.2% with 100 runs a side): under any load the CPU
    verdict is "slower" or, where a busy machine hid it, "unknown" (measured once beside a
    loaded CI run: +22.7%, p = 0.048); never "faster" or "same". What load cannot move is
    asserted exactly: the added product is a new operator, once per step."""
    base, new = profiles
    result = kinetrace.diff(base, new, runs=True)
    v = result.verdict
    assert v.verdict in ("slower", "unknown"), v
    assert v.change_pct is not None and v.change_pct > 0, v
    added = [o for o in result.operators if o.status == "new" and o.name == "aten::mm"]
    assert [(o.input_dims, o.base_count) for o in added] == [
        (f"[[{EXTRA},{EXTRA}],[{EXTRA},{EXTRA}]]", 0)
    ]
    assert added[0].new_count == pytest.approx(1.0, rel=1e-9)  # a mean over 100 x 6 steps
    code = run("diff", "--runs", base, new, "--fail-above", "5")
    regression = v.verdict == "slower" and v.change_pct > 5
    assert code == (status.REGRESSION if regression else status.DONE)
    assert capsys.readouterr().out.startswith("job step time (gates): ")
    # Read the other way round it is never slower, so never a regression.
    assert run("diff", "--runs", new, base, "--fail-above", "5") == status.DONE


def test_outputs(profiles, capsys):
    base, new = profiles
    assert run("diff", "--runs", base, new) == status.DONE
    text = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in text) <= WIDTH
    assert run("diff", "--runs", base, new, "--markdown") == status.DONE
    md = capsys.readouterr().out.splitlines()
    assert md[0].startswith("**kinetrace diff**: job step time (gates): ")
    assert len(md) <= MARKDOWN_LINES
    # Each run's fastest step: the job's verdict and each rank's, the GPU's untouched.
    assert run("diff", "--runs", base, new, "--json", "--cpu-estimator", "fastest") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["estimator"] == out["ranks"][0]["steps"]["estimator"] == "fastest"
    assert out["verdict"]["test"] == "normal"  # 100 runs a side: the rank test's normal form
    assert run("diff", "--runs", base, new, "--cpu-estimator", "fastest") == status.DONE
    assert "runs' fastest steps, median " in capsys.readouterr().out
    assert run("diff", base, new, "--rules", "hta", "--cpu-estimator", "fastest") == status.FAILED
    assert "no --gate, --same-within or --cpu-estimator" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cpu_estimator must be one of"):
        kinetrace.diff(base, new, runs=True, cpu_estimator="mean")


def _keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_every_json_key_is_in_docs_diff_md(profiles, tmp_path, capsys):
    base, new = profiles
    assert run("diff", "--runs", base, new, "--json") == status.DONE
    keys = _keys(json.loads(capsys.readouterr().out))
    # GPU runs with a kernel added: the GPU verdict, the counts that changed.
    gpu = gpu_run(tmp_path / "gpu.json", steps=6)
    more = gpu_run(tmp_path / "more.json", steps=6, seed=1, extra="k_extra")
    assert run("diff", gpu, more, "--json") == status.DONE
    keys |= _keys(json.loads(capsys.readouterr().out))
    page = (ROOT / "docs" / "diff.md").read_text()
    block = page.split("## The JSON object", 1)[1].split("```", 2)[1]
    assert keys == set(re.findall(r'"(\w+)"', block))


@pytest.mark.skipif(not (TRACES / "param" / "dlrm_kineto").is_dir(), reason="no ../shared/traces")
def test_real_ranks_against_themselves(capsys):
    """Eight ranks of a GPU job: every kernel and breakdown change 0, none new or gone."""
    job = TRACES / "param" / "dlrm_kineto"
    result = kinetrace.diff(job, job)
    assert len(result.ranks) == 8 and result.kernels
    assert all(k.change_us == 0 and k.status == "" for k in result.kernels)
    assert all(c.change_us == 0 for r in result.ranks for c in r.breakdown)
    assert result.verdict.significant is False


# --- false alarms between processes ---------------------------------------------------------

#: Pairs of profiles of one unchanged workload, each profile in a process of its own, the two
#: of a pair recorded back to back (support.recorders). Each profile: 12 steps of 10 products
#: of 256 x 256 (~2-3 ms a step on one core).
#: Six pairs: as many runs a side as docs/ci.md's recipe records (5) and one more, above the
#: four a side the per-run estimators need (diff.MIN_RUNS); each pair is two fresh processes.
PAIRS = 6
PAIR_STEPS = 12


@pytest.mark.slow  # 12 processes start torch and Kineto: ~7 s of CPU each
def test_unchanged_runs_in_separate_processes_keep_their_counts_and_statuses(tmp_path, capsys):
    """Six pairs of unchanged single-process profiles, the two of a pair back to back (BASE
    first in every other pair), compared pair by pair and pooled as runs (``--runs``, each
    estimator, both ways).

    Asserted is what must hold under any load (issue 47's rule: the time verdict of two
    unchanged sides is the noise's to decide, and a loaded machine decides it): every
    comparison's counts are exact and unchanged (``--fail-on-counts`` exits 0), and each
    ``--fail-above 10`` status follows its verdict, the regression status exactly when NEW
    is significantly slower by more than 10%. Whether the time alarmed is printed, not
    asserted: this 2-core machine's speed moves in phases of 0.1 s to seconds, so single
    pairs alarm often (5 of 10 during a CI run: docs/diff.md, 'What a significant verdict
    means'), and the six runs a side pooled alarmed once in a CI trial too (+27.9%
    [+2.3%, +36.0%], p = 0.031, four NEW runs recorded in a slow phase)."""
    base, new = tmp_path / "base", tmp_path / "new"
    base.mkdir()
    new.mkdir()
    pairs = [(base / f"run{i}.json", new / f"run{i}.json") for i in range(PAIRS)]
    # BASE first in even pairs, NEW first in odd ones: whatever comes of being recorded
    # second falls on both sides of the runs alike.
    order = [p for i, pair in enumerate(pairs) for p in (pair if i % 2 == 0 else pair[::-1])]
    record_in_processes(order, size=256, mms=10, steps=PAIR_STEPS, at_once=4)

    def alarm(v: Any) -> bool:
        return bool(v.significant and v.verdict == "slower" and (v.change_pct or 0) > 10)

    seen = []
    for one, other in pairs:
        result = kinetrace.diff(one, other)
        verdict = result.verdict
        assert (verdict.base_steps, verdict.new_steps) == (PAIR_STEPS, PAIR_STEPS)
        assert all(r.changes == () for r in result.counts)
        code = run("diff", one, other, "--fail-above", "10")
        assert code == (status.REGRESSION if alarm(verdict) else status.DONE), verdict
        assert run("diff", one, other, "--fail-on-counts") == status.DONE
        seen.append((code, verdict.verdict, round(verdict.change_pct or 0, 1)))
    pooled_seen = []
    for (one, other), estimator in product(((base, new), (new, base)), ("median", "fastest")):
        result = kinetrace.diff(one, other, runs=True, cpu_estimator=estimator)
        pooled = result.verdict
        assert (pooled.base_steps, pooled.new_steps) == (PAIRS * PAIR_STEPS,) * 2
        assert pooled.estimator == estimator
        assert all(r.changes == () for r in result.counts)
        code = run("diff", "--runs", one, other, "--fail-above", "10", "--cpu-estimator", estimator)
        assert code == (status.REGRESSION if alarm(pooled) else status.DONE), pooled
        assert run("diff", "--runs", one, other, "--fail-on-counts") == status.DONE
        pooled_seen.append((estimator, code, pooled.verdict, round(pooled.change_pct or 0, 1)))
    capsys.readouterr()
    print(f"pairs (status, verdict, %): {seen}; runs pooled: {pooled_seen}")
