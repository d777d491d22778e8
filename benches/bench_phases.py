"""Where the time of one export goes, per phase and per process.

    python benches/bench_phases.py                       # 50k steps, workers 1 and 2, 3 rounds
    taskset -c 0 python benches/bench_phases.py --workers 1,2   # the same on one core

Each round exports a fresh profile of the ``shapes`` workload (``record_shapes=True``) once
per worker count, each recorded just before its export, the order alternating between
rounds. The phases are timed from outside the package: the functions of
``kinetrace._export.extract`` / ``kinetrace._export.workers`` each phase runs, and the
native exporter's blocking calls, are wrapped by timers before the export (forked workers
inherit the wrappers) and every process appends its timings to one file. The table gives,
per process and phase, the median over rounds of its wall time, of its main thread's CPU
time, and when it ended (seconds since the call); ``other threads`` is the CPU time of the
process's other threads (the writer formatting and writing, the gzip threads) during the
call, ``process cpu`` a worker's whole CPU time.

Phases: ``trace_activities()``; ``fork`` (the parent's ``os.fork`` calls); in a worker,
``start`` (fork to its first instruction); ``first pass``; the base-time exchange (the
parent's wait for the workers' summaries, a worker's wait for the base); ``header``
(time base, header queued); ``second pass`` (reading, and waiting for room in the writer's
queue); ``splice`` (the parent queueing worker outputs); ``reap`` (waiting for a worker that has
reported to be gone); ``finish`` (waiting for the writer
thread: formatting, copying the slices, the tail, rename); ``free`` (the activity list
freed, after the export returns: every exporter built on ``trace_activities()`` pays it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any, ClassVar

import benchlib

from kinetrace import _bench, _kinetrace
from kinetrace._export import export as _export
from kinetrace._export import extract as _extract
from kinetrace._export import workers as _workers

_LOG: list[str] = []  # the file every process appends to


def _record(label: str, w0: float, w1: float, cpu: float) -> None:
    line = json.dumps([os.getpid(), label, w0, w1, cpu]) + "\n"
    fd = os.open(_LOG[0], os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _timed(label: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(label, w0, time.perf_counter(), time.thread_time() - c0)

    return wrapper


class _TimedExporter:
    """The native exporter with its blocking calls timed."""

    _TIMED: ClassVar[dict[str, str]] = {"wait": "finish", "append_slice": "splice"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._inner = _NATIVE(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        label = self._TIMED.get(name)
        return _timed(label, attr) if label else attr


_NATIVE = _kinetrace._Exporter


class _TimedResult:
    def __init__(self, result: Any) -> None:
        self._result = result

    def trace_activities(self) -> Any:
        return _timed("trace_activities()", self._result.trace_activities)()

    def trace_start_ns(self) -> Any:
        return self._result.trace_start_ns()


def install() -> None:
    """Wraps the phases (idempotent)."""
    if getattr(install, "done", False):
        return
    install.done = True  # type: ignore[attr-defined]
    _kinetrace._Exporter = _TimedExporter  # type: ignore[misc]
    for module in (_extract, _workers):
        for name, label in (("first_pass", "first pass"), ("second_pass", "second pass")):
            if hasattr(module, name):
                setattr(module, name, _timed(label, getattr(module, name)))
    _extract.end_first_pass = _timed("header", _extract.end_first_pass)
    _export.end_first_pass = _extract.end_first_pass
    real_receive = _workers._Worker.receive

    def receive(self: Any, expected: str) -> Any:
        label = "exchange" if expected == "summary" else "wait workers"
        return _timed(label, real_receive)(self, expected)

    _workers._Worker.receive = receive  # type: ignore[method-assign]
    _workers._Worker.reap = _timed("reap", _workers._Worker.reap)  # type: ignore[method-assign]
    real_receive_fd = _workers._receive
    parent = os.getpid()

    def receive_fd(fd: int) -> Any:  # a worker's wait for the base
        if os.getpid() == parent:
            return real_receive_fd(fd)
        return _timed("exchange", real_receive_fd)(fd)

    _workers._receive = receive_fd
    real_main = _workers._worker_main

    def worker_main(*args: Any, **kwargs: Any) -> Any:
        now = time.perf_counter()
        _record("start", _FORKED_AT[0], now, 0.0)
        return real_main(*args, **kwargs)

    _workers._worker_main = worker_main
    real_fork = _workers._fork

    def fork() -> int:
        _FORKED_AT[0] = w0 = time.perf_counter()
        c0 = time.thread_time()
        pid = real_fork()
        if pid:
            _record("fork", w0, time.perf_counter(), time.thread_time() - c0)
        return pid

    _workers._fork = fork
    real_exit = os._exit

    def exit_(code: int) -> None:
        times = os.times()
        _record("process cpu", 0.0, time.perf_counter(), times.user + times.system)
        real_exit(code)

    os._exit = exit_  # type: ignore[assignment]


_FORKED_AT = [0.0]


def run_once(result: Any, path: str, workers: int | None) -> list[list[Any]]:
    """One timed export; its records (pid, label, start, end, cpu), times relative to the call."""
    fd, log = tempfile.mkstemp(prefix="kinetrace-phases-")
    os.close(fd)
    _LOG[:] = [log]
    gc.collect()
    t0 = time.perf_counter()
    c0, m0 = os.times(), time.thread_time()
    _export.export_chrome_trace(_TimedResult(result), path, workers=workers)
    t1 = time.perf_counter()
    c1, m1 = os.times(), time.thread_time()
    # Freeing the list: timed on a list of the same result (the export's own is freed inside).
    acts = result.trace_activities()
    f0 = time.perf_counter()
    del acts
    f1 = time.perf_counter()
    _record("free (separately)", f0, f1, f1 - f0)
    process_cpu = (c1.user + c1.system) - (c0.user + c0.system)
    _record("whole call", t0, t1, m1 - m0)
    _record("other threads", t0, t1, process_cpu - (m1 - m0))
    records = []
    with open(log) as f:
        for line in f:
            pid, label, w0, w1, cpu = json.loads(line)
            records.append([pid, label, w0 - t0, w1 - t0, cpu])
    os.remove(log)
    return records


def run_stock(prof: Any, path: str) -> list[list[Any]]:
    """torch's own export of a fresh profile, for scale: its wall and CPU time."""
    gc.collect()
    t0, c0 = time.perf_counter(), os.times()
    prof.export_chrome_trace(path)
    t1, c1 = time.perf_counter(), os.times()
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    return [[os.getpid(), "whole call", 0.0, t1 - t0, cpu]]


