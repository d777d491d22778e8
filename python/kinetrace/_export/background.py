"""Forked background exports: ``background=True`` returns at once and a child process reads
the activities and writes the file while the caller goes on.

A *background job* is one such export: the stopped result it keeps alive, the child process
that writes its file, and the outcome the child reports back.

Why a child process. Reading an activity goes through torch's accessors with the GIL held,
and that read is most of an export (300k activities: ~0.6 s of 0.63 s). Measured on 2 cores
with a training-like loop running:

- a reader thread in the same process returns the call in ~0.2 s, but the loop keeps only
  2-16% of its throughput: the reader holds the GIL whenever it runs;
- a forked reader keeps the loop at 87-94%; the fork costs 45-66 ms at ~1.8 GB RSS (page
  tables), paid inside the call when done there, ~1 ms when done after it returns.

So the call only checks its arguments, resolves the result and queues the job (well under a
millisecond); the job runner thread forks and the child runs the same code a foreground
export runs (``workers=`` included), so the file is byte-identical. The fork holds the GIL
for its ~50 ms once per export; the child then runs on its own interpreter and GIL.

Protocol. The runner thread (SIGINT blocked, so Ctrl-C always reaches the main thread):

1. reads the profiling process's identity (pid, CUDA device properties and versions) --
   here, so the child writes the parent's pid as the CPU process and never touches CUDA;
2. forks (``kinetrace._export.workers``'s fork: warnings about forking with threads silenced, as
   the child takes none of the other threads' locks). The child moves to its own process
   group (a terminal Ctrl-C, sent to the foreground group, does not reach it or its own
   workers), ignores SIGINT, disables the garbage collector (no finalizer of an inherited
   object runs there), exports, sends the stats or its exception (pickled, as workers do)
   and leaves with ``os._exit``, never returning into the caller's code;
3. reads the report and reaps the child (both block without the GIL), then drops its
   reference to the result.

The destination appears only once complete: the child writes beside it and renames it into
place, as every export does. A child that is killed leaves its temporary files; the runner
removes them.

Overlap and memory. One child runs at a time (on 2 cores a second one only steals the
training loop's core); the jobs that arrive meanwhile wait in order, at most
:data:`MAX_WAITING` of them -- a call that finds the queue full waits for room (a profiling
schedule whose cycles come faster than the exports finish). Each waiting job keeps its
result alive (the profiler has moved on to a new one). Peak memory beyond what the process
uses without kinetrace is therefore: the results of at most ``1 + MAX_WAITING`` cycles, plus
one child's private pages. Those are the export's own working set -- the child calls
``trace_activities()`` itself, which builds one Python object per activity there: with the
first pass (32 bytes an activity) and the batches, ~290 bytes an activity plus ~20 MiB
(measured: 98 MiB at 300k activities, 431 MiB at 1.5M; ``benches/bench_limits.py``,
checked by ``tests/test_limits.py``), and ~180 bytes an activity per extra ``workers=``
process -- plus the pages the parent writes while the child runs (copy on write), which can
never exceed the parent's resident size at the fork.

Fork. A process that forks while jobs are pending (the caller's own ``os.fork``, not this
module's) gives the child no runner thread and, through ``kinetrace._export.handles``, none of the
pending handles: the jobs belong to the parent's runner and child processes.

Exit and interrupts. Handles live in ``kinetrace._export.handles``'s pending list like the other
background exports: ``result()``, :func:`kinetrace.wait` and the next export report their
errors, and interpreter exit waits for them. Ctrl-C while waiting (the second Ctrl-C of a
program that was stopped by the first and now waits at exit) kills the child's process group
and removes its temporary files: the destination is left as it was.

Where ``os.fork`` is missing (Windows), ``background=True`` keeps the in-process behaviour:
the call returns once the fields are read and Rust threads finish the file.
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import os
import queue
import signal
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from kinetrace import _kinetrace
from kinetrace._export import extract as _extract
from kinetrace._export import workers as _workers

__all__ = ["MAX_WAITING", "NICE", "available", "prestart", "submit"]

#: Background exports that may wait for the running one before a call waits for room.
MAX_WAITING = 2

#: Niceness added to the background process: where cores are short, the training loop
#: (and whatever else runs at normal priority) goes first and the export takes longer.
NICE = 10

# Seconds abort() waits for a killed child to be reaped and its files removed.
_ABORT_WAIT = 30.0


def available() -> bool:
    """Whether background exports run in a child process here (POSIX with ``os.fork``)."""
    return _workers.can_fork()


class Job:
    """One background export; the exporter of its :class:`~kinetrace.ExportHandle`."""

    def __init__(self, export: Callable[[Any, str], Any], result: Any, path: str):
        self._export = export  # the foreground export, which the child runs
        self._result: Any = result  # kept alive until the export ends
        self.path = path
        #: The child's pid once forked.
        self.pid: int | None = None
        self._lock = threading.Lock()
        self._cancelled = False
        self._exited = False  # the child has ended (it is reaped only once this is set)
        self._done = threading.Event()
        self._counts: tuple[int, int, int, None] | None = None
        self._error: BaseException | None = None

    # --- the exporter interface ExportHandle uses ----------------------------------------

    def wait(self, timeout: float | None) -> tuple[int, int, int, None] | None:
        """The counts once the file is written, None on timeout; raises the export's error."""
        if not self._done.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._counts

    def abort(self) -> None:
        """Stop the export: a waiting job never starts, a running child is killed (with its
        workers) and its temporary files removed before this returns."""
        with self._lock:  # not while the runner forks (the pid is known after) or reaps
            self._cancelled = True
            if self.pid is None or self._exited:
                return
            # Not reaped yet, so neither the pid nor the group id can have been reused.
            _kill_group(self.pid)
        self._done.wait(_ABORT_WAIT)

    # --- the runner side ----------------------------------------------------------------

    def _run(self) -> None:
        """Fork the child, wait for its report and reap it (runner thread)."""
        try:
            with self._lock:
                if self._cancelled:
                    self._error = KeyboardInterrupt()
                    return
                host = _extract.HostIdentity.here()  # CUDA is queried here, not in the child
                read_end, write_end = os.pipe()
                try:
                    pid = _workers._fork()
                    if pid == 0:
                        try:
                            os.close(read_end)
                            _child_main(self, host, write_end)
                        finally:
                            os._exit(1)
                finally:
                    os.close(write_end)
                self.pid = pid
                # Also from here, so a kill right after the fork reaches the whole group.
                with contextlib.suppress(OSError):
                    os.setpgid(pid, pid)
            try:
                message = _workers._receive(read_end)
            except EOFError:
                message = None
            finally:
                os.close(read_end)
            if hasattr(os, "waitid"):  # wait for the exit, but leave the zombie until
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # abort() knows
            with self._lock:
                self._exited = True
            _, status = os.waitpid(pid, 0)
            self._settle(message, status)
        except BaseException as exc:
            self._error = exc
        finally:
            self._result = None
            if self._error is not None and self.pid is not None:
                _remove_temporaries(self.path, self.pid)
            self._done.set()

    def _settle(self, message: Any, status: int) -> None:
        if message is not None and message[0] == "done":
            events, text_bytes, file_bytes = message[1:]
            self._counts = (events, text_bytes, file_bytes, None)
        elif message is not None and message[0] == "error":
            kind, error, remote = message[1:]
            if kind == "exception":
                if hasattr(error, "add_note"):
                    error.add_note(f"raised in the background export process:\n{remote}")
                self._error = error
            else:
                self._error = _workers.WorkerError(
                    f"the background export process failed: {error}\n{remote}"
                )
        elif self._cancelled:
            self._error = KeyboardInterrupt()
        elif os.WIFSIGNALED(status):
            self._error = _workers.WorkerError(
                f"the background export process (pid {self.pid}) was killed by signal "
                f"{os.WTERMSIG(status)}"
            )
        else:
            self._error = _workers.WorkerError(
                f"the background export process (pid {self.pid}) exited with status "
                f"{os.waitstatus_to_exitcode(status)} without a report"
            )


