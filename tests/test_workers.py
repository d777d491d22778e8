"""Forked extraction (``workers=``): failures in workers, interrupts, cleanup, fallbacks.

Byte identity for every worker count is checked by ``support.oracle.compare``, which every
fidelity test goes through.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time

import pytest

import kinetrace
from kinetrace._export import workers as _workers
from support import T0
from support.aftermath import temp_files
from support.fakes import PID, FakeActivity, FakeResult
from support.interrupts import interrupt_handler, latency_bound, resend_lost_interrupts

pytestmark = pytest.mark.skipif(not _workers.can_fork(), reason="needs os.fork")

PARENT = os.getpid()


class InWorker(FakeActivity):
    """An activity whose ``name()`` runs ``action`` when read in a forked worker."""

    def __init__(self, action, **kwargs):
        super().__init__(**kwargs)
        self.action = action

    def name(self):
        if os.getpid() != PARENT:
            self.action()
        return super().name()


def _activities(n: int, special_at: int | None = None, action=None) -> list[FakeActivity]:
    acts: list[FakeActivity] = []
    for i in range(n):
        kwargs = {"timestamp": T0 + 1000 * i, "correlation_id": i + 1, "name": f"op{i}"}
        if i == special_at:
            acts.append(InWorker(action, **kwargs))
        else:
            acts.append(FakeActivity(**kwargs))
    return acts


@pytest.fixture
def forked(monkeypatch):
    """The pids of the workers forked during the test."""
    pids: list[int] = []
    real_fork = _workers._fork

    def recording_fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(_workers, "_fork", recording_fork)
    return pids


def _all_reaped(pids: list[int]) -> bool:
    """True when every pid was reaped (no worker left running or as a zombie)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return bool(pids)


@pytest.fixture
def existing(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b"previous trace")
    return path


def _raise_value_error():
    raise ValueError("bad activity in a worker")


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_worker_exception_is_raised_in_the_caller(tmp_path, suffix, forked):
    path = tmp_path / f"t{suffix}"
    path.write_bytes(b"previous trace")
    result = FakeResult(_activities(400, special_at=350, action=_raise_value_error))
    with pytest.raises(ValueError, match="bad activity in a worker"):
        kinetrace.export_chrome_trace(result, path, workers=2)
    assert path.read_bytes() == b"previous trace"
    assert temp_files(tmp_path) == []
    assert _all_reaped(forked)


def _kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def _exit_3():
    os._exit(3)


@pytest.mark.parametrize(
    ("action", "message"),
    [(_kill_self, "killed by signal 9"), (_exit_3, "exited with status 3")],
)
def test_worker_that_dies(existing, action, message, forked):
    """A worker that dies raises ``kinetrace.WorkerError``: the public name, a RuntimeError."""
    assert issubclass(kinetrace.WorkerError, RuntimeError)
    result = FakeResult(_activities(400, special_at=399, action=action))
    with pytest.raises(kinetrace.WorkerError, match=message):
        kinetrace.export_chrome_trace(result, existing, workers=2)
    assert existing.read_bytes() == b"previous trace"
    assert temp_files(existing.parent) == []
    assert _all_reaped(forked)


def test_ctrl_c_stops_every_worker(existing, forked):
    # Slow workers: every read in a worker sleeps, so the export runs for ~8 s.
    result = FakeResult(_activities(3000, special_at=None))
    for act in result.activities[1000:]:
        act.__class__ = InWorker
        act.action = lambda: time.sleep(0.004)
    sent = []
    # Python's default handler, except that it never raises inside a gc callback.
    previous = signal.signal(signal.SIGINT, interrupt_handler())

    def interrupt():
        sent.append(time.monotonic())
        os.kill(PARENT, signal.SIGINT)

    timer = threading.Timer(0.5, interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt), resend_lost_interrupts():
            kinetrace.export_chrome_trace(result, existing, workers=3)
        stopped = time.monotonic()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert sent, "the export finished before the interrupt"
    assert stopped - sent[0] < latency_bound()
    assert existing.read_bytes() == b"previous trace"
    assert temp_files(existing.parent) == []
    assert _all_reaped(forked)


def test_workers_argument_is_checked(tmp_path):
    result = FakeResult(_activities(10))
    with pytest.raises(ValueError, match="workers"):
        kinetrace.export_chrome_trace(result, tmp_path / "t.json", workers=0)
    with pytest.raises(TypeError, match="workers"):
        kinetrace.export_chrome_trace(result, tmp_path / "t.json", workers="2")


def test_no_fork_falls_back_with_a_warning(tmp_path, monkeypatch):
    result = FakeResult(_activities(50))
    kinetrace.export_chrome_trace(result, tmp_path / "a.json", workers=1, base_time_ns=0)
    monkeypatch.setattr(_workers, "can_fork", lambda: False)
    with pytest.warns(RuntimeWarning, match="needs os.fork"):
        kinetrace.export_chrome_trace(result, tmp_path / "b.json", workers=2, base_time_ns=0)
    a = (tmp_path / "a.json").read_bytes()
    b = (tmp_path / "b.json").read_bytes()
    assert a.replace(b"a.json", b"b.json") == b


