"""``diff``'s GPU samples and exact counts, from each step's figures the native read gives
(``crate::tools::diff::steps``; the rules are in ``docs/diff.md``, "Three verdicts"):

- the **GPU busy time** of a step: the time inside its GPU window (from the first start of
  the activities it launched to the next step's) with a GPU activity of the rank running;
  the job's, per step present on every rank, the largest of the ranks' (as the job's CPU
  step is its slowest rank's);
- the **counts**: per rank, the GPU activities the steps launched, by name, the bytes of
  their memcpys by direction, and the FLOPs of the operators ``ops`` models (its ``exact``
  rules) that started in them, per step on each side. A count is exact: a change is any
  difference, decided on integers (total x steps), never within a tolerance. Names on one
  side only whose family matches are the same activity renamed between builds
  (:func:`kinetrace._tools.diff_names.family`), compared as one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kinetrace._tools.diff_names import family, pair_renames
from kinetrace._tools.summary import RankSummary, Summary

if TYPE_CHECKING:
    from kinetrace._kinetrace import _RankSteps

__all__ = ["CountChange", "RankCounts", "StepsOf", "gpu_samples", "job_gpu_samples", "rank_counts"]

#: Per file (as a rank's ``source`` names it), its steps' figures.
StepsOf = Mapping[str, "_RankSteps"]

#: The memcpy directions whose bytes a count regression watches (host <-> device).
HOST_DEVICE = ("HtoD", "DtoH")


@dataclass(frozen=True)
class CountChange:
    """One count per step on each side that differs: a GPU activity's launches by name
    (``what`` ``"launches"``, ``kind`` its type), a direction's memcpy bytes (``what``
    ``"memcpy bytes"``, ``name`` the direction, ``kind`` ``"MEMORY"``) or the modelled
    operators' FLOPs (``what`` ``"flops"``, ``name`` ``"modelled operators"``, ``kind``
    ``""``). ``status`` ``"new"``, ``"gone"``, ``"renamed"`` (``name`` BASE's, ``new_name``
    NEW's) or ``""``."""

    what: str
    name: str
    kind: str
    base_per_step: float
    new_per_step: float
    status: str
    new_name: str = ""

    @property
    def measure(self) -> str | None:
        """What a count other than launches measures, as a row names it (``"HtoD memcpy
        bytes"``, ``"FLOPs"``: of the modelled operators); None for launches (named by the
        activity)."""
        if self.what == "memcpy bytes":
            return f"{self.name} memcpy bytes"
        if self.what == "flops":
            return "FLOPs"
        return None

    @property
    def unit(self) -> str:
        """The unit its figures are in, with a leading space (``" B"``), or ``""``."""
        return " B" if self.what == "memcpy bytes" else ""

    def figure(self, per_step: float) -> str:
        """A figure per step as a row prints it: FLOPs whole (with thousands separators,
        where it is whole), the rest in ``g`` format."""
        if self.what == "flops" and per_step == int(per_step):
            return f"{int(per_step):,}"
        return f"{per_step:g}"

    @property
    def rose(self) -> bool:
        """NEW does more of it per step (a new activity counts)."""
        return self.new_per_step > self.base_per_step


@dataclass(frozen=True)
class RankCounts:
    """The counts of one rank compared (``rank`` BASE's, ``new_rank`` NEW's): the steps
    counted on each side and every count that differs, largest change first."""

    rank: int
    new_rank: int
    base_steps: int
    new_steps: int
    changes: tuple[CountChange, ...]

    def regression(self) -> bool:
        """More work per step in NEW: a new GPU activity, more launches of one, more bytes
        copied between host and device, or more FLOPs."""
        return any(
            c.rose and (c.what in ("launches", "flops") or c.name in HOST_DEVICE)
            for c in self.changes
        )


def _step_numbers(r: RankSummary) -> list[str]:
    return [s.name.rsplit("#", 1)[-1] for s in r.steps]


def gpu_samples(r: RankSummary, steps: StepsOf, skip_first: int) -> list[float]:
    """The GPU busy time (µs) of each of a rank's steps that has a GPU window, in file
    order, the first ``skip_first`` steps left out."""
    found = steps[r.source]["steps"][skip_first:]
    return [s["gpu_busy_ns"] / 1000 for s in found if s["gpu_busy_ns"] is not None]


def job_gpu_samples(s: Summary, steps: StepsOf, skip_first: int) -> list[float]:
    """Per step number present with a GPU window on every rank, the largest rank's GPU busy
    time (µs), in the first rank's order."""
    per_rank = []
    for r in s.ranks:
        figures = steps[r.source]["steps"]
        numbers = _step_numbers(r)
        busy: dict[str, float] = {}
        for n, f in list(zip(numbers, figures, strict=True))[skip_first:]:
            if f["gpu_busy_ns"] is not None:
                busy.setdefault(n, f["gpu_busy_ns"] / 1000)
        per_rank.append(busy)
    if not per_rank:
        return []
    common = [n for n in per_rank[0] if all(n in b for b in per_rank)]
    return [max(b[n] for b in per_rank) for n in common]


@dataclass
class _Side:
    """A rank's totals over the steps counted, on one side."""

    steps: int = 0
    launches: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    flops: int = 0


def _side(ranks: Sequence[RankSummary], steps: StepsOf, skip_first: int) -> _Side:
    out = _Side()
    for r in ranks:
        found = steps[r.source]
        for step in found["steps"][skip_first:]:
            out.steps += 1
            for i, n in zip(step["names"], step["counts"], strict=True):
                name = found["names"][i]
                out.launches[name] = out.launches.get(name, 0) + n
                out.kinds[name] = found["kinds"][i]
            for d, n in zip(found["directions"], step["memcpy_bytes"], strict=True):
                out.bytes[d] = out.bytes.get(d, 0) + n
            out.flops += step["flops"]
    return out


def _per_step(total: int, steps: int) -> float:
    return total / steps if steps else 0.0


def _differ(b_total: int, b_steps: int, n_total: int, n_steps: int) -> bool:
    """Whether two counts per step differ, decided on integers (no float rounding)."""
    return b_total * max(n_steps, 1) != n_total * max(b_steps, 1)


def _changes(b: _Side, n: _Side) -> list[CountChange]:
    gone = {k: float(v) for k, v in b.launches.items() if k not in n.launches}
    added = {k: float(v) for k, v in n.launches.items() if k not in b.launches}
    renamed = dict(pair_renames(gone, added, key=family))
    paired = set(renamed.values())
    rows: list[tuple[float, CountChange]] = []
    for name in dict.fromkeys([*b.launches, *n.launches]):
        if name in paired:
            continue
        other = renamed.get(name, name)
        tb, tn = b.launches.get(name, 0), n.launches.get(other, 0)
        pb, pn = _per_step(tb, b.steps), _per_step(tn, n.steps)
        status = (
            "renamed"
            if other != name
            else "new"
            if name not in b.launches
            else "gone"
            if name not in n.launches
            else ""
        )
        if _differ(tb, b.steps, tn, n.steps) or status in ("new", "gone"):
            kind = n.kinds.get(other) or b.kinds.get(name, "")
            row = CountChange("launches", name, kind, pb, pn, status, renamed.get(name, ""))
            rows.append((abs(pn - pb), row))
    for d in dict.fromkeys([*b.bytes, *n.bytes]):
        tb, tn = b.bytes.get(d, 0), n.bytes.get(d, 0)
        pb, pn = _per_step(tb, b.steps), _per_step(tn, n.steps)
        if _differ(tb, b.steps, tn, n.steps):
            rows.append((abs(pn - pb), CountChange("memcpy bytes", d, "MEMORY", pb, pn, "")))
    if _differ(b.flops, b.steps, n.flops, n.steps):
        pb, pn = _per_step(b.flops, b.steps), _per_step(n.flops, n.steps)
        rows.append((abs(pn - pb), CountChange("flops", "modelled operators", "", pb, pn, "")))
    order = {"launches": 0, "memcpy bytes": 1, "flops": 2}
    rows.sort(key=lambda r: (order[r[1].what], -r[0], r[1].name))
    return [row for _, row in rows]


def rank_counts(
    base: Sequence[RankSummary],
    new: Sequence[RankSummary],
    steps: StepsOf,
    skip_first: int,
) -> RankCounts:
    """The counts of one rank (its files in every run of each side) compared."""
    b, n = _side(base, steps, skip_first), _side(new, steps, skip_first)
    return RankCounts(base[0].rank, new[0].rank, b.steps, n.steps, tuple(_changes(b, n)))
