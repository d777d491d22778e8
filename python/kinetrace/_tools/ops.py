"""``ops``: the work each CPU operator's GPU time did (FLOPs and bytes from the shapes the
trace records) and that GPU time, one row per operator instance (issue 39; no command line
yet).

Two rule sets (``docs/ops.md`` states both): ``"exact"`` (the default: each tensor's own
dtype, a causal mask of any shape as its triangle, each operator once at the outermost
modelled one) and ``"tracelens"`` (AMD's TraceLens figures, commit 171dd74, quirks
included: the rows of its per-family tables). The reading is the native module's: one
streaming pass, the GIL released.
"""

from __future__ import annotations

import os
from typing import Literal, TypedDict

from kinetrace import _kinetrace

__all__ = ["OpRow", "ops"]

Rules = Literal["exact", "tracelens"]


class OpRow(TypedDict):
    """One operator instance of a family table.

    ``uid`` is the index of the operator's event in ``traceEvents``; ``table`` its family
    (``"GEMM"``, ``"UnaryElementwise"``, ``"BinaryElementwise"``, ``"Normalization"``,
    ``"Reduce"``, ``"CONV"``, ``"SDPA"``, ``"RMSNorm"``, ``"InferenceAttention"``,
    ``"RoPE"``; under ``exact``, ``"unmodelled"`` for an operator no model covers that
    launched GPU work itself, ``flops`` and ``bytes`` ``None``, timed by that work); ``bwd``
    a backward row (the forward operator's shapes, the GPU time of the
    backward frames linked to it by sequence number); ``bytes`` is ``None`` where a dtype's
    size is unknown; ``kernel_time_us`` the busy time (union of intervals) of
    ``kernel_uids``, the GPU activities under it (their ``traceEvents`` indices), as
    TraceLens computes it (floats at the trace's absolute times, ~1e-4 µs off);
    ``kernel_time_ns`` the same busy time exact, from the trace's decimal text."""

    uid: int
    name: str
    table: str
    bwd: bool
    flops: float | None
    bytes: float | None
    kernel_time_us: float
    kernel_time_ns: int
    kernel_uids: list[int]


def ops(path: str | os.PathLike[str], *, rules: Rules = "exact") -> list[OpRow]:
    """The instance rows of one trace file (``.json`` or gzip), operators in file order.

    Args:
        path: a trace file.
        rules: ``"exact"`` (default) or ``"tracelens"`` (TraceLens's figures, quirks
            included).

    Raises:
        kinetrace.TraceFormatError: the file is not a valid trace.
        ValueError: ``rules`` is unknown.
        OSError: the file cannot be read.
        KeyboardInterrupt: Ctrl-C.
    """
    if rules not in ("exact", "tracelens"):
        raise ValueError(f"rules must be 'exact' or 'tracelens', not {rules!r}")
    rows: list[OpRow] = [OpRow(**r) for r in _kinetrace.ops(os.fspath(path), rules)]
    return rows
