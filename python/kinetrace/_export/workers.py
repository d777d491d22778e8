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
import math
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kinetrace import _kinetrace
from kinetrace._env import available_cpus
from kinetrace._export.extract import Getters, first_pass, second_pass, trace_pid

__all__ = [
    "FORK_COST_ACTIVITIES",
    "can_fork",
    "default_workers",
    "export_forked",
    "memory_budget",
    "memory_estimate",
]

#: A fork costs the parent about the time it takes to read this many activities (~50 ms
#: for a process of ~1.2 GB, reading ~1.7 us an activity; ARCHITECTURE.md, "Where the time
#: goes"). The parent forks its workers one after the other, so N processes take about
#: ``(N - 1) * fork + read / N``: fastest at ``N = sqrt(activities / FORK_COST_ACTIVITIES)``.
FORK_COST_ACTIVITIES = 30_000
#: Default cap on processes.
MAX_DEFAULT_WORKERS = 16
#: Idle cores the default wants for each process: one reads (torch's accessors, under its
#: GIL), the other runs its writer thread (formatting, the strict check, ``write``; ~30% of
#: the reading). Where two processes and their writers share two cores, a second process
#: made the export slower, not faster: measured on a quiet 2-core machine (medians of 7
#: rounds, 300k/350k activities), 0.823 s against 0.752 s with one, 0.565 s against 0.502 s.
CORES_PER_PROCESS = 2

# Peak memory of an export beyond what trace_activities() itself holds (the proportional
# set size of every process, at its fullest), measured with torch profiles of 100k, 500k
# and 2M activities (benches/bench_memory.py; docs/benchmarks.md, "Workers and memory")
# and rounded up:
#: one process: buffers and batches in flight ...
_ONE_PROCESS_FIXED = 24 << 20
#: ... and the first pass (32 bytes an activity, split between the processes that read).
_PER_ACTIVITY = 32
#: Each worker: its own pipeline (batches in flight, buffers), the interpreter pages it
#: writes, and the parent's pages it keeps shared while the parent writes its own copy
#: (~6-7 MiB measured; the first pass it keeps is counted per activity above) ...
_PER_WORKER = 12 << 20
#: ... and, with workers, ~10 bytes an activity more (seen at 2M activities).
_WORKERS_PER_ACTIVITY = 10
#: Activities whose accessors are Python code (look-alikes, not torch's): every object is
#: written (its reference count) by whichever process reads it while all share it, so the
#: pages holding them are copied, in all about this much per activity (~150 measured).
_SHARED_COPY_PER_ACTIVITY = 200

_LENGTH = struct.Struct("<Q")


def can_fork() -> bool:
    """Whether forked extraction is possible here (POSIX with ``os.fork``)."""
    return hasattr(os, "fork") and sys.platform != "win32"


def memory_budget(activities: int, workers: int = 1) -> int:
    """The documented peak-memory budget of an export (every process), beyond what
    ``trace_activities()`` holds: 64 MiB plus 32 bytes an activity for one process, 64 MiB
    plus 64 bytes an activity with workers."""
    per_activity = 32 if workers <= 1 else 64
    return (64 << 20) + per_activity * activities


def memory_estimate(activities: int, workers: int, direct: bool = True) -> int:
    """Peak memory (every process) an export of ``activities`` with ``workers`` processes
    takes beyond ``trace_activities()``, from the measured model above. ``direct``: the
    accessors are read without writing the activities (torch's: see ``_Accessors``)."""
    estimate = _ONE_PROCESS_FIXED + _PER_ACTIVITY * activities
    if workers > 1:
        estimate += _PER_WORKER * (workers - 1) + _WORKERS_PER_ACTIVITY * activities
        if not direct:
            estimate += _SHARED_COPY_PER_ACTIVITY * activities
    return estimate


