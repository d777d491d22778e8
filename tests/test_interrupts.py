"""Ctrl-C at every stage of an export: ``KeyboardInterrupt`` reaches the caller within
``support.interrupts.latency_bound()`` of the signal (a fraction of a second, stretched on a
loaded machine), no temporary file is left, an existing file at the destination is
untouched, no kinetrace thread or worker process outlives the export, and the next export
works. Covers both passes, waits for the writer and for a worker, a background handle, the
gzip writer on a stalled file object (its ``write``, ``flush`` and ``close``), a stalled
FIFO, and interrupts that land inside gc and weakref callbacks. Sources are
``support.synthetic.SyntheticResult`` (lazy).
"""

from __future__ import annotations

import gc
import gzip
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from support.aftermath import (
    OLD,
    all_children,
    assert_no_kinetrace_threads,
    assert_untouched,
    subprocess_env,
)
from support.interrupts import Sigint, StageWatcher, assert_prompt, latency_bound, load_stretch
from support.measure import warm_up
from support.probes import BATCH, probed
from support.synthetic import SyntheticResult

#: Long enough to take several seconds, built lazily so the test does not pay for it.
LONG = 2_000_000


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """The first export of a process imports torch (device properties): do it up front so
    that timings measure the export."""
    warm_up()


@pytest.fixture
def sigint() -> Iterator[Sigint]:
    with Sigint().installed() as state:
        yield state


_children_before_test: set[int] = set()


@pytest.fixture(autouse=True)
def _record_children() -> Iterator[None]:
    global _children_before_test
    _children_before_test = set(all_children())
    yield


def child_processes() -> list[int]:
    """Children this process gained during the current test (forked workers not reaped
    would show here, zombies too). Children that earlier tests left running, such as the
    resource tracker torch.multiprocessing starts, are not counted."""
    return sorted(set(all_children()) - _children_before_test)


def assert_interrupted(directory: Path, latency: float, expected: dict[str, bytes]) -> None:
    """The interrupt came promptly and left nothing behind: ``directory`` as it was, no
    kinetrace thread, no child process."""
    assert_prompt(latency)
    assert_untouched(directory, expected)
    assert_no_kinetrace_threads()
    assert child_processes() == []


