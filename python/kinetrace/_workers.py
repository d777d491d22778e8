"""Forked extraction: several processes read and format contiguous slices of the activities.

Reading an activity goes through torch's pybind11 accessors with the GIL held, so one
process reads at one core's speed whatever the threads. Forked processes each read their
own slice in parallel. The activity list is built once, before the fork, and inherited.

The parent works on slice 0 and forks one worker per other slice. Protocol, per worker:
1. the worker runs the first pass on its slice and sends its partial summary;
2. the parent merges the summaries in slice order (so the first timestamp per device and
   thread is the trace's first), picks the time base, sends it to every worker and writes
   the header and process/thread events;
3. each worker formats its slice into its output file (plain text, or a raw deflate stream
   for gzip) and reports its counts;
4. the parent writes its own slice, then splices each worker's output in order, then the
   closing events. The trace text is byte-identical to the single-process export.

A worker's output has no name anyone else could use: the parent creates it before the fork
as an anonymous file in the destination's directory (``O_TMPFILE``, or where that is not
supported a ``0600`` file created with ``O_CREAT|O_EXCL|O_NOFOLLOW`` under a random name and
unlinked at once), and the worker writes through the descriptor it inherits. Before
splicing, the parent checks that the descriptor is still that file (device and inode) and
holds as many bytes as the worker reported.

Workers touch nothing but the activity accessors and kinetrace's own code (device
properties and metadata are read by the parent), never return into the caller's code
(they leave with ``os._exit``), and are killed and reaped when the export fails or is
interrupted, so no partial file and no zombie is left.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kinetrace import _kinetrace
from kinetrace._env import available_cpus
from kinetrace._extract import Getters, first_pass, second_pass, trace_pid

__all__ = [
    "MIN_ACTIVITIES_PER_WORKER",
    "can_fork",
    "default_workers",
    "export_forked",
    "memory_budget",
    "memory_estimate",
]

#: Below this many activities per worker a fork costs more than it saves.
MIN_ACTIVITIES_PER_WORKER = 50_000
#: Default cap on workers: past it, the list build and the merge dominate.
MAX_DEFAULT_WORKERS = 8

# Peak memory of an export beyond what trace_activities() itself holds (proportional set
# size of every process), as measured with 500k and 200k listed activities (README,
# "Workers and memory"), rounded up:
#: one process: buffers, queued batches, and the first pass (32 bytes an activity) ...
_ONE_PROCESS_FIXED = 12 << 20
_ONE_PROCESS_PER_ACTIVITY = 40
#: ... and with workers, the copy-on-write copies of the activity objects (each object is
#: written, its reference count, by whichever process reads it while all share it) ...
_SHARED_COPY_PER_ACTIVITY = 160
#: ... and each worker's own pipeline, buffers and interpreter pages.
_PER_WORKER = 16 << 20

_LENGTH = struct.Struct("<Q")


def can_fork() -> bool:
    """Whether forked extraction is possible here (POSIX with ``os.fork``)."""
    return hasattr(os, "fork") and sys.platform != "win32"


def memory_budget(activities: int) -> int:
    """The documented peak-memory budget of an export, beyond what ``trace_activities()``
    holds: 64 MiB plus 32 bytes an activity."""
    return (64 << 20) + 32 * activities


def memory_estimate(activities: int, workers: int) -> int:
    """Peak memory (all processes) an export of ``activities`` with ``workers`` processes
    takes beyond ``trace_activities()``, from the measured model above."""
    estimate = _ONE_PROCESS_FIXED + _ONE_PROCESS_PER_ACTIVITY * activities
    if workers > 1:
        estimate += _SHARED_COPY_PER_ACTIVITY * activities + _PER_WORKER * (workers - 1)
    return estimate


def default_workers(activities: int) -> int:
    """Workers used when the caller does not say: one per two cores available (each
    process keeps one core reading and one formatting and compressing), at most
    :data:`MAX_DEFAULT_WORKERS`, one per :data:`MIN_ACTIVITIES_PER_WORKER` activities,
    and no more than keep the whole export within :func:`memory_budget`.

    Workers copy the activity objects they read (copy-on-write, ~150 bytes an activity in
    all) and each has its own pipeline (~14 MiB): far more than the budget's 32 bytes an
    activity. So the default forks only for traces of ~100k-200k activities, where the
    fixed part of the budget pays for it; bigger traces are exported by one process (or by
    as many workers as the caller asks for, at that memory cost). On 2 cores it is one
    process: measured there, a second process gains ~5% on plain ``.json`` and loses on
    ``.json.gz`` (the compression threads lose their core).
    """
    if not can_fork():
        return 1
    by_size = activities // MIN_ACTIVITIES_PER_WORKER
    workers = max(1, min(available_cpus() // 2, MAX_DEFAULT_WORKERS, by_size))
    budget = memory_budget(activities)
    while workers > 1 and memory_estimate(activities, workers) > budget:
        workers -= 1
    return workers


class WorkerError(RuntimeError):
    """A forked process of an export (a ``workers=`` worker, or the ``background=True``
    child) died, or failed without an exception that could be carried back to the caller.
    Public as ``kinetrace.WorkerError``."""


def _fork() -> int:
    with warnings.catch_warnings():
        # Python warns that forking a multi-threaded process may deadlock the child: a lock
        # held by another thread at fork time stays locked there. The child here takes no
        # such lock: it only calls torch's activity accessors (reads of inherited memory,
        # under the GIL it inherits from this thread), pickles small tuples, and runs
        # kinetrace's Rust code, which starts its own fresh threads; it does not import,
        # touch CUDA, or run atexit handlers, and it leaves with os._exit.
        warnings.filterwarnings(
            "ignore",
            message=r".*use of fork\(\) may lead to deadlocks",
            category=DeprecationWarning,
        )
        return os.fork()


def _send(fd: int, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_LENGTH.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


def _wait_readable(fd: int) -> None:
    """Blocks until ``fd`` has data (or its writer closed it), in short slices.

    A plain blocking ``os.read`` misses a SIGINT that arrives just before the call enters
    the kernel (the signal's handler is then only run once the read returns: when the
    worker next writes, up to seconds later). Between slices Python runs pending signal
    handlers, so Ctrl-C is seen within one slice."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while not poller.poll(_kinetrace.POLL_INTERVAL_MS):
        pass


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        _wait_readable(fd)
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int) -> Any:
    head = _read_exact(fd, _LENGTH.size)
    if head is None:
        raise EOFError
    payload = _read_exact(fd, _LENGTH.unpack(head)[0])
    if payload is None:
        raise EOFError
    return pickle.loads(payload)


