"""``ops``: the work each CPU operator's GPU time did (FLOPs and bytes from the shapes the
trace records) and that GPU time, one row per operator instance, each measured against the
GPU's roofline; the rows grouped by (name, input dims, input types), the groups ranked by
the GPU time they could save at their roofline.

Two rule sets (``docs/ops.md`` states both): ``"exact"`` (the default: each tensor's own
dtype, a causal mask of any shape as its triangle, each operator once at the outermost
modelled one) and ``"tracelens"`` (AMD's TraceLens figures, commit 171dd74, quirks
included: the rows of its per-family tables). The work is the native module's: one
streaming pass a file, files at once, the GIL released; the GPU and peak of each row
(``src/tools/ops/peaks.rs``), the roofline arithmetic (``rates.rs``) and the groups
(``groups.rs``). The rows stay native (``OpRows``: a dict is made for a row when asked
for), so that a 1 GB trace's 0.66M rows take ~150 B each, not ~1.6 KB.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, TypedDict

from kinetrace import _kinetrace
from kinetrace._env import available_cpus, require_in_range
from kinetrace._tools.sources import trace_files

__all__ = [
    "GpuPeaks",
    "OpGroup",
    "OpRow",
    "OpsCoverage",
    "OpsReport",
    "gpu_keys",
    "known_gpu",
    "ops",
]

Rules = Literal["exact", "tracelens"]


class GpuPeaks(TypedDict):
    """A GPU of the peaks table, per device (one GCD of an MI250X): ``key`` (what ``--gpu``
    takes), ``label``, ``bandwidth_tbs`` (TB/s), ``peaks_tflops`` (dense TFLOPS per
    precision: ``fp64``, ``fp64_tensor``, ``fp32``, ``fp32_matrix``, ``tf32``, ``bf16``,
    ``fp16``, ``fp8``; ``int8`` in TOPS; a precision the GPU lacks is absent) and
    ``source`` (where the figures are published)."""

    key: str
    label: str
    bandwidth_tbs: float
    peaks_tflops: dict[str, float]
    source: str


class OpsCoverage(TypedDict):
    """How much of the GPU time under operators the exact rules model: their rows hold each
    GPU activity once, and their busy time (µs) splits four ways: ``modelled_us`` (rows with
    a model), ``unmodelled_us`` (operators that recorded their shapes, no model),
    ``without_shapes_us`` (operators with no ``Input Dims``: a trace recorded without
    ``record_shapes``, a compiled graph's launcher) and ``collectives_us`` (operators named
    as collectives or launching NCCL/RCCL kernels: communication). ``modelled_share`` is
    ``modelled_us`` over ``modelled_us + unmodelled_us`` (None where that is 0)."""

    modelled_us: float
    unmodelled_us: float
    without_shapes_us: float
    collectives_us: float
    modelled_share: float | None


class OpRow(TypedDict):
    """One operator instance of a family table.

    ``uid`` is the index of the operator's event in ``traceEvents`` of its rank's file
    (``rank``: as ``summary`` and ``merge`` number them); ``table`` its family
    (``"GEMM"``, ``"UnaryElementwise"``, ``"BinaryElementwise"``, ``"Normalization"``,
    ``"Reduce"``, ``"CONV"``, ``"SDPA"``, ``"RMSNorm"``, ``"InferenceAttention"``,
    ``"RoPE"``; under ``exact`` also ``"Softmax"`` and ``"Indexing"``, and
    ``"unmodelled"`` for an operator no model covers that
    launched GPU work itself, ``flops`` and ``bytes`` ``None``, timed by that work); ``bwd``
    a backward row (the forward operator's shapes, the GPU time of the
    backward frames linked to it by sequence number); ``bytes`` is ``None`` where a dtype's
    size is unknown; ``kernel_time_us`` the busy time (union of intervals) of
    ``kernel_uids``, the GPU activities under it (their ``traceEvents`` indices), as
    TraceLens computes it (floats at the trace's absolute times, ~1e-4 µs off);
    ``kernel_time_ns`` the same busy time exact, from the trace's decimal text.
    ``input_dims`` and ``input_type`` are the operator's recorded inputs as JSON text;
    ``device`` the ``args.device`` of its first GPU activity.

    The roofline (``None`` where it does not apply: no GPU, no FLOPs, a zero time):
    ``time_us`` the time the rates use (``kernel_time_ns`` / 1000 under ``exact``,
    ``kernel_time_us`` under ``tracelens``); ``tflops_s`` and ``tbs`` the achieved
    TFLOPS/s and TB/s; ``flops_per_byte``; ``precision`` and ``peak_tflops`` the peak its
    family and main operand's dtype run at; ``roof_tflops`` = min(peak, intensity x
    bandwidth); ``roof_pct`` = 100 x achieved / roof; ``bound`` ``"compute"`` or
    ``"memory"``; ``roof_time_us`` the time at the roofline, max(FLOPs / peak, bytes /
    bandwidth)."""

    uid: int
    rank: int
    name: str
    table: str
    bwd: bool
    flops: float | None
    bytes: float | None
    kernel_time_us: float
    kernel_time_ns: int
    kernel_uids: list[int]
    input_dims: str | None
    input_type: str | None
    device: int | None
    precision: str | None
    peak_tflops: float | None
    time_us: float
    tflops_s: float | None
    tbs: float | None
    flops_per_byte: float | None
    roof_tflops: float | None
    roof_pct: float | None
    bound: str | None
    roof_time_us: float | None


@dataclass(frozen=True)
class OpGroup:
    """The instances of one operator with one set of inputs: (``name``, ``bwd``,
    ``input_dims``, ``input_type``), its ``table``; ``count`` instances; their time
    (``time_us``: sum, ``mean_us``, ``median_us``, ``min_us``, ``max_us``); ``flops`` and
    ``bytes`` per instance (the same inputs give the same figures); ``tflops_s`` and
    ``tbs`` the group's rates (sums over summed time), ``flops_per_byte``, ``precision``,
    ``peak_tflops``, ``roof_tflops``, ``roof_pct``, ``bound`` as a row's; ``roof_time_us``
    the summed time at the roofline and ``saveable_us`` = ``time_us`` - ``roof_time_us``
    (not below 0), the GPU time reaching the roofline would save (``None`` without a
    roofline)."""

    name: str
    table: str
    bwd: bool
    input_dims: str | None
    input_type: str | None
    count: int
    time_us: float
    mean_us: float
    median_us: float
    min_us: float
    max_us: float
    flops: float | None
    bytes: float | None
    tflops_s: float | None
    tbs: float | None
    flops_per_byte: float | None
    precision: str | None
    peak_tflops: float | None
    roof_tflops: float | None
    roof_pct: float | None
    bound: str | None
    roof_time_us: float | None
    saveable_us: float | None


@dataclass(frozen=True)
class OpsReport:
    """What :func:`ops` found in the trace files ``sources`` (one rank each, ``ranks``
    theirs, in rank order): the instance ``rows`` (rank by rank, operators in file order; a
    read-only sequence whose items are made as new :class:`OpRow` dicts when read)
    and their ``groups`` over every rank, ranked by ``saveable_us`` (most first; groups
    without a roofline last, by time); ``gpu`` the GPU of the roofline (the first rank's;
    ``None`` when none was found: ``note`` says why), ``gpu_from`` (``"deviceProperties"``
    or ``"--gpu"``), ``device_name`` (the trace's name for it), ``note``; ``seconds`` the
    time the reading took; ``coverage`` (exact rules) the split of the rows' GPU time by
    what has a model (:class:`OpsCoverage`), summed over the ranks, and
    :attr:`modelled_share` its share."""

    sources: tuple[str, ...]
    ranks: tuple[int, ...]
    rules: str
    gpu: GpuPeaks | None
    gpu_from: str
    device_name: str | None
    note: str | None
    seconds: float
    rows: Sequence[OpRow]
    groups: list[OpGroup]
    coverage: OpsCoverage | None = None

    @property
    def modelled_share(self) -> float | None:
        """The modelled part of the GPU time of operators with recorded shapes, collectives
        aside (exact rules; None under ``"tracelens"``, whose rows count nested operators
        twice, or where no such operator ran on the GPU)."""
        return None if self.coverage is None else self.coverage["modelled_share"]

    @property
    def label(self) -> str:
        """The first source's file name, and how many ranks more."""
        more = len(self.sources) - 1
        first = os.path.basename(self.sources[0])
        return first if more == 0 else f"{first} and {more} more rank{'s' * (more > 1)}"

    def rows_json(self, chunk: int = 4096) -> Iterator[str]:
        """The rows as ``json.dumps`` writes each, ``",\\n  "`` between them, in pieces of
        ``chunk`` rows (``--json`` prints them so): the native rows' text is made without
        a dict (a 1 GB trace has 0.66M rows)."""
        rows = self.rows
        for start in range(0, len(rows), chunk):
            if isinstance(rows, _kinetrace.OpRows):
                yield rows.json_text(start, start + chunk)
            else:
                yield ",\n  ".join(json.dumps(r) for r in rows[start : start + chunk])

    def to_json(self) -> dict[str, Any]:
        """The report as ``--json`` prints it (keys in docs/ops.md)."""
        # Field by field, not ``asdict``: its deep copy of every row cost more than the
        # reading itself on a 1 GB trace (0.66M rows).
        out = self.json_head()
        out["rows"] = list(self.rows)
        return out

    def json_head(self) -> dict[str, Any]:
        """:meth:`to_json` without its ``rows``."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rows"}
        out["gpu"] = None if self.gpu is None else dict(self.gpu)
        out["groups"] = [dict(vars(g)) for g in self.groups]
        out["modelled_share"] = self.modelled_share
        return out


# The rows are a read-only sequence: say so to isinstance().
Sequence.register(_kinetrace.OpRows)


def gpu_keys() -> list[str]:
    """The keys of the peaks table, in its order."""
    return list(_kinetrace.ops_gpu_keys())


def known_gpu(name: str) -> GpuPeaks | None:
    """The GPU ``name`` names (a table key such as ``h100-sxm``, a device name such as
    ``NVIDIA H100 PCIe``, or a family such as ``h100``: its first row), ``None`` if none."""
    found = _kinetrace.ops_gpu(name)
    return None if found is None else GpuPeaks(**found)


def _note(found: list[_kinetrace._OpsRank]) -> str | None:
    """The ranks' notes on their GPUs, each once (with its rank where there are several),
    and a note where the ranks' GPUs differ: each row is measured against its own rank's,
    the groups against the first rank's."""
    several = len(found) > 1
    notes = [
        f"rank {r['rank']}: {r['gpu']['note']}" if several else r["gpu"]["note"]
        for r in found
        if r["gpu"]["note"]
    ]
    keys = {None if r["gpu"]["gpu"] is None else r["gpu"]["gpu"]["key"] for r in found}
    if len(keys) > 1:
        notes.append(
            f"the ranks' GPUs differ ({', '.join(sorted(str(k) for k in keys))}): each row is "
            f"measured against its rank's, the groups against rank {found[0]['rank']}'s"
        )
    return "; ".join(dict.fromkeys(notes)) or None


def ops(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    rules: Rules = "exact",
    gpu: str | None = None,
    threads: int | None = None,
) -> OpsReport:
    """The instance rows of trace files (``.json`` or gzip, one rank each) or directories of
    them, rank by rank and operators in file order, each against its trace's GPU roofline,
    and their groups over every rank, ranked by the time they could save.

    Args:
        paths: a trace file or directory, or several.
        rules: ``"exact"`` (default) or ``"tracelens"`` (TraceLens's figures, quirks
            included).
        gpu: the GPU of the roofline (a key of the peaks table such as ``"h100-sxm"``, a
            device name, or a family such as ``"h100"``); default: each trace's
            ``deviceProperties`` entry of the device its operators' kernels ran on.
        threads: files read at once (default: the CPUs available).

    Raises:
        kinetrace.TraceFormatError: a file is not a valid trace.
        ValueError: ``rules`` or ``gpu`` is unknown, two files claim one rank, or a
            directory holds no trace.
        OSError: a file cannot be read.
        KeyboardInterrupt: Ctrl-C.
    """
    if rules not in ("exact", "tracelens"):
        raise ValueError(f"rules must be 'exact' or 'tracelens', not {rules!r}")
    if gpu is not None and known_gpu(gpu) is None:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(gpu_keys())}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = trace_files(paths, tool="ops")
    workers = available_cpus() if threads is None else threads
    require_in_range("threads", workers, 1, 1024)
    start = time.perf_counter()
    found = _kinetrace.ops(files, rules, workers, gpu)
    ranks = found["ranks"]
    choice = ranks[0]["gpu"]
    return OpsReport(
        sources=tuple(r["source"] for r in ranks),
        ranks=tuple(r["rank"] for r in ranks),
        rules=rules,
        gpu=None if choice["gpu"] is None else GpuPeaks(**choice["gpu"]),
        gpu_from=choice["how"],
        device_name=choice["device_name"],
        note=_note(ranks),
        seconds=time.perf_counter() - start,
        rows=found["rows"],
        groups=[OpGroup(**g) for g in found["groups"]],
        coverage=found["coverage"],
    )