@pytest.mark.parametrize("workers", [1, None], ids=["one-process", "default-workers"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_ctrl_c_during_long_export(tmp_path, sigint, suffix, workers):
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(OLD)
    sigint.after(0.5)
    latency = sigint.expect(
        lambda: kinetrace.export_chrome_trace(SyntheticResult(LONG), path, workers=workers)
    )
    assert_interrupted(tmp_path, latency, {path.name: OLD})
    # Nothing is left in a bad state: the next export works.
    stats = kinetrace.export_chrome_trace(SyntheticResult(1000), path)
    assert path.stat().st_size == stats.file_bytes


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_ctrl_c_while_waiting_for_a_worker(tmp_path, sigint, suffix):
    """SIGINT while the parent is blocked waiting on a worker's pipe (its summary): the
    workers are killed and reaped, their slice files removed, long before the worker would
    have answered (its first pass takes ~10 s)."""
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(OLD)
    parent = os.getpid()

    def slow_worker(pass_number: int, start: int) -> None:
        # The worker reads slowly, so the parent surely waits on the pipe for it.
        if os.getpid() != parent:
            time.sleep(0.6)

    result = probed(SyntheticResult(300_000), on_slice=slow_worker)
    watcher = StageWatcher(".poll(", sigint.fire, module="_export/workers.py")
    sigint.armed = True
    watcher.start()
    try:
        latency = sigint.expect(lambda: kinetrace.export_chrome_trace(result, path, workers=2))
    finally:
        watcher.stop.set()
        watcher.join()
    assert watcher.seen
    assert_interrupted(tmp_path, latency, {path.name: OLD})


def test_ctrl_c_inside_a_weakref_callback_is_not_lost(sigint):
    """The same inside a weakref callback the collector runs: the exception is swallowed
    there ("Exception ignored"); the tests' handler is re-armed and the signal sent again."""
    fired = []

    class Node:
        pass

    def on_collected(ref: Any) -> None:
        if not fired:
            fired.append(True)
            sigint.fire()
            for _ in range(10_000):  # the handler runs here, inside the callback
                pass

    def collect_then_wait() -> None:
        node = Node()
        node.cycle = node  # type: ignore[attr-defined]
        ref = weakref.ref(node, on_collected)
        del node
        gc.collect()  # the signal comes inside its weakref callback
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.001)
        del ref

    latency = sigint.expect(collect_then_wait)
    assert fired
    assert_prompt(latency)


def test_ctrl_c_inside_a_gc_callback_is_not_lost(sigint):
    """A signal whose handler would run inside a gc callback (hypothesis registers one):
    the exception raised there would be "ignored" by the collector and the interrupt lost;
    the tests' handler sends it again once the callback returned."""
    inside = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and not inside:
            sigint.fire()
            for _ in range(10_000):  # the handler runs here, inside the callback
                pass
            inside.append(sigint.armed)

    def collect_then_wait() -> None:
        gc.collect()  # the signal comes inside it; collecting again and again would keep
        deadline = time.monotonic() + 30  # the retries inside collections too
        while time.monotonic() < deadline:
            time.sleep(0.001)

    started = time.perf_counter()
    gc.collect()
    collecting = time.perf_counter() - started  # the signal is sent again once it is over
    gc.callbacks.append(callback)
    try:
        latency = sigint.expect(collect_then_wait)
    finally:
        gc.callbacks.remove(callback)
    assert inside == [True], "the signal was not handled inside the callback"
    allowed = latency_bound() + 2 * collecting * load_stretch()
    assert latency < allowed, f"{latency:.3f} s > {allowed:.3f} s (collecting: {collecting:.3f} s)"


@pytest.mark.parametrize(
    "suffix, stage",
    [
        (".json", (1, 3 * BATCH)),  # first pass, fourth batch
        (".json", (2, 0)),  # second pass, first batch
        (".json", (2, 2 * BATCH)),  # second pass, third batch (two are written)
        (".json.gz", (1, 0)),
        (".json.gz", (2, 3 * BATCH)),
    ],
    ids=["json-first-pass", "json-second-pass-start", "json-second-pass", "gz-first", "gz-second"],
)
def test_ctrl_c_at_each_pass(tmp_path, sigint, suffix, stage):
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(OLD)

    def on_slice(pass_number: int, start: int) -> None:
        if (pass_number, start) == stage:
            sigint.fire()

    result = probed(SyntheticResult(200_000), on_slice=on_slice)
    # One process: the stages are those of the single-process pipeline.
    latency = sigint.expect(lambda: kinetrace.export_chrome_trace(result, path, workers=1))
    assert_interrupted(tmp_path, latency, {path.name: OLD})


def slow_writer_source(n: int = 40_000, payload: int = 1_000) -> SyntheticResult:
    """A source the writer is slower at than the extraction (incompressible payloads, at
    gzip level 9 on one thread): the caller ends up waiting for the writer. A batch of
    ``BATCH_SIZE`` activities is ``payload`` x ``BATCH_SIZE`` bytes of JSON."""
    return SyntheticResult(n, payload=payload)


def interrupt_in(stage: str, sigint: Sigint, path: Path, source: SyntheticResult) -> float:
    """Exports ``source`` to ``path`` (gzip level 9, one thread) and sends SIGINT once the
    caller is in the native call on the line containing ``stage`` (of ``_export/export.py`` for
    ``.wait(``, of ``_export/extract.py``, where the passes run, otherwise)."""
    watcher = StageWatcher(
        stage, sigint.fire, "_export/export.py" if stage == ".wait(" else "_export/extract.py"
    )
    sigint.armed = True
    watcher.start()
    try:
        return sigint.expect(
            lambda: kinetrace.export_chrome_trace(
                source, path, compresslevel=9, threads=1, workers=1
            )
        )
    finally:
        watcher.stop.set()
        watcher.join()
        assert watcher.seen, f"the export never reached {stage!r}"


@pytest.mark.parametrize("stage", ["read_batch(", ".wait("])
def test_ctrl_c_while_waiting_for_the_writer(tmp_path, sigint, stage):
    """SIGINT while the caller is blocked in Rust: the queue is full (``read_batch``) or
    the file is being finished (``wait``)."""
    path = tmp_path / "trace.json.gz"
    path.write_bytes(OLD)
    latency = interrupt_in(stage, sigint, path, slow_writer_source())
    assert_interrupted(tmp_path, latency, {path.name: OLD})


@pytest.mark.parametrize("stage", ["read_batch(", ".close("])
def test_ctrl_c_latency_with_big_batches(tmp_path, sigint, stage):
    path = tmp_path / "trace.json.gz"
    path.write_bytes(OLD)
    latency = interrupt_in(stage, sigint, path, slow_writer_source(n=20_000, payload=8_000))
    assert_interrupted(tmp_path, latency, {path.name: OLD})


def test_ctrl_c_while_waiting_for_a_background_export(tmp_path, sigint):
    path = tmp_path / "trace.json.gz"
    path.write_bytes(OLD)
    handle = kinetrace.export_chrome_trace(
        slow_writer_source(n=30_000), path, compresslevel=9, threads=1, background=True, workers=1
    )
    try:
        assert not handle.done(), "the writer finished before the test could interrupt it"
        sigint.after(0.3)
        latency = sigint.expect(lambda: handle.result(timeout=60))
        assert_prompt(latency)
        # Whatever the handle does next, the export must have stopped: give a still-running
        # writer the time it needs to finish, then look.
        deadline = time.monotonic() + 30
        while not handle.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert_untouched(tmp_path, {path.name: OLD})
    finally:
        try:
            kinetrace.wait(timeout=60)
        except BaseException:  # the handle's outcome; reported here so no later test sees it
            pass


class StalledFile:
    """A binary file object whose ``write`` blocks until ``release`` is set (at most
    ``limit`` seconds): a consumer that stopped reading."""

    def __init__(self, limit: float) -> None:
        self.release = threading.Event()
        self.limit = limit
        self.calls = 0

    def write(self, data: bytes) -> int:
        self.calls += 1
        self.release.wait(self.limit)
        return len(data)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize(
    "write_time",
    [0.05, 1.0],
    ids=["slow-file", "stalled-file"],
)
def test_ctrl_c_while_gzip_writer_blocks_on_a_slow_file(tmp_path, sigint, write_time):
    """The caller's ``write`` blocks while every block waits for the file object: Ctrl-C
    must still interrupt it (and ``abort`` leaves the file object alone)."""
    target = StalledFile(limit=write_time)
    writer = kinetrace.GzipWriter(target, threads=1)
    chunk = os.urandom(1 << 20)
    sigint.after(0.5)

    def write_forever() -> None:
        for _ in range(1000):
            writer.write(chunk)

    try:
        latency = sigint.expect(write_forever)
    finally:
        target.release.set()
        writer.abort()
    calls = target.calls
    assert_prompt(latency)
    assert_no_kinetrace_threads()
    time.sleep(0.1)
    assert target.calls == calls, "the file object is still written after abort()"


@pytest.mark.parametrize("then", ["close", "abort"])
@pytest.mark.parametrize("call", ["flush", "close"])
def test_ctrl_c_while_gzip_writer_waits_for_a_stalled_pipe(sigint, call, then):
    """``flush`` / ``close`` wait for the writer thread, which is stuck writing into a pipe
    nobody reads: Ctrl-C must interrupt the wait and leave the writer open, so that once
    the pipe is read ``close`` finishes the member, or once it is closed ``abort`` discards."""
    read_fd, write_fd = os.pipe()
    pipe = open(write_fd, "wb", buffering=0)
    payload = os.urandom(1 << 20)  # incompressible: far more than the pipe holds
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(read_fd, 1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    # Should the wait ignore Ctrl-C, reading the pipe ends it: the test fails, not hangs.
    rescue = threading.Timer(30, reader.start)
    try:
        writer = kinetrace.GzipWriter(pipe, compresslevel=1, threads=1)
        writer.write(payload)  # buffered: nothing reaches the pipe yet
        sigint.after(0.3)
        rescue.start()
        try:
            latency = sigint.expect(getattr(writer, call))
        finally:
            rescue.cancel()
        assert_prompt(latency)
        assert not writer.closed
        if then == "close":
            reader.start()
            writer.close()
            pipe.close()
            reader.join(timeout=30)
            assert not reader.is_alive()
            assert writer.closed and writer.bytes_in == len(payload)
            assert gzip.decompress(bytes(received)) == payload
        else:
            os.close(read_fd)  # the writer thread's write fails (broken pipe)
            read_fd = -1
            writer.abort()
            assert writer.closed
        assert_no_kinetrace_threads()
    finally:
        if read_fd >= 0:
            os.close(read_fd)
        pipe.close()


FIFO_SCRIPT = textwrap.dedent(
    """
    import array, fcntl, os, signal, sys, termios, threading, time
    import kinetrace
    from support.measure import warm_up
    from support.synthetic import SyntheticResult

    path, mode = sys.argv[1], sys.argv[2]
    warm_up()
    if mode == "stalled-reader":
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opened, never read
    sent = []

    def pipe_full():
        count = array.array("i", [0])
        fcntl.ioctl(reader, termios.FIONREAD, count)
        return count[0] >= 32768  # about full (a 64 KiB pipe packs whole pages)

    def fire():
        if mode == "stalled-reader":  # wait until the writer thread is blocked on the pipe
            deadline = time.monotonic() + 30
            while not pipe_full() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
        else:  # open() is blocked waiting for a reader
            time.sleep(0.5)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(20.0)  # a watchdog: still here 20 s later means Ctrl-C was ignored
        print("hung", flush=True)
        os._exit(0)

    threading.Thread(target=fire, daemon=True).start()
    try:
        kinetrace.export_chrome_trace(SyntheticResult(200_000), path)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic() - sent[0]:.3f}", flush=True)
    else:
        print("finished", flush=True)
    """
)


@pytest.mark.parametrize("mode", ["no-reader", "stalled-reader"])
def test_ctrl_c_exporting_to_a_stalled_fifo(tmp_path, mode):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [sys.executable, "-c", FIFO_SCRIPT, str(fifo), mode],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    assert out.startswith("interrupted"), f"the export ignored Ctrl-C: {out}{err}"
    assert_prompt(float(out.split()[1]))