@pytest.mark.parametrize("cpus", [1, 2, 4, 16, 64])
def test_default_workers_stay_within_the_memory_budget(monkeypatch, cpus):
    monkeypatch.setattr(_workers, "idle_cpus", lambda: cpus)
    for n in [0, 10, 99_999, 100_000, 150_000, 200_000, 300_000, 10**6, 10**7, 10**8]:
        workers = _workers.default_workers(n)
        assert 1 <= workers <= max(1, min(cpus // 2, _workers.MAX_DEFAULT_WORKERS))
        # Each fork must pay: it costs the parent about the time of reading
        # FORK_COST_ACTIVITIES activities.
        assert (workers - 1) * _workers.FORK_COST_ACTIVITIES <= n / workers
        budget = _workers.memory_budget(n, workers)
        assert _workers.memory_estimate(n, workers) <= budget, n
    # torch's activities are read without copying them: big traces get every pair of idle
    # cores (a reader and its writer) too.
    assert _workers.default_workers(10**7) == max(1, min(cpus // 2, _workers.MAX_DEFAULT_WORKERS))
    assert _workers.default_workers(300_000) == max(1, min(cpus // 2, 3))
    assert _workers.default_workers(40_000) == 1


def test_activities_read_through_python_code_use_one_process(monkeypatch):
    """Look-alikes whose accessors are Python code would be copied by every worker that
    reads them (their reference counts are written): the default keeps them in one process."""
    monkeypatch.setattr(_workers, "idle_cpus", lambda: 16)
    assert _workers.default_workers(10**6, direct=False) == 1
    assert _workers.default_workers(10**6, direct=True) > 1


def test_busy_cores_get_no_worker(monkeypatch):
    """Forking onto a core that other work keeps busy only adds the fork's own work; a
    process wants two idle cores (its reader and its writer): one process on two."""
    monkeypatch.setattr(_workers, "available_cpus", lambda: 16)
    for idle, processes in [(1, 1), (2, 1), (3, 1), (4, 2), (6, 3)]:
        monkeypatch.setattr(_workers, "idle_cpus", lambda idle=idle: idle)
        assert _workers.default_workers(10**6) == processes


def test_idle_cpus_counts_what_others_keep_busy(monkeypatch):
    assert 1 <= _workers.idle_cpus() <= _workers.available_cpus()
    monkeypatch.setattr(_workers, "available_cpus", lambda: 4)
    assert 1 <= _workers.idle_cpus() <= 4


def test_the_budget_with_workers():
    """64 MiB + 32 B/activity for one process, 64 MiB + 64 B/activity with workers."""
    assert _workers.memory_budget(10**6) == (64 << 20) + 32 * 10**6
    assert _workers.memory_budget(10**6, 4) == (64 << 20) + 64 * 10**6


def test_default_workers_scale_with_size(monkeypatch):
    monkeypatch.setattr(_workers, "idle_cpus", lambda: 64)
    counts = [_workers.default_workers(n) for n in (10, 70_000, 100_000, 300_000, 2 * 10**6)]
    assert counts == [1, 2, 2, 3, 7]  # 2M: eight by time, seven by memory
    assert _workers.default_workers(10**8) == _workers.MAX_DEFAULT_WORKERS


def test_slices_cover_the_activities():
    for n in [0, 1, 3, 50, 300_000, 2 * 10**6]:
        for workers in [1, 2, 3, 8, 16]:
            bounds = _workers.slice_bounds(n, workers)
            assert len(bounds) == workers + 1 and bounds[0] == 0 and bounds[-1] == n
            sizes = [b - a for a, b in itertools.pairwise(bounds)]
            assert max(sizes) - min(sizes) <= 1


def test_more_workers_than_activities(tmp_path):
    result = FakeResult(_activities(3))
    one = kinetrace.export_chrome_trace(result, tmp_path / "t.json", workers=1, base_time_ns=0)
    text = (tmp_path / "t.json").read_bytes()
    many = kinetrace.export_chrome_trace(result, tmp_path / "t.json", workers=8, base_time_ns=0)
    assert (tmp_path / "t.json").read_bytes() == text
    assert many.events == one.events


def test_empty_trace_with_workers(tmp_path):
    result = FakeResult([], trace_start_ns=T0)
    stats = kinetrace.export_chrome_trace(result, tmp_path / "t.json", workers=4)
    assert stats.events == 1


def test_background_export_with_workers(tmp_path):
    result = FakeResult(_activities(500))
    kinetrace.export_chrome_trace(result, tmp_path / "a.json", workers=1, base_time_ns=0)
    handle = kinetrace.export_chrome_trace(
        result, tmp_path / "b.json", workers=2, base_time_ns=0, background=True
    )
    handle.result()
    a = (tmp_path / "a.json").read_bytes()
    assert a.replace(b"a.json", b"b.json") == (tmp_path / "b.json").read_bytes()
    assert temp_files(tmp_path) == []


def test_device_ids_are_labelled_by_the_parent_pid(tmp_path):
    # Workers format events for the parent's pid: "CPU" rows must not depend on the process.
    acts = [FakeActivity(timestamp=T0 + i, device_id=PID, resource_id=PID) for i in range(100)]
    result = FakeResult(acts)
    kinetrace.export_chrome_trace(result, tmp_path / "t.json", workers=3)
    text = (tmp_path / "t.json").read_text()
    assert '"labels":"CPU"' in text


def test_a_ctrl_c_while_reaping_still_reaps_the_worker():
    """A second Ctrl-C that lands while a failed export waits for a killed worker: the wait
    goes on (no zombie left), then the interrupt is raised."""
    pid = os.fork()
    if pid == 0:  # the "worker": ends only when killed, 0.9 s after the interrupt
        time.sleep(60)
        os._exit(0)
    worker = _workers._Worker(0, pid, -1, -1, None, (0, 0))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timers = [
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)),
        threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)),
    ]
    for timer in timers:
        timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.reap()
    finally:
        for timer in timers:
            timer.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        signal.signal(signal.SIGINT, previous)
    assert worker.reaped
    assert _all_reaped([pid])
