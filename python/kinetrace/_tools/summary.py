"""``summarize``: where the GPU time of each rank went (``kinetrace summary``).

Two rule sets (``docs/summary.md`` states both and every difference between them):
``"exact"`` (the default: GPU activities are the kernel, memcpy and memset events, times
exact integer ns from the trace's decimal text, nothing dropped) and ``"hta"``
(HolisticTraceAnalysis 0.5.0's figures, quirks included). The reading is the native
module's: one streaming pass per file, files in parallel, the GIL released.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from kinetrace import _kinetrace
from kinetrace._env import available_cpus, require_in_range
from kinetrace._tools.sources import trace_files

if TYPE_CHECKING:
    from kinetrace._kinetrace import _RankFigures

__all__ = [
    "KernelStats",
    "RankSummary",
    "Step",
    "StepSpread",
    "StreamIdle",
    "Summary",
    "SummaryWarning",
    "TemporalBreakdown",
    "summarize",
    "top_kernels",
]

Rules = Literal["exact", "hta"]


class SummaryWarning(UserWarning):
    """A trace was summarised only up to where it is damaged (the message names the file
    and the byte offset), or (``rules="hta"``) two files had one rank and HTA's choice was
    followed."""


@dataclass(frozen=True)
class TemporalBreakdown:
    """GPU time of a rank, µs: ``kernel_time_us`` from the first GPU activity's start to the
    last one's end, split into ``idle`` (no activity), ``compute`` (computation kernels)
    and ``non_compute`` (only communication or memory)."""

    idle_time_us: float
    compute_time_us: float
    non_compute_time_us: float
    kernel_time_us: float


@dataclass(frozen=True)
class KernelStats:
    """One GPU activity name's totals (``type``: COMPUTATION, COMMUNICATION or MEMORY)."""

    name: str
    type: str
    count: int
    sum_us: float
    mean_us: float
    min_us: float
    max_us: float


@dataclass(frozen=True)
class StreamIdle:
    """Idle time of one stream by cause: the GPU waited for the host to launch the next
    activity (``host_wait``), a short gap between activities (``kernel_wait``), or not
    known (``other``)."""

    host_wait_us: float
    kernel_wait_us: float
    other_us: float


@dataclass(frozen=True)
class Step:
    """A ``ProfilerStep#N`` CPU slice, its duration as the trace states it."""

    name: str
    dur_us: float


@dataclass(frozen=True)
class RankSummary:
    """The figures of one rank (one trace file)."""

    rank: int
    source: str
    #: ``distributedInfo``, ``file name`` or ``order`` (``exact``); HTA's regex or default.
    rank_from: str
    temporal_breakdown: TemporalBreakdown
    #: Label (``COMPUTATION``, ``COMPUTATION overlapping COMMUNICATION``, ...) -> µs.
    kernel_types: dict[str, float]
    #: Sorted by ``sum_us``, largest first.
    kernels: tuple[KernelStats, ...]
    #: % of communication time overlapped by computation; None without communication.
    comm_comp_overlap_pct: float | None
    #: Stream (decimal; ``-1`` for activities without one) -> idle time.
    idle_time: dict[str, StreamIdle]
    steps: tuple[Step, ...]
    gpu_activities: int
    events: int
    json_bytes: int
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class StepSpread:
    """One step across ranks: the slowest and fastest rank (stragglers)."""

    name: str
    ranks: int
    slowest_rank: int
    slowest_us: float
    fastest_rank: int
    fastest_us: float
    #: slowest / fastest (None when the fastest took 0 µs).
    ratio: float | None