def summarize(runs: list[list[list[Any]]]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per process role (parent, worker 1, ...) and phase: medians of (wall, cpu, end)."""
    per: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for records in runs:
        parent = records[-1][0]
        workers = sorted({r[0] for r in records if r[0] != parent})
        role = {parent: "parent", **{p: f"worker {i + 1}" for i, p in enumerate(workers)}}
        sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for pid, label, w0, w1, cpu in records:
            key = (role[pid], label)
            s = sums[key]
            s[0] += w1 - w0 if label not in ("process cpu", "other threads") else 0.0
            s[1] += cpu
            s[2] = max(s[2], w1)
        for key, (wall, cpu, end) in sums.items():
            per[key].append((wall, cpu, end))
    out: dict[str, dict[str, tuple[float, float, float]]] = defaultdict(dict)
    for (role, label), values in per.items():
        out[role][label] = tuple(statistics.median(v[i] for v in values) for i in range(3))  # type: ignore[assignment]
    return out


def reading_span(records: list[list[Any]]) -> float:
    """Wall seconds from the first first-pass start to the last second-pass end, over every
    process of one export: the reading, however many read."""
    starts = [w0 for _, label, w0, _, _ in records if label == "first pass"]
    ends = [w1 for _, label, _, w1, _ in records if label == "second pass"]
    return max(ends) - min(starts)


def whole(records: list[list[Any]]) -> float:
    return next(w1 - w0 for _, label, w0, w1, _ in records if label == "whole call")


def phase(records: list[list[Any]], label: str) -> float:
    """The parent's wall seconds in ``label`` (0 when absent)."""
    parent = records[-1][0]
    return sum(w1 - w0 for pid, lab, w0, w1, _ in records if lab == label and pid == parent)


def model(serial: float, fork: float, read: float, contention: float, n: int) -> float:
    """Seconds of an export with ``n`` processes: the parent forks its workers one after the
    other (``fork`` each) and then reads its first pass; the second passes start together
    after the base-time exchange; every process reads an equal share of ``read`` (the
    one-process reading), slowed by ``contention``. ``serial`` is everything outside the
    reading (``trace_activities()``, freeing the list, the header, the file's end)."""
    if n == 1:
        return serial + read
    return serial + (n - 1) * fork + read * (1 + contention) / n


def model_reading_efficiency(fork: float, read: float, contention: float, n: int) -> float:
    """The reading's efficiency by the same model: its span runs from the first worker's
    start (after one fork) to the end of the second passes."""
    if n == 1:
        return 1.0
    return read / (n * ((n - 2) * fork + read * (1 + contention) / n))


def efficiency_report(runs: dict[Any, list[list[list[Any]]]]) -> list[str]:
    """Parallel efficiency measured (``T1 / (N * TN)``, of the whole export and of its
    reading), and the model's extrapolation to 8 and 16 processes (each with a core for its
    reader and the contention measured here, where readers and writers share two cores)."""
    counts = sorted(k for k in runs if isinstance(k, int))
    if 1 not in counts or len(counts) < 2:
        return []
    med = statistics.median
    t1 = med(whole(r) for r in runs[1])
    read1 = med(reading_span(r) for r in runs[1])
    serial = med(whole(r) - reading_span(r) for r in runs[1])
    lines = ["", "parallel efficiency T1 / (N * TN), medians:"]
    contention, fork = 0.0, 0.0
    for n in counts[1:]:
        tn = med(whole(r) for r in runs[n])
        readn = med(reading_span(r) for r in runs[n])
        fork = med(phase(r, "fork") / (n - 1) for r in runs[n])
        contention = (readn - (n - 2) * fork) * n / read1 - 1
        lines.append(
            f"  N={n}: whole export {t1:.3f} s -> {tn:.3f} s: {t1 / (n * tn):.0%}; "
            f"reading {read1:.3f} s -> {readn:.3f} s: {read1 / (n * readn):.0%}"
        )
    lines.append(
        f"model: T(N) = serial + (N-1) fork + read (1 + c) / N, measured serial {serial:.3f} s, "
        f"fork {fork:.3f} s, read {read1:.3f} s, c {contention:.2f} (at N={counts[-1]}):"
    )
    for n in (1, 2, 4, 8, 16):
        t = model(serial, fork, read1, contention, n)
        e_read = model_reading_efficiency(fork, read1, contention, n)
        lines.append(
            f"  N={n:>2}: {t:.3f} s, whole export {t1 / (n * t):.0%}, reading {e_read:.0%}"
        )
    return lines


ORDER = [
    "whole call",
    "other threads",
    "trace_activities()",
    "fork",
    "start",
    "first pass",
    "exchange",
    "header",
    "second pass",
    "wait workers",
    "splice",
    "reap",
    "finish",
    "process cpu",
    "free (separately)",
]


def format_table(title: str, summary: dict[str, dict[str, tuple[float, float, float]]]) -> str:
    lines = [title, f"{'process':<9} {'phase':<20} {'wall s':>8} {'cpu s':>8} {'ends at':>8}"]
    for role in sorted(summary, key=lambda r: (r != "parent", r)):
        for label in ORDER:
            if label in summary[role]:
                wall, cpu, end = summary[role][label]
                lines.append(f"{role:<9} {label:<20} {wall:8.3f} {cpu:8.3f} {end:8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--format", default="json")
    parser.add_argument("--json", default=None, help="write the summaries here")
    parser.add_argument(
        "--stock", action="store_true", help="also time torch's own export (for scale)"
    )
    args = parser.parse_args(argv)
    install()
    free_before = benchlib.free_cores()
    counts: list[int | str] = [int(w) for w in args.workers.split(",")]
    if args.stock:
        counts.append("stock")
    runs: dict[int | str, list[list[list[Any]]]] = defaultdict(list)
    n = 0
    with tempfile.TemporaryDirectory(prefix="kinetrace-phases-") as out:
        for r in range(args.rounds):
            order = counts if r % 2 == 0 else counts[::-1]
            for w in order:
                # A fresh profile per export: torch's first trace_activities() on a result
                # costs about three times what a later one does.
                prof = _bench.record_workload(args.iterations)
                result = prof.profiler.kineto_results
                path = os.path.join(out, f"t.w{w}.{args.format}")
                if w == "stock":
                    runs[w].append(run_stock(prof, path))
                else:
                    runs[w].append(run_once(result, path, int(w)))
                    n = len(result.trace_activities())
                print(f"round {r + 1} workers={w} done", file=sys.stderr)
                del prof, result
                gc.collect()
    cpus = len(os.sched_getaffinity(0))
    load = os.getloadavg()
    free = benchlib.free_cores()
    payload = {}
    for w in counts:
        summary = summarize(runs[w])
        payload[w] = summary
        name = "stock torch" if w == "stock" else f"workers={w}"
        title = (
            f"\n{n} activities, .{args.format}, {name}, {cpus} core(s), "
            f"median of {args.rounds} rounds; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
            f"{free_before:.1f} / {free:.1f} cores free before / after"
        )
        print(format_table(title, summary))
    print("\n".join(efficiency_report(runs)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "activities": n,
                    "cpus": cpus,
                    "load": load,
                    "free_cores": [free_before, free],
                    "runs": payload,
                    "raw": runs,
                },
                f,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
