"""``diff(rules="hta")``: HolisticTraceAnalysis 0.5.0's ``TraceDiff.compare_traces``
(``kinetrace diff --rules hta``; ``docs/diff.md``).

Each side is read once, streaming, by the native ``diff_hta_side`` (GIL released), which
gives the count and total ``dur`` of every event name of one rank in one iteration as HTA
counts them; here the two sides are joined by name and subtracted, as HTA does.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import available_cpus, require_in_range
from kinetrace._text import duration, signed_duration
from kinetrace._tools.sources import trace_files
from kinetrace._tools.summary import SummaryWarning

__all__ = ["HtaDiff", "HtaOpChange", "Pick", "diff_hta"]

#: A rank or an iteration: one for both sides, a (BASE, NEW) pair, or None for HTA's
#: default (the first).
Pick = int | tuple[int | None, int | None] | None


@dataclass(frozen=True)
class HtaOpChange:
    """One event name: count and total ``dur`` (µs) on each side, NEW - BASE, and
    ``change`` HTA's ``counts_change_categories``: ``"+"``, ``"-"`` or ``"="``."""

    name: str
    base_count: int
    new_count: int
    base_us: float
    new_us: float
    diff_count: int
    diff_us: float
    change: str


@dataclass(frozen=True)
class HtaDiff:
    """What :func:`diff_hta` found: the rank and iteration compared on each side (and those
    there were), the names, largest absolute ``diff_us`` first, then by name."""

    rules: str
    base_source: str
    new_source: str
    base_rank: int
    new_rank: int
    base_ranks: tuple[int, ...]
    new_ranks: tuple[int, ...]
    base_iteration: int
    new_iteration: int
    base_iterations: tuple[int, ...]
    new_iterations: tuple[int, ...]
    ops: tuple[HtaOpChange, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``kinetrace diff --rules hta --json`` (``docs/diff.md``)."""
        return asdict(self)

    def report(self, width: int = 100, top: int = 20) -> str:
        """The terminal report: what was compared, then the ``top`` names of largest change."""
        lines = [
            f"HTA compare_traces: BASE rank {self.base_rank} ProfilerStep#{self.base_iteration}"
            f" vs NEW rank {self.new_rank} ProfilerStep#{self.new_iteration}",
            f"{len(self.ops)} names; total {duration(_total(self, 'base'))} -> "
            f"{duration(_total(self, 'new'))}",
            "",
            f"{'change':>12}  {'BASE':>11}  {'NEW':>11}  {'count':>13}  name",
        ]
        for op in self.ops[:top]:
            counts = f"{op.base_count}->{op.new_count}"
            row = (
                f"{signed_duration(op.diff_us):>12}  {duration(op.base_us):>11}  "
                f"{duration(op.new_us):>11}  {counts:>13}  "
            )
            room = width - len(row)
            name = op.name if len(op.name) <= room else op.name[: room - 3] + "..."
            lines.append(row + name)
        if len(self.ops) > top:
            lines.append(f"... {len(self.ops) - top} more names (--json has them all)")
        return "\n".join(lines)

    def markdown(self, top: int = 20) -> str:
        """A pull-request comment: what was compared, then a table of the largest changes."""
        lines = [
            f"**kinetrace diff --rules hta**: BASE rank {self.base_rank} "
            f"ProfilerStep#{self.base_iteration} vs NEW rank {self.new_rank} "
            f"ProfilerStep#{self.new_iteration}, {len(self.ops)} names",
            "",
            "| change | BASE | NEW | count | name |",
            "|---:|---:|---:|---:|---|",
        ]
        for op in self.ops[:top]:
            name = op.name.replace("|", "\\|").replace("`", "'")[:120]
            lines.append(
                f"| {signed_duration(op.diff_us)} | {duration(op.base_us)} | "
                f"{duration(op.new_us)} | "
                f"{op.base_count}->{op.new_count} | `{name}` |"
            )
        return "\n".join(lines)


def _total(d: HtaDiff, side: str) -> float:
    return sum(op.base_us if side == "base" else op.new_us for op in d.ops)


def _pair(pick: Pick, what: str) -> tuple[int | None, int | None]:
    if pick is None or isinstance(pick, int):
        return pick, pick
    if isinstance(pick, tuple) and len(pick) == 2:
        return pick
    raise ValueError(f"{what} must be an int, a (BASE, NEW) pair or None, not {pick!r}")


def _side(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    rank: int | None,
    iteration: int | None,
    threads: int,
) -> Any:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    side = _kinetrace.diff_hta_side(trace_files(paths, tool="diff"), rank, iteration, threads)
    for w in side["warnings"]:
        warnings.warn(w, SummaryWarning, stacklevel=3)
    return side


def diff_hta(
    base: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    new: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    rank: Pick = None,
    step: Pick = None,
    threads: int | None = None,
) -> HtaDiff:
    """HTA 0.5.0's ``TraceDiff.compare_traces(BASE, NEW, rank, rank, step, step)``: per
    event name the count and total ``dur`` of one rank in one iteration on each side.

    Raises:
        ValueError: ``rank`` or ``step`` not on a side, a side without ``ProfilerStep#N``.
    """
    workers = available_cpus() if threads is None else threads
    require_in_range("threads", workers, 1, 1024)
    (base_rank, new_rank), (base_step, new_step) = _pair(rank, "rank"), _pair(step, "step")
    start = time.perf_counter()
    b = _side(base, base_rank, base_step, workers)
    n = _side(new, new_rank, new_step, workers)
    bo = {name: (count, us) for name, count, us in b["ops"]}
    no = {name: (count, us) for name, count, us in n["ops"]}
    ops = []
    for name in bo.keys() | no.keys():
        (bc, bu), (nc, nu) = bo.get(name, (0, 0.0)), no.get(name, (0, 0.0))
        change = "+" if nc > bc else "-" if nc < bc else "="
        ops.append(HtaOpChange(name, bc, nc, bu, nu, nc - bc, nu - bu, change))
    ops.sort(key=lambda o: (-abs(o.diff_us), o.name))
    return HtaDiff(
        rules="hta",
        base_source=b["source"],
        new_source=n["source"],
        base_rank=b["rank"],
        new_rank=n["rank"],
        base_ranks=tuple(b["ranks"]),
        new_ranks=tuple(n["ranks"]),
        base_iteration=b["iteration"],
        new_iteration=n["iteration"],
        base_iterations=tuple(b["iterations"]),
        new_iterations=tuple(n["iterations"]),
        ops=tuple(ops),
        seconds=time.perf_counter() - start,
    )
