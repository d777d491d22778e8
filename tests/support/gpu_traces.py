"""Small GPU traces written by the tests (no GPU needed): steps that each launch the same
kernels and a memcpy, with a chosen kernel longer, one added, more bytes copied, or a kernel
renamed, and the jitter a real GPU shows (kernel durations within ~0.2%, CPU steps within
~20%), each run with its own seed (``kinetrace diff``'s GPU verdict and counts)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

#: µs: where each step starts, its kernels' nominal durations.
STEP_EVERY = 2000
KERNELS = {"k_a": 300.0, "k_b": 500.0}
MEMCPY = "Memcpy HtoD (Pageable -> Device)"


def gpu_run(
    path: Path,
    *,
    steps: int = 20,
    seed: int = 0,
    longer: dict[str, float] | None = None,
    extra: str | None = None,
    htod_bytes: int = 4096,
    names: dict[str, str] | None = None,
    mm: tuple[int, int, int] | None = None,
) -> Path:
    """A one-rank trace at ``path``: ``steps`` ``ProfilerStep#N`` slices, each launching
    ``k_a``, ``k_b`` (durations times ``longer[name]`` where given; renamed to
    ``names[name]`` where given), a memcpy of ``htod_bytes`` host to device, and ``extra``
    (a 50 µs kernel) where given, every launch linked to its activity by correlation; with
    ``mm`` (M, K, N), ``k_a``'s launch inside an ``aten::mm`` of an M x K and a K x N float
    matrix (2 x M x K x N FLOPs)."""
    rng = random.Random(seed)
    longer = longer or {}
    names = names or {}
    events: list[dict[str, Any]] = []
    correlation = 0

    def launch(ts: float, call: str, cat: str, name: str, start: float, dur: float) -> None:
        nonlocal correlation
        correlation += 1
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 1, "tid": 1, "ts": ts,
             "dur": 4, "args": {"correlation": correlation}}
        )  # fmt: skip
        args: dict[str, Any] = {"stream": 7, "correlation": correlation, "device": 0}
        if cat == "gpu_memcpy":
            args["bytes"] = htod_bytes
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": start,
             "dur": dur, "args": args}
        )  # fmt: skip

    for i in range(steps):
        t = i * STEP_EVERY
        cpu = 1000 * (1 + 0.2 * rng.random())
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
             "ts": t, "dur": round(cpu, 3)}
        )  # fmt: skip
        if mm:
            m, k, n = mm
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                 "ts": t + 5, "dur": 12,
                 "args": {"Input Dims": [[m, k], [k, n]], "Input type": ["float", "float"]}}
            )  # fmt: skip
        start = t + 100.0
        for k, (name, dur) in enumerate(KERNELS.items()):
            took = round(dur * longer.get(name, 1.0) * (1 + 0.002 * rng.random()), 3)
            launch(
                t + 10 + 10 * k, "cudaLaunchKernel", "kernel", names.get(name, name), start, took
            )
            start += took + 20
        launch(t + 40, "cudaMemcpyAsync", "gpu_memcpy", MEMCPY, start, 20.0)
        if extra:
            launch(t + 50, "cudaLaunchKernel", "kernel", extra, start + 40, 50.0)
    path.write_text(json.dumps({"traceEvents": events}))
    return path
