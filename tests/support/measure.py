"""Measuring an export: its wall time and the peak memory it adds (this process and its forked
workers), against the budget kinetrace documents (64 MiB + 32 bytes an activity).

Linux only (``/proc``): elsewhere the readers return None and the growth reads 0.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

__all__ = [
    "ExitSnapshot",
    "PeakRss",
    "export_measured",
    "memory_budget",
    "proc_kib",
    "warm_up",
]


def proc_kib(pid: int | str, file: str, *fields: str) -> int | None:
    """The sum of ``fields`` in ``/proc/PID/FILE`` (``status``: ``VmRSS``, ``VmHWM``, ...;
    ``smaps_rollup``: ``Pss``, ``Private_Dirty``, ...), in KiB; None where the file cannot be
    read or holds none of them."""
    wanted = {field.encode() for field in fields}
    total: int | None = None
    try:
        with open(f"/proc/{pid}/{file}", "rb") as f:
            for line in f:
                name, _, rest = line.partition(b":")
                if name in wanted:
                    total = (total or 0) + int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def _status_kib(field: str, pid: int | str = "self") -> int | None:
    """A ``VmXXX`` field of /proc/PID/status, in KiB."""
    return proc_kib(pid, "status", field)


def _pss_kib(pid: int | str = "self") -> int | None:
    """Proportional set size of a process (shared pages split among their users), KiB."""
    return proc_kib(pid, "smaps_rollup", "Pss")


def _children() -> list[int]:
    """This process's child processes (kinetrace's forked workers)."""
    pids: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not a zombie: an exited child not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _reset_hwm() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class PeakRss:
    """Peak memory over a block, relative to when it is entered.

    ``growth``: this process's resident memory: VmRSS sampled from a thread every
    ``interval`` seconds and, where the kernel allows resetting it, VmHWM (exact).

    ``total_growth``: the same plus forked child processes (kinetrace's ``workers``): while
    children exist, the sum of every process's PSS (shared copy-on-write pages counted
    once) is sampled every ``pss_interval`` seconds (reading PSS costs milliseconds).
    """

    def __init__(self, interval: float = 0.01, pss_interval: float = 0.05) -> None:
        self.interval = interval
        self.pss_interval = pss_interval
        self.baseline = 0
        self.peak_sampled = 0
        self.peak_hwm: int | None = None
        self.pss_baseline = 0
        self.peak_total = 0
        self.samples = 0
        self.max_children = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hwm_reset = False

    def _sample(self) -> None:
        last_pss = 0.0
        while not self._stop.wait(self.interval):
            rss = _status_kib("VmRSS")
            if rss is None:
                continue
            self.samples += 1
            self.peak_sampled = max(self.peak_sampled, rss * 1024)
            now = time.monotonic()
            children = _children()
            if children and now - last_pss >= self.pss_interval:
                last_pss = now
                self.max_children = max(self.max_children, len(children))
                total = sum(_pss_kib(p) or 0 for p in ["self", *children]) * 1024
                # A process that exits while the others are read moves its share of the
                # pages they share onto them, read before or after: such a sum can count a
                # page more than once. Only a sum over the same live processes counts.
                if _children() == children and all(_alive(p) for p in children):
                    self.peak_total = max(self.peak_total, total - self.pss_baseline)
            elif not children:
                # Alone: this process's growth (RSS and PSS grow alike).
                self.peak_total = max(self.peak_total, rss * 1024 - self.baseline)

    def __enter__(self) -> PeakRss:
        self._hwm_reset = _reset_hwm()
        self.pss_baseline = (_pss_kib() or 0) * 1024
        self.baseline = (_status_kib("VmRSS") or 0) * 1024
        self.peak_sampled = self.baseline
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        rss = _status_kib("VmRSS")
        if rss is not None:
            self.peak_sampled = max(self.peak_sampled, rss * 1024)
        if self._hwm_reset:
            hwm = _status_kib("VmHWM")
            self.peak_hwm = None if hwm is None else hwm * 1024

    @property
    def growth(self) -> int:
        peak = max(self.peak_sampled, self.peak_hwm or 0)
        return max(0, peak - self.baseline)

    @property
    def total_growth(self) -> int:
        return max(self.growth, self.peak_total)


class ExitSnapshot:
    """The memory of a forked export at its fullest, read deterministically.

    Sampling misses peaks: a sampler thread waits for the GIL, which the reading holds for a
    batch at a time, and one read of ``smaps_rollup`` takes tens of milliseconds on a busy
    machine. Instead, while this is entered, every ``workers=`` worker is held at its exit
    (done, its buffers and every page it copied still held) until this process has read the
    proportional set size of itself and of each worker; then all go on. ``total`` is that
    sum (bytes), or None if no worker was forked; ``workers`` their private dirty pages.
    Each wait is bounded (30 s), so a broken export is never held up for long.
    """

    TIMEOUT = 30.0

    def __init__(self) -> None:
        self.total: int | None = None
        self.workers: list[int] = []
        self._pids: list[int] = []
        self._undo: list[Any] = []

    def __enter__(self) -> ExitSnapshot:
        from kinetrace._export import workers as _workers

        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        self._pipes = (ready_r, ready_w, go_r, go_w)
        real_fork, real_main = _workers._fork, _workers._worker_main
        real_reap = _workers._Worker.reap
        snapshot = self

        def fork() -> int:
            pid = real_fork()
            if pid:
                snapshot._pids.append(pid)
            return pid

        def worker_main(*args: Any, **kwargs: Any) -> Any:
            real_exit = os._exit

            def held_exit(code: int) -> None:
                if code == 0:
                    os.write(ready_w, b"r")
                    _wait_readable(go_r, ExitSnapshot.TIMEOUT)
                real_exit(code)

            os._exit = held_exit  # type: ignore[assignment]  # this worker only
            return real_main(*args, **kwargs)

        def reap(worker: Any) -> Any:
            if snapshot.total is None and snapshot._pids:
                snapshot._take()
            return real_reap(worker)

        _workers._fork = fork
        _workers._worker_main = worker_main
        _workers._Worker.reap = reap  # type: ignore[method-assign]
        self._undo = [
            (_workers, "_fork", real_fork),
            (_workers, "_worker_main", real_main),
            (_workers._Worker, "reap", real_reap),
        ]
        return self

    def _take(self) -> None:
        ready_r, _, _, go_w = self._pipes
        deadline = time.monotonic() + self.TIMEOUT
        arrived = 0
        while arrived < len(self._pids) and time.monotonic() < deadline:
            if _wait_readable(ready_r, deadline - time.monotonic()):
                arrived += len(os.read(ready_r, 64))
        if arrived == len(self._pids):
            pss = [_pss_kib("self") or 0] + [_pss_kib(p) or 0 for p in self._pids]
            self.total = sum(pss) * 1024
            self.workers = [
                (proc_kib(p, "smaps_rollup", "Private_Dirty") or 0) * 1024 for p in self._pids
            ]
        os.write(go_w, b"g" * len(self._pids))

    def __exit__(self, *exc: object) -> None:
        for owner, name, value in self._undo:
            setattr(owner, name, value)
        for fd in self._pipes:
            os.close(fd)


def _wait_readable(fd: int, timeout: float) -> bool:
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(max(0, int(timeout * 1000))))


def memory_budget(n: int, processes: int = 1) -> int:
    """The documented peak-memory budget of an export of ``n`` activities (every process,
    beyond what ``trace_activities()`` holds): 64 MiB + 32 bytes each for one process,
    64 MiB + 64 bytes each with workers."""
    return 64 * 2**20 + (32 if processes <= 1 else 64) * n


def warm_up() -> None:
    """Imports what the first export of a process imports (torch, for the device
    properties), so that a measurement counts the export and not the import."""
    try:
        import torch

        torch.cuda.is_available()
    except ImportError:
        pass


def export_measured(
    result: Any, path: str, *, warm: bool = True, n: int | None = None, **kwargs: Any
) -> dict[str, Any]:
    """Exports ``result`` to ``path``, measuring wall time and peak RSS growth (the baseline
    is taken right before ``export_chrome_trace``, after the source is built). ``n``: the
    activities (default ``len(result)``)."""
    import kinetrace

    if warm:
        warm_up()
    with PeakRss() as rss, ExitSnapshot() as snapshot:
        started = time.perf_counter()
        stats = kinetrace.export_chrome_trace(result, path, **kwargs)
        seconds = time.perf_counter() - started
    n = len(result) if n is None else n
    at_exit = None if snapshot.total is None else max(0, snapshot.total - rss.pss_baseline)
    return {
        "n": n,
        "path": stats.path,
        "events": stats.events,
        "uncompressed_bytes": stats.uncompressed_bytes,
        "file_bytes": stats.file_bytes,
        "seconds": seconds,
        "rss_baseline": rss.baseline,
        "rss_growth": rss.growth,
        "rss_growth_sampled": max(0, rss.peak_sampled - rss.baseline),
        "rss_growth_hwm": None if rss.peak_hwm is None else max(0, rss.peak_hwm - rss.baseline),
        "rss_samples": rss.samples,
        "total_growth": max(rss.total_growth, at_exit or 0),
        "total_growth_sampled": rss.total_growth,
        "total_growth_at_exit": at_exit,
        "worker_private": snapshot.workers,
        "workers_seen": max(rss.max_children, len(snapshot.workers)),
        "budget": memory_budget(n, 1 + max(rss.max_children, len(snapshot.workers))),
    }
