"""The statistics of ``kinetrace diff`` (``docs/diff.md``), in plain Python: the median, the
Mann-Whitney U test (exact without ties on small samples, else the normal approximation
with tie and continuity corrections) and a percentile bootstrap of the change in medians
with a fixed seed, so a diff of the same traces always prints the same figures; where a
side is several runs, the bootstrap resamples its runs, then each drawn run's steps, and
gives the p-value too (the rank test would count each step as independent)."""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "BootstrapChange",
    "MannWhitney",
    "bootstrap_change_ci",
    "bootstrap_runs_change",
    "mann_whitney",
    "median",
    "percentile",
]

#: Largest side for the exact distribution of U (its table grows as (m·n)²; 30 x 30 steps
#: take ~0.1 s in pure Python, beyond that the normal approximation is already close).
EXACT_MAX = 30


def median(values: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of sorted values, linear between the closest ranks
    (numpy's default)."""
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class MannWhitney:
    """U of the first sample (the number of pairs where it is larger, ties counting a half),
    the two-sided p-value, and which computation gave it (``"exact"`` or ``"normal"``)."""

    u: float
    p_value: float
    method: str


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of ``values`` and the sizes of their groups of ties."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=4096)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings give each U = 0 .. m·n (no ties): the largest
    value is either from the first sample (it beats all n others: U shifts by n) or not."""
    if m == 0 or n == 0:
        return (1,)
    with_first = _u_counts(m - 1, n)
    without = _u_counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(with_first):
        out[u + n] += c
    for u, c in enumerate(without):
        out[u] += c
    return tuple(out)


def _exact_p(u: float, m: int, n: int) -> float:
    counts = _u_counts(m, n)
    tail = sum(counts[: int(min(u, m * n - u)) + 1])
    return min(1.0, 2 * tail / math.comb(m + n, m))


def _normal_p(u: float, m: int, n: int, ties: list[int]) -> float:
    total = m + n
    tie_term = sum(t**3 - t for t in ties) / (total * (total - 1))
    variance = m * n / 12 * ((total + 1) - tie_term)
    if variance <= 0:  # every value equal: nothing tells the samples apart
        return 1.0
    z = max(abs(u - m * n / 2) - 0.5, 0.0) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2)))


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> MannWhitney:
    """The two-sided Mann-Whitney U test of ``a`` against ``b``: exact when there are no
    ties and neither side has more than :data:`EXACT_MAX` values, else the normal
    approximation with the tie correction of the variance and a continuity correction."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        raise ValueError("the Mann-Whitney U test needs values on both sides")
    ranks, ties = _ranks([*a, *b])
    u = sum(ranks[:m]) - m * (m + 1) / 2
    if max(ties) == 1 and max(m, n) <= EXACT_MAX:
        return MannWhitney(u, _exact_p(u, m, n), "exact")
    return MannWhitney(u, _normal_p(u, m, n, ties), "normal")


def _change_pct(base: float, new: float) -> float:
    return 100 * (new - base) / base if base else 0.0


def bootstrap_change_ci(
    base: Sequence[float],
    new: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of the change in medians, in % of the base median:
    each side resampled with replacement ``resamples`` times (a ``random.Random(seed)``,
    base then new each time), the change of each pair's medians, its
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles. A resample's median
    is drawn directly (:func:`_resampled_median`), so a side of 5000 steps costs what one
    of 5 does. Each side one run of :func:`bootstrap_runs_change`."""
    b = bootstrap_runs_change([base], [new], resamples=resamples, confidence=confidence, seed=seed)
    return b.low, b.high


def _resampled_median(rng: random.Random, sorted_values: Sequence[float]) -> float:
    """The median of ``len(sorted_values)`` draws with replacement, drawn in O(1): n draws
    of an index are floor(n·U) of n uniform U, and the k-th smallest of n uniforms follows
    Beta(k, n - k + 1); the next one above it, u, is u + (1 - u)·Beta(1, n - k)."""
    n = len(sorted_values)
    k = (n + 1) // 2
    u = rng.betavariate(k, n - k + 1)
    low = sorted_values[min(int(u * n), n - 1)]
    if n % 2:
        return low
    v = u + (1 - u) * rng.betavariate(1, n - k)
    return (low + sorted_values[min(int(v * n), n - 1)]) / 2


def _resample_runs(rng: random.Random, runs: Sequence[Sequence[float]]) -> list[float]:
    """As many runs as ``runs`` drawn with replacement, each drawn run's steps resampled
    with replacement, pooled."""
    out: list[float] = []
    for run in rng.choices(runs, k=len(runs)):
        out += rng.choices(run, k=len(run))
    return out


def _median_drawer(runs: Sequence[Sequence[float]]) -> Callable[[random.Random], float]:
    """Draws the median of one resample of a side: of its one run's steps in O(1), or of
    its runs drawn with replacement and then their steps."""
    if len(runs) == 1:
        steps = sorted(runs[0])
        return lambda rng: _resampled_median(rng, steps)
    return lambda rng: median(_resample_runs(rng, runs))


@dataclass(frozen=True)
class BootstrapChange:
    """The bootstrap's interval of the change in medians (% of the base median) and its
    two-sided p-value (:func:`bootstrap_runs_change`)."""

    low: float
    high: float
    p_value: float


def bootstrap_runs_change(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapChange:
    """:func:`bootstrap_change_ci` where each side is a list of runs (each a non-empty list
    of step times): each resample draws a side's runs with replacement, then each drawn
    run's steps, and takes the median of the pooled steps. Runs that differ from one
    another (a machine's speed between processes) widen the interval as they should;
    resampling the pooled steps alone would take 10 runs of 12 steps for 120 independent
    samples of one run.

    The p-value is the bootstrap's own, from the same resamples: twice the share of them on
    the far side of 0 from the other (a resample at 0 counts on both), each count plus one
    over ``resamples + 1`` so that it is never 0, at most 1. It is below 0.05 about when
    the 95% interval excludes 0, so with several runs the test and the interval agree."""
    if not base or not new or any(not run for run in (*base, *new)):
        raise ValueError("every side needs runs, and every run a step")
    draw_base, draw_new = _median_drawer(base), _median_drawer(new)
    rng = random.Random(seed)
    changes = sorted(_change_pct(draw_base(rng), draw_new(rng)) for _ in range(resamples))
    tail = (1 - confidence) / 2 * 100
    at_or_below = bisect_right(changes, 0)
    at_or_above = len(changes) - bisect_left(changes, 0)
    p = min(1.0, 2 * (min(at_or_below, at_or_above) + 1) / (resamples + 1))
    return BootstrapChange(percentile(changes, tail), percentile(changes, 100 - tail), p)