def _child_main(job: Job, host: _extract.HostIdentity, to_parent: int) -> NoReturn:
    """Runs in the forked child; never returns (not even by an exception)."""
    code = 1
    try:
        os.setpgid(0, 0)
        with contextlib.suppress(OSError):
            os.nice(NICE)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        gc.disable()
        _extract._host_override = host
        stats = job._export(job._result, job.path)
        _workers._send(
            to_parent, ("done", stats.events, stats.uncompressed_bytes, stats.file_bytes)
        )
        code = 0
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            _workers._send(to_parent, ("error", *_workers._carried_error(exc)))
    finally:
        os._exit(code)


def _kill_group(pid: int) -> None:
    """SIGKILL the child and the workers it forked (its process group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:  # not yet its own group: the child alone
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _remove_temporaries(path: str, pid: int) -> None:
    """The temporary file a killed child (pid) left beside ``path`` (the writer's; worker
    outputs are anonymous files: nothing of theirs outlives the processes)."""
    _kinetrace.remove_temporaries(path, pid)


class _Runner:
    """The queue of jobs and the thread that runs them one at a time."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[Job] = queue.Queue(maxsize=MAX_WAITING)
        self.started = False
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            if self.started:
                return
            # The thread inherits the caller's signal mask: with SIGINT blocked there,
            # Ctrl-C is always delivered to (and raised in) the main thread. A low-level
            # thread (daemon-like: exit waits on the handles, not on it) because
            # threading.Thread.start() waits until the new thread runs, which can take tens
            # of milliseconds on a loaded machine.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                _thread.start_new_thread(self._loop, ())
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self.started = True

    def submit(self, job: Job) -> None:
        self.start()
        self.jobs.put(job)  # waits while MAX_WAITING jobs are queued

    def _loop(self) -> None:
        while True:
            self.jobs.get()._run()


_runner = _Runner()


def _reset_in_child() -> None:
    # A forked process (ours or the caller's own) has no runner thread: start afresh.
    global _runner
    _runner = _Runner()


os.register_at_fork(after_in_child=_reset_in_child)


def prestart() -> None:
    """Start the runner thread now (a handler does, so its first call does not)."""
    if available():
        _runner.start()


def submit(export: Callable[[Any, str], Any], result: Any, path: str) -> Job:
    """Queue the export of ``result`` to ``path`` and return its job; the call does not wait
    for it. ``export(result, path)`` is the foreground export the child runs (passed in, with
    its settings bound, so this module does not import its caller)."""
    job = Job(export, result, path)
    _runner.submit(job)
    return job