@dataclass
class _Worker:
    index: int
    pid: int
    to_worker: int
    from_worker: int
    output: Any  # the anonymous file (an open binary file object)
    identity: tuple[int, int]  # its device and inode
    reaped: bool = False

    def receive(self, expected: str) -> tuple[Any, ...]:
        try:
            message = _receive(self.from_worker)
        except EOFError:
            raise WorkerError(f"export worker {self.index} {self._fate()}") from None
        if message[0] == "error":
            kind, error, remote = message[1:]
            if kind == "exception":
                if hasattr(error, "add_note"):
                    error.add_note(f"raised in export worker {self.index}:\n{remote}")
                raise error
            raise WorkerError(f"export worker {self.index} failed: {error}\n{remote}")
        if message[0] != expected:
            raise WorkerError(f"export worker {self.index} sent {message[0]!r}")
        return tuple(message[1:])

    def _fate(self) -> str:
        status = self.reap()
        if status is None:
            return "closed its pipe"
        if os.WIFSIGNALED(status):
            return f"(pid {self.pid}) was killed by signal {os.WTERMSIG(status)}"
        return f"(pid {self.pid}) exited with status {os.waitstatus_to_exitcode(status)}"

    def kill(self) -> None:
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def reap(self) -> int | None:
        if self.reaped:
            return None
        _, status = os.waitpid(self.pid, 0)
        self.reaped = True
        return status

    def close_pipes(self) -> None:
        for fd in (self.to_worker, self.from_worker):
            with contextlib.suppress(OSError):
                os.close(fd)


def _carried_error(exc: BaseException) -> Any:
    """What the parent gets for a worker's exception: the exception itself when it survives
    pickling (so callers can catch the type they expect), else its type, message and
    traceback as text. The worker's traceback travels as text either way."""
    import traceback

    remote = "".join(traceback.format_exception(exc))
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if type(copy) is type(exc):
            return ("exception", exc, remote)
    except Exception:
        pass
    return ("text", f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}", remote)


def _worker_main(
    activities: Sequence[Any],
    span: range,
    get: Getters,
    output: int,
    destination: str,
    level: int | None,
    threads: int,
    host_pid: int,
    from_parent: int,
    to_parent: int,
    graphs: Any = None,
) -> NoReturn:
    """Runs in the forked child; never returns (not even by an exception)."""
    code = 1
    exporter = None
    try:
        # Ctrl-C goes to the whole process group: let it end the worker at once (the parent
        # sees the death and cleans up). SIGINT was blocked around the fork; unblock it only
        # now that it no longer raises here.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        exporter = _kinetrace._Exporter(destination, level, threads, False, output)
        if graphs is not None:
            exporter.set_graph_annotations(*graphs.native(False))
        first_pass(exporter, activities, get, span)
        _send(to_parent, ("summary", exporter.partial_summary()))
        (base,) = _receive(from_parent)
        exporter.start(base, host_pid, "[]", [], [])
        second_pass(exporter, activities, get, None, span)
        exporter.close("")
        events, text_len, file_len, crc = exporter.wait(None)
        # The CUDA-graph state (held-back events, lanes) goes to the parent, which merges
        # it in slice order.
        _send(to_parent, ("done", events, text_len, file_len, crc, exporter.graph_state()))
        code = 0
    except BaseException as exc:
        if exporter is not None:
            with contextlib.suppress(BaseException):
                exporter.abort()  # stops its threads; os._exit runs no destructor
        with contextlib.suppress(BaseException):
            _send(to_parent, ("error", *_carried_error(exc)))
    finally:
        os._exit(code)


