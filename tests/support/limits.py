"""Limits kinetrace documents but torch sets, measured on real profiles: how long Ctrl-C waits
while torch's ``trace_activities()`` holds the GIL, and the private memory of a background
export's child process (it builds its own activity list). ``tests/test_limits.py`` checks them
against the documented figures; ``benches/bench_limits.py`` measures the documented tables.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from support.measure import proc_kib

__all__ = [
    "Interrupted",
    "background_child_private_peak",
    "profile_activities",
    "sigint_during_trace_activities",
    "trace_activities_seconds",
]


def profile_activities(n: int, *, record_shapes: bool = True) -> Any:
    """A stopped real CPU profile of ``n`` ``aten::add`` calls on 8x8 tensors: ``n``
    activities (about 3 KB of profiler memory each)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(8, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
        for _ in range(n):
            torch.add(x, x)
    return prof


def trace_activities_seconds(prof: Any, rounds: int = 3) -> tuple[int, float]:
    """(activities, median seconds of one ``trace_activities()`` call)."""
    result = prof.profiler.kineto_results
    times = []
    count = 0
    for _ in range(rounds):
        started = time.perf_counter()
        activities = result.trace_activities()
        times.append(time.perf_counter() - started)
        count = len(activities)
        del activities
    return count, statistics.median(times)


# The helper that sends SIGINT: a separate small process, started before the export, told
# when to send (a CLOCK_MONOTONIC time, which all processes share on Linux) and answering
# when it did. Neither a thread (torch's call holds the GIL) nor a fork of the profiling
# process (its copy-on-write faults would slow the call measured) can do it.
_SENDER = """
import os, signal, sys, time
pid = int(sys.argv[1])
at = float(sys.stdin.readline())
time.sleep(max(0.0, at - time.monotonic()))
sent = time.monotonic()
os.kill(pid, signal.SIGINT)
print(repr(sent), flush=True)
"""


class _Proxy:
    """The profile's ``_ProfilerResult``, whose ``trace_activities()`` has the helper
    process send SIGINT ``delay`` seconds after the call starts, and records when the
    call ended."""

    def __init__(self, inner: Any, delay: float) -> None:
        self._inner = inner
        self._delay = delay
        self.sender = subprocess.Popen(
            [sys.executable, "-c", _SENDER, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.call_started = 0.0
        self.call_ended: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def trace_activities(self) -> Any:
        self.call_started = time.monotonic()
        assert self.sender.stdin is not None
        self.sender.stdin.write(f"{self.call_started + self._delay!r}\n")
        self.sender.stdin.flush()
        try:
            return self._inner.trace_activities()
        finally:
            self.call_ended = time.monotonic()

    def sent(self) -> float:
        """When the helper sent SIGINT (waits for it)."""
        out, _ = self.sender.communicate(timeout=60)
        return float(out)


@dataclass(frozen=True)
class Interrupted:
    """One export interrupted during ``trace_activities()``."""

    #: Seconds from SIGINT to the KeyboardInterrupt reaching the caller.
    latency: float
    #: Seconds the interrupted ``trace_activities()`` call ran (whole).
    call_seconds: float
    #: Seconds from the end of that call to the KeyboardInterrupt reaching the caller.
    after_call: float
    #: Seconds from SIGINT to the end of the call.
    in_call: float


def sigint_during_trace_activities(prof: Any, path: str, delay: float) -> Interrupted:
    """Exports ``prof`` to ``path`` with SIGINT sent ``delay`` seconds into torch's
    ``trace_activities()`` (Python's default handler in place): how long the interrupt
    took, and where the time went."""
    import kinetrace

    proxy = _Proxy(prof.profiler.kineto_results, delay)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            kinetrace.export_chrome_trace(proxy, path, workers=1)
        except KeyboardInterrupt:
            caught = time.monotonic()
        else:
            raise AssertionError("the export finished without being interrupted")
    finally:
        signal.signal(signal.SIGINT, previous)
    sent = proxy.sent()
    assert proxy.call_ended is not None, "interrupted before trace_activities() returned?"
    return Interrupted(
        latency=caught - sent,
        call_seconds=proxy.call_ended - proxy.call_started,
        after_call=caught - proxy.call_ended,
        in_call=proxy.call_ended - sent,
    )


def _private_kib(pid: int) -> int | None:
    return proc_kib(pid, "smaps_rollup", "Private_Clean", "Private_Dirty")


def background_child_private_peak(prof: Any, path: str, interval: float = 0.02) -> int:
    """Exports ``prof`` to ``path`` with ``background=True`` (one process) and returns the
    peak private memory (``Private_Clean + Private_Dirty``, bytes) of the child process that
    writes it, sampled every ``interval`` seconds: what it allocates itself (its activity
    list, the first pass, batches, buffers) plus the pages copied on write."""
    import kinetrace

    handle = kinetrace.export_chrome_trace(prof, path, background=True, workers=1)
    job = handle._exporter
    peak = 0
    while not handle.done():
        pid = job.pid
        if pid is not None:
            with contextlib.suppress(Exception):
                peak = max(peak, _private_kib(pid) or 0)
        time.sleep(interval)
    handle.result()
    return peak * 1024