@dataclass(frozen=True)
class Summary:
    """What :func:`summarize` found: one :class:`RankSummary` per rank, in rank order, and
    each step's spread across ranks."""

    rules: str
    ranks: tuple[RankSummary, ...]
    steps: tuple[StepSpread, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``kinetrace summary --json`` (``docs/summary.md``)."""
        return {
            "rules": self.rules,
            "ranks": [asdict(r) for r in self.ranks],
            "steps": [asdict(s) for s in self.steps],
        }


def _rank(d: _RankFigures) -> RankSummary:
    # The native dicts use the dataclasses' field names (one name per figure, from
    # src/tools/summary/report.rs): a figure added there but not here fails loudly.
    return RankSummary(
        rank=d["rank"],
        source=d["source"],
        rank_from=d["rank_from"],
        temporal_breakdown=TemporalBreakdown(**d["temporal_breakdown"]),
        kernel_types=dict(d["kernel_types"]),
        kernels=tuple(KernelStats(**k) for k in d["kernels"]),
        comm_comp_overlap_pct=d["comm_comp_overlap_pct"],
        idle_time={s: StreamIdle(**v) for s, v in d["idle_time"].items()},
        steps=tuple(Step(n, us) for n, us in d["steps"]),
        gpu_activities=d["gpu_activities"],
        events=d["events"],
        json_bytes=d["json_bytes"],
        warnings=tuple(d["warnings"]),
    )


def step_spreads(ranks: Iterable[RankSummary]) -> tuple[StepSpread, ...]:
    """Per step name present on at least one rank (its first slice on each rank), the
    slowest and fastest rank; in the order steps are first met."""
    per: dict[str, list[tuple[float, int]]] = {}
    for r in ranks:
        seen: set[str] = set()
        for s in r.steps:
            if s.name not in seen:
                seen.add(s.name)
                per.setdefault(s.name, []).append((s.dur_us, r.rank))
    out = []
    for name, durs in per.items():
        slow = max(durs, key=lambda d: (d[0], -d[1]))
        fast = min(durs, key=lambda d: (d[0], d[1]))
        ratio = slow[0] / fast[0] if fast[0] > 0 else None
        out.append(StepSpread(name, len(durs), slow[1], slow[0], fast[1], fast[0], ratio))
    return tuple(out)


def top_kernels(ranks: tuple[RankSummary, ...], n: int = 10) -> list[KernelStats]:
    """The ``n`` GPU activity names with the most time over all ranks (totals summed)."""
    per: dict[str, list[Any]] = {}
    for r in ranks:
        for k in r.kernels:
            e = per.setdefault(k.name, [k.type, 0, 0.0, k.min_us, k.max_us])
            e[1] += k.count
            e[2] += k.sum_us
            e[3] = min(e[3], k.min_us)
            e[4] = max(e[4], k.max_us)
    rows = [KernelStats(name, t, c, s, s / c, lo, hi) for name, (t, c, s, lo, hi) in per.items()]
    return sorted(rows, key=lambda k: (-k.sum_us, k.name))[:n]


def summarize(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    rules: Rules = "exact",
    *,
    threads: int | None = None,
) -> Summary:
    """Summarises trace files (``.json`` or gzip, one rank each) or directories of them:
    per rank the temporal breakdown, kernel-type times, every GPU activity name's totals,
    the communication/computation overlap, idle time per stream and the ProfilerSteps.

    Args:
        paths: a trace file or directory, or several.
        rules: ``"exact"`` (default) or ``"hta"`` (HolisticTraceAnalysis 0.5.0's figures).
        threads: files read at once (default: the CPUs available).

    Raises:
        kinetrace.TraceFormatError: a file is not a trace (nothing of it could be read).
        ValueError: two files claim one rank (``exact``), a directory holds no trace, or
            ``rules`` is unknown.
        OSError: a file cannot be read.
        KeyboardInterrupt: Ctrl-C.

    A :class:`SummaryWarning` is issued for each trace summarised only as far as it loads.
    """
    if rules not in ("exact", "hta"):
        raise ValueError(f"rules must be 'exact' or 'hta', not {rules!r}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = trace_files(paths, tool="summary")
    workers = available_cpus() if threads is None else threads
    require_in_range("threads", workers, 1, 1024)
    start = time.perf_counter()
    return summary_of(_kinetrace.summarize(files, rules, workers), rules, start)


def summary_of(raw: Iterable[_RankFigures], rules: Rules, start: float) -> Summary:
    """The :class:`Summary` of the native ranks ``raw`` (``summarize``'s, or one run of
    ``diff``'s reading), read since ``start`` (``time.perf_counter()``); a
    :class:`SummaryWarning` for each of their warnings, in rank order."""
    ranks = tuple(_rank(d) for d in raw)
    for r in ranks:
        for w in r.warnings:
            # Told at the caller of summarize (or of diff).
            warnings.warn(w, SummaryWarning, stacklevel=3)
    return Summary(rules, ranks, step_spreads(ranks), time.perf_counter() - start)