def _anonymous_file(directory: str, name: str) -> Any:
    """A new file in ``directory`` that no name leads to (see the module docs)."""
    try:
        return tempfile.TemporaryFile(prefix=f".{name}.", suffix=".kinetrace-tmp", dir=directory)
    except OSError as exc:
        raise type(exc)(
            exc.errno, f"cannot create a worker output for {name} in {directory}: {exc.strerror}"
        ) from exc


def export_forked(
    exporter: Any,
    activities: list[Any],
    get: Getters,
    workers: int,
    output_path: str,
    level: int | None,
    threads: int,
    end_first_pass: Any,
    bar: Any = None,
    graphs: Any = None,
) -> list[str]:
    """Both passes with ``workers`` processes (this one included).
    ``end_first_pass(exporter)`` ends the first pass (time base, header) and returns the
    base. Returns the worker outputs: pass them to :func:`remove_outputs` once the exporter
    has finished."""
    n = len(activities)
    bounds = [n * i // workers for i in range(workers + 1)]
    pid_in_trace = trace_pid()  # here, not in the worker (whose pid differs)
    directory = os.path.dirname(os.path.abspath(output_path))
    name = os.path.basename(output_path)
    per_process_threads = max(1, threads // workers)
    started: list[_Worker] = []
    outputs: list[Any] = []
    frozen = _freeze_heap()
    try:
        for i in range(1, workers):
            output = _anonymous_file(directory, name)
            outputs.append(output)
            info = os.fstat(output.fileno())
            identity = (info.st_dev, info.st_ino)
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            # No Ctrl-C between fork and the worker's own handler: a KeyboardInterrupt
            # raised in the child before its try block would unwind into the caller's code.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            pid = -1
            try:
                pid = _fork()
                if pid == 0:  # the worker: _worker_main leaves only through os._exit
                    gc.disable()  # see _freeze_heap
                    try:
                        os.close(parent_r)
                        os.close(parent_w)
                        _worker_main(
                            activities,
                            range(bounds[i], bounds[i + 1]),
                            get,
                            output.fileno(),
                            output_path,
                            level,
                            per_process_threads,
                            pid_in_trace,
                            child_r,
                            child_w,
                            graphs,
                        )
                    finally:
                        os._exit(1)
            finally:
                if pid != 0:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            os.close(child_r)
            os.close(child_w)
            started.append(_Worker(i, pid, parent_w, parent_r, output, identity))

        own = range(bounds[0], bounds[1])
        first_pass(exporter, activities, get, own)
        for worker in started:
            (partial,) = worker.receive("summary")
            exporter.merge_partial(partial)
        base = end_first_pass(exporter)
        for worker in started:
            _send(worker.to_worker, (base,))
        second_pass(exporter, activities, get, bar, own)
        for worker in started:
            events, text_len, file_len, crc, graph_state = worker.receive("done")
            exporter.append_slice(
                output_path,
                worker.output.fileno(),
                worker.identity,
                events,
                text_len,
                file_len,
                crc,
                graph_state,
            )
            if bar is not None:
                bar.advance(bounds[worker.index + 1] - bounds[worker.index])
        for worker in started:
            worker.reap()
    except BaseException:
        for worker in started:
            worker.kill()
        for worker in started:
            with contextlib.suppress(ChildProcessError):
                worker.reap()
        remove_outputs(outputs)
        raise
    finally:
        for worker in started:
            worker.close_pipes()
            with contextlib.suppress(ChildProcessError):
                worker.reap()
        if frozen:
            gc.unfreeze()
    return outputs


def _freeze_heap() -> bool:
    """Keeps the garbage collector off the objects that exist at the fork, while workers
    share them copy-on-write. A collection walks every tracked object and writes to its
    header: in a worker, or in this process while workers live, it would copy nearly every
    page of the heap (~200 bytes per activity per process, measured). Workers do not
    collect at all; this process collects only objects made after the fork until the
    export ends. Returns whether it froze (not when the caller froze objects itself: their
    ``gc.unfreeze`` is theirs to call)."""
    if gc.get_freeze_count():
        return False
    gc.freeze()
    return True


def remove_outputs(outputs: list[Any]) -> None:
    """Discards the worker outputs (closing an anonymous file frees it), whatever state the
    export ended in."""
    for output in outputs:
        with contextlib.suppress(OSError):
            output.close()
