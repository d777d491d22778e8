"""``diff``'s operators: per (name, ``Input Dims``, ``Input type``), the count, self CPU time
and own GPU time per step on each side (``docs/diff.md``), from the attribution the native
``diff_read`` computes per file (the one ``kinetrace.ops`` uses) in the one read of each
file that also gives its summary, files read in parallel with the GIL released.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kinetrace import _kinetrace
from kinetrace._tools.diff_names import family, pair_renames
from kinetrace._tools.summary import Summary, summary_of

if TYPE_CHECKING:
    from kinetrace._kinetrace import _OperatorGroup, _RankSteps

__all__ = ["OperatorChange", "operator_changes", "read_runs"]

#: (name, Input Dims, Input type), the last two in the attribution's one form ("" where not
#: recorded).
Key = tuple[str, str, str]
Groups = Mapping[str, Sequence["_OperatorGroup"]]


@dataclass(frozen=True)
class OperatorChange:
    """One (name, ``Input Dims``, ``Input type``) per step on each side (the mean over the
    side's ranks): count, self CPU µs, own GPU µs; ``change_us`` NEW - BASE of self + GPU.
    ``status`` ``"new"``, ``"gone"``, ``"renamed"`` (``name`` BASE's, ``new_name`` NEW's) or
    ``""``; ``top_kernel`` the GPU activity it launched with the most time (NEW's, else
    BASE's; ``""`` when none)."""

    name: str
    input_dims: str
    input_type: str
    base_count: float
    new_count: float
    base_self_us: float
    new_self_us: float
    base_gpu_us: float
    new_gpu_us: float
    change_us: float
    status: str
    new_name: str
    top_kernel: str


@dataclass
class _Figures:
    count: float = 0.0
    self_us: float = 0.0
    gpu_us: float = 0.0
    kernels: dict[str, float] = field(default_factory=dict)

    @property
    def total_us(self) -> float:
        return self.self_us + self.gpu_us

    def top_kernel(self) -> str:
        return max(self.kernels, key=lambda k: (self.kernels[k], k), default="")


def read_runs(
    runs: Sequence[Sequence[str]], threads: int
) -> tuple[list[Summary], dict[str, list[_OperatorGroup]], dict[str, _RankSteps]]:
    """Each run's :class:`Summary` (as :func:`kinetrace.summarize` gives it, warnings
    included), each file's operator groups and its steps' figures
    (:mod:`kinetrace._tools.diff_steps`): one native call that reads every file once,
    ``threads`` files at once on the reading wing's pool, the GIL released and Ctrl-C
    answered between waits."""
    start = time.perf_counter()
    ranks, groups, steps = _kinetrace.diff_read([list(run) for run in runs], threads)
    return [summary_of(run, "exact", start) for run in ranks], groups, steps


def _side(side: Sequence[Summary], groups: Groups) -> dict[Key, _Figures]:
    """Per key, figures per step, the mean over the ranks of every run (as kernels are)."""
    out: dict[Key, _Figures] = {}
    ranks = [r for run in side for r in run.ranks]
    for r in ranks:
        n = max(len(r.steps), 1) * len(ranks)
        for g in groups[r.source]:
            # The texts come in one form (the attribution's): a trace that prints shapes
            # over several lines keys as one that does not, as in ``ops``' groups.
            key = (g["name"], g["input_dims"], g["input_type"])
            f = out.setdefault(key, _Figures())
            f.count += g["count"] / n
            f.self_us += g["self_ns"] / 1000 / n
            f.gpu_us += g["gpu_ns"] / 1000 / n
            if g["top_kernel"] is not None and g["top_kernel_ns"] is not None:
                k = g["top_kernel"]
                f.kernels[k] = f.kernels.get(k, 0.0) + g["top_kernel_ns"] / 1000 / n
    return out


def _row(key: Key, b: _Figures, n: _Figures, status: str, new_name: str = "") -> OperatorChange:
    return OperatorChange(
        *key,
        base_count=b.count,
        new_count=n.count,
        base_self_us=b.self_us,
        new_self_us=n.self_us,
        base_gpu_us=b.gpu_us,
        new_gpu_us=n.gpu_us,
        change_us=n.total_us - b.total_us,
        status=status,
        new_name=new_name,
        top_kernel=n.top_kernel() or b.top_kernel(),
    )


def operator_changes(
    base: Sequence[Summary], new: Sequence[Summary], groups: Groups
) -> tuple[OperatorChange, ...]:
    """Every operator key of either side, the largest |change of self + own GPU µs per step|
    first; keys on one side only paired as renames where their families match
    (:func:`kinetrace._tools.diff_names.pair_renames`)."""
    b, n = _side(base, groups), _side(new, groups)
    gone = {k: f.total_us for k, f in b.items() if k not in n}
    added = {k: f.total_us for k, f in n.items() if k not in b}
    pairs = pair_renames(gone, added, key=lambda k: (family(k[0]), k[1], k[2]))
    renamed = {g for g, _ in pairs} | {a for _, a in pairs}
    none = _Figures()
    rows = [_row(k, b[k], n[k], "") for k in b if k in n]
    rows += [_row(g, b[g], n[a], "renamed", a[0]) for g, a in pairs]
    rows += [_row(k, b[k], none, "gone") for k in gone if k not in renamed]
    rows += [_row(k, none, n[k], "new") for k in added if k not in renamed]
    return tuple(sorted(rows, key=lambda r: (-abs(r.change_us), r.name, r.input_dims)))
