"""``diff``: what changed between two runs (``kinetrace diff``; ``docs/diff.md``).

Both sides are read in one streaming pass per file, every file of both sides in parallel,
for :func:`kinetrace.summarize`'s figures and the operators at once; the comparison is over
those figures: each ``ProfilerStep#N`` a sample of the step time (per rank, and for the job
the slowest rank of each step), medians, a bootstrap interval and a p-value (Mann-Whitney's,
or where a side is several runs the bootstrap's; :mod:`kinetrace._tools.diff_stats`), then
where the time went per step: the temporal breakdown per rank, GPU activities by name and by
type, and operators (:mod:`kinetrace._tools.diff_ops`); names renamed between builds are
paired (:mod:`kinetrace._tools.diff_names`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, overload

from kinetrace._env import available_cpus, require_in_range
from kinetrace._tools.diff_hta import HtaDiff, Pick, diff_hta
from kinetrace._tools.diff_names import family, pair_renames
from kinetrace._tools.diff_ops import OperatorChange, operator_changes, read_runs
from kinetrace._tools.diff_stats import (
    BootstrapChange,
    bootstrap_runs_change,
    mann_whitney,
    median,
    percentile,
)
from kinetrace._tools.diff_steps import (
    CountChange,
    RankCounts,
    StepsOf,
    gpu_samples,
    job_gpu_samples,
    rank_counts,
)
from kinetrace._tools.sources import TRACE_SUFFIXES, trace_files
from kinetrace._tools.summary import RankSummary, Summary

__all__ = [
    "CountChange",
    "DiffResult",
    "FigureChange",
    "KernelChange",
    "OperatorChange",
    "RankCounts",
    "RankDiff",
    "StepComparison",
    "diff",
]

Paths = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]

#: Fewest steps per side for a verdict: below it the test cannot reach p < 0.05 reliably
#: (with 3 against 3 the smallest exact p is 0.1).
MIN_STEPS = 5
#: A change is significant when p < ALPHA and the interval excludes 0.
ALPHA = 0.05
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
#: The equivalence margin (%): a time is ``"same"`` when its whole interval lies within it.
SAME_WITHIN_PCT = 2.0
#: The most runs (or steps) a side that :attr:`StepComparison.needed` suggests.
NEEDED_MAX = 100_000
GATES = ("gpu", "cpu")
#: What the CPU step time of a side of several runs is taken as: ``"median"`` the median of
#: the pooled steps; ``"fastest"`` each run's fastest step or ``"quartile"`` each run's lower
#: quartile of its steps, then compared run against run. Preemption only adds time to a
#: step, so on a busy machine a run's fastest step is the one it touched least; on a quiet
#: one the median of many steps is steadier (docs/diff.md, "Which steps speak for a run").
CPU_ESTIMATORS = ("median", "fastest", "quartile")
CPU_ESTIMATOR = "median"
#: What a side's time is under each estimator, in words (the report's, the page's).
ESTIMATOR_FIGURES = {
    "median": "median",
    "fastest": "runs' fastest steps, median",
    "quartile": "runs' lower quartiles, median",
}
#: Fewest runs a side for a per-run estimator: with 4 against 4 the rank test's smallest
#: two-sided p is 0.029 (3 against 3: 0.1, never significant); fewer fall back to
#: ``"median"``.
MIN_RUNS = 4


@dataclass(frozen=True)
class StepComparison:
    """A time per step of NEW against BASE (the CPU step time, or the GPU busy time of each
    step; µs, changes in % of BASE's median).

    ``verdict``: ``"slower"`` or ``"faster"`` when significant (p < :data:`ALPHA` and the
    interval excludes 0); else ``"same"`` when the whole interval lies within
    ±``margin_pct`` (the equivalence margin); else ``"unknown"``: these samples cannot tell,
    and ``needed`` is about how many ``needed_unit`` (``"runs"`` where a side is several
    runs, else ``"steps"``) a side would likely decide it, from the spread seen (the
    interval narrows as the square root of the sample). ``"too few steps"`` when a side
    has fewer than :data:`MIN_STEPS` (then the figures that need the test are None).
    ``test``: ``"exact"`` or ``"normal"`` (the Mann-Whitney test of the steps, each side one
    run), ``"bootstrap"`` (a side of several runs: the p-value of the runs' bootstrap).
    ``base_step_us`` and ``new_step_us``: the samples compared, in order (the ``--html``
    page draws them). ``estimator``: what a side's time is (:data:`CPU_ESTIMATORS`):
    ``"median"`` the median of its steps (``base_median_us``, ``new_median_us``); a per-run
    one (``"quartile"``, ``"fastest"``) the median over the side's runs of each run's
    lower quartile or fastest step, the test then Mann-Whitney's of those run figures and
    the interval a bootstrap of them."""

    base_steps: int
    new_steps: int
    base_median_us: float | None
    new_median_us: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    test: str | None
    significant: bool
    verdict: str
    base_step_us: tuple[float, ...] = ()
    new_step_us: tuple[float, ...] = ()
    margin_pct: float = SAME_WITHIN_PCT
    needed: int | None = None
    needed_unit: str = ""
    estimator: str = "median"

    @property
    def decided(self) -> bool:
        """The verdict says something: neither ``"unknown"`` nor ``"too few steps"``."""
        return self.verdict in ("slower", "faster", "same")


@dataclass(frozen=True)
class FigureChange:
    """One figure per step on each side (µs) and NEW - BASE."""

    name: str
    base_us: float
    new_us: float
    change_us: float


@dataclass(frozen=True)
class KernelChange:
    """A GPU activity name per step on each side (count and µs, the mean over the side's
    ranks); ``status`` ``"new"`` (only in NEW), ``"gone"`` (only in BASE), ``"renamed"``
    (``name`` BASE's, ``new_name`` NEW's: ``docs/diff.md``) or ``""``."""

    name: str
    type: str
    base_count: float
    new_count: float
    base_us: float
    new_us: float
    change_us: float
    status: str
    new_name: str = ""


@dataclass(frozen=True)
class RankDiff:
    """One rank present on both sides (or the one rank of each side, whatever their
    numbers: ``rank`` BASE's, ``new_rank`` NEW's): its CPU step time, its GPU busy time per
    step (None where a side has no GPU activity in its steps) and its temporal breakdown
    per step."""

    rank: int
    new_rank: int
    base_sources: tuple[str, ...]
    new_sources: tuple[str, ...]
    steps: StepComparison
    gpu: StepComparison | None
    breakdown: tuple[FigureChange, ...]


@dataclass(frozen=True)
class DiffResult:
    """What :func:`diff` found: three verdicts for the job, ``gpu`` (the GPU busy time of
    each step, the largest rank's; None where a side has no GPU activity in its steps),
    ``verdict`` (the CPU step time, the slowest rank's) and ``counts`` (per rank, every
    count per step that changed: exact); ``gate`` names the time verdict that
    :meth:`regression` reads (``"gpu"`` or ``"cpu"``). ``base_runs`` and ``new_runs``: how
    many runs each side pooled."""

    base_sources: tuple[str, ...]
    new_sources: tuple[str, ...]
    base_runs: int
    new_runs: int
    skip_first: int
    gate: str
    gpu: StepComparison | None
    verdict: StepComparison
    counts: tuple[RankCounts, ...]
    ranks: tuple[RankDiff, ...]
    base_only_ranks: tuple[int, ...]
    new_only_ranks: tuple[int, ...]
    kernels: tuple[KernelChange, ...]
    kernel_types: tuple[FigureChange, ...]
    operators: tuple[OperatorChange, ...]
    seconds: float

    @property
    def gating(self) -> StepComparison:
        """The verdict that gates: the GPU's where ``gate`` is ``"gpu"``, else the CPU's."""
        if self.gate == "gpu" and self.gpu is not None:
            return self.gpu
        return self.verdict

    def regression(self, fail_above_pct: float) -> bool:
        """The gating verdict is ``"slower"``, by more than ``fail_above_pct`` %."""
        v = self.gating
        return v.verdict == "slower" and v.change_pct is not None and v.change_pct > fail_above_pct

    def count_regression(self) -> bool:
        """A rank does more per step in NEW: a new GPU activity, more launches of one, more
        bytes copied between host and device (:meth:`RankCounts.regression`)."""
        return any(c.regression() for c in self.counts)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``kinetrace diff --json`` (``docs/diff.md``)."""
        out = {"gate": self.gate, **asdict(self)}  # the verdict that gates, named first
        out["counts_changed"] = any(c.changes for c in self.counts)
        out["statistics"] = {
            "min_steps": MIN_STEPS,
            "alpha": ALPHA,
            "confidence": CONFIDENCE,
            "resamples": RESAMPLES,
            "seed": SEED,
            "same_within_pct": self.verdict.margin_pct,
        }
        return out


def _step_number(name: str) -> str:
    return name.rsplit("#", 1)[-1]


def rank_steps(r: RankSummary, skip_first: int) -> list[tuple[str, float]]:
    """(step number, µs) of a rank's ProfilerSteps in file order, the first ``skip_first``
    left out."""
    return [(_step_number(s.name), s.dur_us) for s in r.steps][skip_first:]


def job_steps(s: Summary, skip_first: int) -> list[float]:
    """Per step number present on every rank (its first slice there), the slowest rank's
    duration, in the first rank's order."""
    per_rank = [dict(reversed(rank_steps(r, skip_first))) for r in s.ranks]
    if not per_rank:
        return []
    first = [n for n, _ in rank_steps(s.ranks[0], skip_first)]
    common = [n for n in dict.fromkeys(first) if all(n in d for d in per_rank)]
    return [max(d[n] for d in per_rank) for n in common]


def _side_runs(side: Sequence[Summary], skip_first: int) -> list[list[float]]:
    """The job's steps in each run of a side."""
    return [job_steps(run, skip_first) for run in side]


def compare_steps(
    base: Sequence[float], new: Sequence[float], margin_pct: float = SAME_WITHIN_PCT
) -> StepComparison:
    """The verdict on two samples of step times (µs), each side one run."""
    return compare_runs([base], [new], margin_pct)


def _needed(change: float, low: float, high: float, margin: float, have: int) -> int | None:
    """About how many samples a side would decide an ``"unknown"`` (``have`` now): the
    interval's reach on each side of the change shrinks as 1/sqrt(n), until the side
    towards 0 stops short of 0 (``"slower"``/``"faster"``) or both sides fit inside the
    margin (``"same"``), whichever needs fewer. None where neither can happen."""
    found = []
    below, above = change - low, high - change
    towards_zero = below if change > 0 else above
    if change and towards_zero > 0:
        found.append(have * (towards_zero / abs(change)) ** 2)
    if abs(change) < margin:
        found.append(have * max((above / (margin - change)) ** 2, (below / (margin + change)) ** 2))
    if not found:
        return None
    return min(NEEDED_MAX, max(have + 1, math.ceil(min(found))))


def run_figure(steps: Sequence[float], estimator: str) -> float:
    """One run's time per step under a per-run estimator: its fastest step, or the lower
    quartile of its steps (linear between ranks)."""
    ordered = sorted(steps)
    return ordered[0] if estimator == "fastest" else percentile(ordered, 25)


def _estimate(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    pooled: tuple[Sequence[float], Sequence[float]],
    estimator: str,
) -> tuple[float, float, BootstrapChange, float, str]:
    """Each side's time, the bootstrap of the change, its p-value and the test that gave it
    (:func:`compare_runs`; every run non-empty, ``pooled`` each side's steps)."""
    if estimator == "median":
        base_steps, new_steps = pooled
        boot = bootstrap_runs_change(
            base, new, resamples=RESAMPLES, confidence=CONFIDENCE, seed=SEED
        )
        if max(len(base), len(new)) > 1:
            p_value, method = boot.p_value, "bootstrap"
        else:
            test = mann_whitney(new_steps, base_steps)
            p_value, method = test.p_value, test.method
        return median(base_steps), median(new_steps), boot, p_value, method
    # Each run one figure: the runs, not the steps, are the independent samples.
    fb = [run_figure(run, estimator) for run in base]
    fn = [run_figure(run, estimator) for run in new]
    boot = bootstrap_runs_change(
        [[f] for f in fb], [[f] for f in fn], resamples=RESAMPLES, confidence=CONFIDENCE, seed=SEED
    )
    test = mann_whitney(fn, fb)
    return median(fb), median(fn), boot, test.p_value, test.method


def compare_runs(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    margin_pct: float = SAME_WITHIN_PCT,
    estimator: str = "median",
) -> StepComparison:
    """The verdict on times per step (µs), each side a list of runs. ``estimator``
    ``"median"``: the medians of the pooled steps; where each side is one run, the
    Mann-Whitney test of its steps and a bootstrap of them; where a side is several, a
    bootstrap of each side's runs and then their steps gives both the interval and the
    p-value (the spread between runs counts). ``"quartile"`` or ``"fastest"`` where both
    sides have :data:`MIN_RUNS` runs or more: each run one figure (:func:`run_figure`), a
    side's the median of its runs', the Mann-Whitney test of the runs' figures and a
    bootstrap of them; with fewer runs, ``"median"``. ``margin_pct``: the equivalence
    margin of ``"same"``."""
    if estimator not in CPU_ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(CPU_ESTIMATORS)}, not {estimator!r}")
    runs = ([run for run in base if run], [run for run in new if run])
    base_steps = [d for run in base for d in run]
    new_steps = [d for run in new for d in run]
    nb, nn = len(base_steps), len(new_steps)
    samples = (tuple(base_steps), tuple(new_steps))
    if min(nb, nn) < MIN_STEPS:
        mb = median(base_steps) if base_steps else None
        mn = median(new_steps) if new_steps else None
        return StepComparison(
            nb,
            nn,
            mb,
            mn,
            None,
            None,
            None,
            None,
            None,
            False,
            "too few steps",
            *samples,
            margin_pct,
        )
    several = max(len(runs[0]), len(runs[1])) > 1
    if estimator != "median" and min(len(runs[0]), len(runs[1])) < MIN_RUNS:
        estimator = "median"
    mb, mn, boot, p_value, method = _estimate(*runs, (base_steps, new_steps), estimator)
    change = 100 * (mn - mb) / mb if mb else 0.0
    lo, hi = boot.low, boot.high
    significant = p_value < ALPHA and (lo > 0 or hi < 0)
    needed, unit = None, ""
    if significant:
        verdict = "slower" if change > 0 else "faster"
    elif -margin_pct <= lo and hi <= margin_pct:
        verdict = "same"
    else:
        verdict = "unknown"
        have = max(len(runs[0]), len(runs[1])) if several else max(nb, nn)
        needed, unit = _needed(change, lo, hi, margin_pct, have), "runs" if several else "steps"
    return StepComparison(
        nb,
        nn,
        mb,
        mn,
        change,
        lo,
        hi,
        p_value,
        method,
        significant,
        verdict,
        *samples,
        margin_pct,
        needed,
        unit,
        estimator,
    )


def _per_step(r: RankSummary) -> int:
    # The figures cover the whole trace: per step over all its steps (skipped ones too);
    # a rank without steps is taken as one.
    return max(len(r.steps), 1)


def _breakdown(runs: Sequence[RankSummary]) -> dict[str, float]:
    """A rank's temporal breakdown per step, over its runs."""
    steps = sum(_per_step(r) for r in runs)
    rows = {"compute": 0.0, "non_compute": 0.0, "idle": 0.0, "kernel_time": 0.0}
    for r in runs:
        t = r.temporal_breakdown
        rows["compute"] += t.compute_time_us
        rows["non_compute"] += t.non_compute_time_us
        rows["idle"] += t.idle_time_us
        rows["kernel_time"] += t.kernel_time_us
    return {k: v / steps for k, v in rows.items()}


def _changes(base: dict[str, float], new: dict[str, float]) -> tuple[FigureChange, ...]:
    names = list(dict.fromkeys([*base, *new]))
    rows = [
        FigureChange(k, base.get(k, 0.0), new.get(k, 0.0), new.get(k, 0.0) - base.get(k, 0.0))
        for k in names
    ]
    return tuple(rows)


def _kernel_side(side: Sequence[Summary]) -> dict[str, tuple[str, float, float]]:
    """name -> (type, count per step, µs per step), the mean over the ranks of every run."""
    out: dict[str, list[Any]] = {}
    ranks = [r for run in side for r in run.ranks]
    for r in ranks:
        n = _per_step(r) * len(ranks)
        for k in r.kernels:
            e = out.setdefault(k.name, [k.type, 0.0, 0.0])
            e[1] += k.count / n
            e[2] += k.sum_us / n
    return {name: (t, c, us) for name, (t, c, us) in out.items()}


def kernel_changes(base: Sequence[Summary], new: Sequence[Summary]) -> tuple[KernelChange, ...]:
    """Every GPU activity name of either side, the largest |change per step| first."""
    b, n = _kernel_side(base), _kernel_side(new)
    # A name on one side only whose family the other side's one-sided name shares is the
    # same kernel renamed between builds (docs/diff.md).
    pairs = pair_renames(
        {k: v[2] for k, v in b.items() if k not in n},
        {k: v[2] for k, v in n.items() if k not in b},
        key=family,
    )
    renamed = dict(pairs)
    paired = set(renamed.values())
    rows = []
    for name in dict.fromkeys([*b, *n]):
        if name in paired:
            continue
        other = renamed.get(name, name)
        bt, bc, bus = b.get(name, ("", 0.0, 0.0))
        nt, nc, nus = n.get(other, ("", 0.0, 0.0))
        status = (
            "renamed"
            if other != name
            else "new"
            if name not in b
            else "gone"
            if name not in n
            else ""
        )
        rows.append(
            KernelChange(name, nt or bt, bc, nc, bus, nus, nus - bus, status, renamed.get(name, ""))
        )
    return tuple(sorted(rows, key=lambda k: (-abs(k.change_us), k.name)))


def _type_changes(base: Sequence[Summary], new: Sequence[Summary]) -> tuple[FigureChange, ...]:
    sides = []
    for side in (base, new):
        out: dict[str, float] = {}
        for kind, _, us in _kernel_side(side).values():
            out[kind] = out.get(kind, 0.0) + us
        sides.append(out)
    return tuple(sorted(_changes(*sides), key=lambda c: (-abs(c.change_us), c.name)))


def _by_rank(side: Sequence[Summary]) -> dict[int, list[RankSummary]]:
    out: dict[int, list[RankSummary]] = {}
    for run in side:
        for r in run.ranks:
            out.setdefault(r.rank, []).append(r)
    return dict(sorted(out.items()))


def rank_pairs(base: Sequence[Summary], new: Sequence[Summary]) -> list[tuple[int, int]]:
    """The ranks compared: those of one number on both sides; a side of one rank against
    the other side's one rank whatever their numbers (two ranks of a job, two runs)."""
    b, n = _by_rank(base), _by_rank(new)
    if len(b) == 1 and len(n) == 1:
        return [(next(iter(b)), next(iter(n)))]
    return [(rank, rank) for rank in b if rank in n]


@dataclass(frozen=True)
class _Compared:
    """What every comparison of one diff shares: the steps' figures of every file, the
    steps left out at the start, the equivalence margin."""

    steps: StepsOf
    skip_first: int
    margin_pct: float
    cpu_estimator: str

    def gpu(self, b: Sequence[RankSummary], n: Sequence[RankSummary]) -> StepComparison | None:
        """The GPU busy time per step of one rank (its files in each run), None where a side
        has no step with a GPU window."""
        base = [gpu_samples(r, self.steps, self.skip_first) for r in b]
        new = [gpu_samples(r, self.steps, self.skip_first) for r in n]
        if not any(base) or not any(new):
            return None
        return compare_runs(base, new, self.margin_pct)

    def job_gpu(self, b: Sequence[Summary], n: Sequence[Summary]) -> StepComparison | None:
        """The job's GPU busy time per step (the largest rank's), None as :meth:`gpu`."""
        base = [job_gpu_samples(run, self.steps, self.skip_first) for run in b]
        new = [job_gpu_samples(run, self.steps, self.skip_first) for run in n]
        if not any(base) or not any(new):
            return None
        return compare_runs(base, new, self.margin_pct)

    def rank(self, b: Sequence[RankSummary], n: Sequence[RankSummary]) -> RankDiff:
        steps = compare_runs(
            [[d for _, d in rank_steps(r, self.skip_first)] for r in b],
            [[d for _, d in rank_steps(r, self.skip_first)] for r in n],
            self.margin_pct,
            self.cpu_estimator,
        )
        return RankDiff(
            b[0].rank,
            n[0].rank,
            tuple(r.source for r in b),
            tuple(r.source for r in n),
            steps,
            self.gpu(b, n),
            _changes(_breakdown(b), _breakdown(n)),
        )


def run_paths(paths: Paths, runs: bool) -> list[list[str | os.PathLike[str]]]:
    """The runs of one side: all ``paths`` as one run, or where ``runs`` each path a run,
    and a single folder's entries (trace files and folders, hidden ones aside) each a run."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not runs:
        return [items]
    if len(items) == 1 and os.path.isdir(items[0]):
        folder = os.fsdecode(items[0])
        items = [
            os.path.join(folder, name)
            for name in sorted(os.listdir(folder))
            if not name.startswith(".")
            and (name.endswith(TRACE_SUFFIXES) or os.path.isdir(os.path.join(folder, name)))
        ]
        if not items:
            raise ValueError(f"{folder}: no run (a trace file or a folder) in it for diff")
    return [[item] for item in items]


@overload
def diff(
    base: Paths,
    new: Paths,
    *,
    runs: bool = ...,
    skip_first: int = ...,
    threads: int | None = ...,
    rules: Literal["exact"] = ...,
    gate: str | None = ...,
    same_within: float = ...,
    cpu_estimator: str = ...,
) -> DiffResult: ...
@overload
def diff(
    base: Paths,
    new: Paths,
    *,
    runs: bool = ...,
    skip_first: int = ...,
    threads: int | None = ...,
    rules: Literal["hta"],
    rank: Pick = ...,
    step: Pick = ...,
) -> HtaDiff: ...
def diff(
    base: Paths,
    new: Paths,
    *,
    runs: bool = False,
    skip_first: int = 0,
    threads: int | None = None,
    rules: str = "exact",
    rank: Pick = None,
    step: Pick = None,
    gate: str | None = None,
    same_within: float = SAME_WITHIN_PCT,
    cpu_estimator: str = CPU_ESTIMATOR,
) -> DiffResult | HtaDiff:
    """Compares two runs, each a trace file (``.json`` or gzip) or a folder of ranks (or
    several, one rank per file, as :func:`kinetrace.summarize` takes them).

    Args:
        base: the run compared against.
        new: the run compared.
        runs: each side is several runs of one job: each path given a run, or the entries
            of the one folder given (trace files, or folders of ranks); their steps pooled.
        skip_first: steps left out at the start of each rank (a warm-up).
        threads: threads reading the files, two a file (default: the CPUs available).
        rules: ``"exact"`` (the above) or ``"hta"``: HTA 0.5.0's ``compare_traces`` of one
            ``rank`` and one ``step`` (``ProfilerStep#N``) per side, each an int, a (BASE,
            NEW) pair or None (HTA's default: the first), an :class:`HtaDiff`
            (:mod:`kinetrace._tools.diff_hta`).
        gate: the time verdict :meth:`DiffResult.regression` reads: ``"gpu"`` (the GPU busy
            time per step) or ``"cpu"`` (the CPU step time); default the GPU's where both
            sides have GPU activities in their steps, else the CPU's.
        same_within: the equivalence margin (%) of a ``"same"`` verdict.
        cpu_estimator: what a side's CPU step time is: ``"median"`` (the pooled steps'
            median), or where both sides have :data:`MIN_RUNS` runs or more ``"fastest"``
            (each run's fastest step) or ``"quartile"`` (each run's lower quartile of its
            steps), compared run against run (with fewer runs, the median).

    Raises:
        kinetrace.TraceFormatError: a file is not a trace.
        ValueError: two files of one run claim one rank, a folder holds no trace,
            ``skip_first`` is negative, ``gate="gpu"`` where a side has no GPU activity in
            its steps.
        OSError: a file cannot be read.
    """
    if rules == "hta":
        if runs or skip_first or gate is not None or cpu_estimator != CPU_ESTIMATOR:
            raise ValueError(
                "rules='hta' compares one rank and one step: no runs, skip_first, gate or"
                " cpu_estimator"
            )
        return diff_hta(base, new, rank=rank, step=step, threads=threads)
    if rules != "exact" or rank is not None or step is not None:
        raise ValueError(f"rules must be 'exact' (no rank, no step) or 'hta', not {rules!r}")
    if gate is not None and gate not in GATES:
        raise ValueError(f"gate must be 'gpu', 'cpu' or None, not {gate!r}")
    if not isinstance(same_within, (int, float)) or not 0 <= same_within < 100:
        raise ValueError(f"same_within must be a percentage in [0, 100), not {same_within!r}")
    if cpu_estimator not in CPU_ESTIMATORS:
        raise ValueError(
            f"cpu_estimator must be one of {', '.join(CPU_ESTIMATORS)}, not {cpu_estimator!r}"
        )
    require_in_range("skip_first", skip_first, 0, 1 << 30)
    workers = available_cpus() if threads is None else threads
    require_in_range("threads", workers, 1, 1024)
    start = time.perf_counter()
    b_files = [trace_files(run, tool="diff") for run in run_paths(base, runs)]
    n_files = [trace_files(run, tool="diff") for run in run_paths(new, runs)]
    # One read per file for its summary, its operators and its steps' figures, every file
    # of both sides in one pool (docs/diff.md).
    summaries, groups, steps = read_runs([*b_files, *n_files], workers)
    b, n = summaries[: len(b_files)], summaries[len(b_files) :]
    pairs = rank_pairs(b, n)
    b_ranks, n_ranks = _by_rank(b), _by_rank(n)
    compared = _Compared(steps, skip_first, float(same_within), cpu_estimator)
    gpu = compared.job_gpu(b, n)
    if gate == "gpu" and gpu is None:
        raise ValueError("gate='gpu', but a side has no GPU activity in its steps")
    return DiffResult(
        base_sources=tuple(r.source for run in b for r in run.ranks),
        new_sources=tuple(r.source for run in n for r in run.ranks),
        base_runs=len(b),
        new_runs=len(n),
        skip_first=skip_first,
        gate=gate or ("gpu" if gpu is not None else "cpu"),
        gpu=gpu,
        verdict=compare_runs(
            _side_runs(b, skip_first), _side_runs(n, skip_first), compared.margin_pct, cpu_estimator
        ),
        counts=tuple(rank_counts(b_ranks[x], n_ranks[y], steps, skip_first) for x, y in pairs),
        ranks=tuple(compared.rank(b_ranks[x], n_ranks[y]) for x, y in pairs),
        base_only_ranks=tuple(sorted(set(b_ranks) - {x for x, _ in pairs})),
        new_only_ranks=tuple(sorted(set(n_ranks) - {y for _, y in pairs})),
        kernels=kernel_changes(b, n),
        kernel_types=_type_changes(b, n),
        operators=operator_changes(b, n, groups),
        seconds=time.perf_counter() - start,
    )