def idle_cpus() -> int:
    """The cores this process may use (``available_cpus``) less those other tasks keep busy
    right now: ``procs_running`` in ``/proc/stat`` counts every task running or ready to run,
    this one included; the fewest of three looks a millisecond apart (a task that is only
    passing by does not count). Where there is no ``/proc``, every core counts as idle."""
    cpus = available_cpus()
    busy: int | None = None
    for look in range(3):
        if look:
            time.sleep(0.001)
        try:
            with open("/proc/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"procs_running "):
                        running = int(line.split()[1]) - 1  # less the caller
                        busy = running if busy is None else min(busy, running)
                        break
        except (OSError, ValueError, IndexError):
            return cpus
    if busy is None:
        return cpus
    return max(1, min(cpus, cpus - busy))


def default_workers(activities: int, direct: bool = True) -> int:
    """Processes used when the caller does not say: as many as make the export fastest by
    the model above (``sqrt(activities / FORK_COST_ACTIVITIES)``, rounded: one below ~68k
    activities, two from there, three at 300k, eight at 2M), at most one per
    :data:`CORES_PER_PROCESS` idle cores and :data:`MAX_DEFAULT_WORKERS`, and no more than
    keep the whole export within :func:`memory_budget`.

    Idle cores only (:func:`idle_cpus`): where other work keeps the cores busy, a second
    process only adds the fork's work; and two of them a process (its reader and its writer
    thread), so one process on a 2-core machine.
    Workers read torch's activities without writing them (``direct``), so a worker costs
    its own pipeline and nothing per activity it reads. Activities whose accessors are
    Python code (``direct`` false) are read by one process: each worker would copy the
    objects it reads.
    """
    if not can_fork() or not direct:
        return 1
    fastest = round(math.sqrt(activities / FORK_COST_ACTIVITIES))
    if fastest <= 1:
        return 1  # without looking at the cores (idle_cpus sleeps between its looks)
    workers = max(1, min(idle_cpus() // CORES_PER_PROCESS, MAX_DEFAULT_WORKERS, fastest))
    while workers > 1 and memory_estimate(activities, workers, direct) > memory_budget(
        activities, workers
    ):
        workers -= 1
    return workers


def slice_bounds(activities: int, workers: int) -> list[int]:
    """Where the slices of ``workers`` processes begin and end (slice 0 is the parent's):
    equal. The second passes start together (after the base-time exchange), and measured on
    an idle machine a worker that is done leaves while the parent still reads (its share
    of the reading costs it ~5% more, its writer splicing beside it), so equal slices finish
    within a few percent of each other."""
    bounds = [activities * i // workers for i in range(workers + 1)]
    return bounds


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
        """Waits for the worker's end. A Ctrl-C during the wait (a second one, while an
        export that failed kills its workers) does not leave it a zombie: the wait goes on
        and the interrupt is raised once the worker is reaped."""
        if self.reaped:
            return None
        interrupted: KeyboardInterrupt | None = None
        while True:
            try:
                _, status = os.waitpid(self.pid, 0)
                break
            except KeyboardInterrupt as exc:
                interrupted = interrupted or exc
        self.reaped = True
        if interrupted is not None:
            raise interrupted
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


@dataclass(frozen=True)
class _Plan:
    """What every worker of one export is forked with."""

    activities: list[Any]
    bounds: list[int]
    get: Getters
    output_path: str
    level: int | None
    threads: int
    pid_in_trace: int
    graphs: Any


def _fork_worker(plan: _Plan, i: int, outputs: list[Any]) -> _Worker:
    """Forks worker ``i`` into its anonymous output (appended to ``outputs`` first, so the
    caller removes it whatever happens next); the child never returns from here."""
    output = _anonymous_file(
        os.path.dirname(os.path.abspath(plan.output_path)), os.path.basename(plan.output_path)
    )
    outputs.append(output)
    info = os.fstat(output.fileno())
    identity = (info.st_dev, info.st_ino)
    parent_r, child_w = os.pipe()
    child_r, parent_w = os.pipe()
    # No Ctrl-C between fork and the worker's own handler: a KeyboardInterrupt raised in
    # the child before its try block would unwind into the caller's code.
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
                    plan.activities,
                    range(plan.bounds[i], plan.bounds[i + 1]),
                    plan.get,
                    output.fileno(),
                    plan.output_path,
                    plan.level,
                    plan.threads,
                    plan.pid_in_trace,
                    child_r,
                    child_w,
                    plan.graphs,
                )
            finally:
                os._exit(1)
    finally:
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.close(child_r)
    os.close(child_w)
    return _Worker(i, pid, parent_w, parent_r, output, identity)


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
) -> list[Any]:
    """Both passes with ``workers`` processes (this one included).
    ``end_first_pass(exporter)`` ends the first pass (time base, header) and returns the
    base. Returns the worker outputs: pass them to :func:`remove_outputs` once the exporter
    has finished. Returns once every worker is gone."""
    bounds = slice_bounds(len(activities), workers)
    plan = _Plan(
        activities,
        bounds,
        get,
        output_path,
        level,
        max(1, threads // workers),
        trace_pid(),  # here, not in the worker (whose pid differs)
        graphs,
    )
    started: list[_Worker] = []
    outputs: list[Any] = []
    frozen = _freeze_heap()
    try:
        for i in range(1, workers):
            started.append(_fork_worker(plan, i, outputs))

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
        # Wait until every worker is gone (the writer splices their outputs meanwhile):
        # the caller frees the activity objects next, and freeing writes to their pages, so
        # a worker still alive would leave the parent copying them (~250 B an activity).
        for worker in started:
            worker.reap()
    except BaseException:
        for worker in started:
            worker.kill()
        # Every worker is reaped even when another Ctrl-C comes meanwhile (reap raises it
        # after its wait): the one already propagating is the one the caller sees.
        for worker in started:
            with contextlib.suppress(ChildProcessError, KeyboardInterrupt):
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
