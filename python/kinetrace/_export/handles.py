"""Export handles: ``ExportStats``, ``ExportHandle`` (a background export), :func:`wait`,
the list of pending background exports, and waiting for them at interpreter exit.

A forked child (``os.fork``, ``multiprocessing``'s fork start method, a pre-forking server)
starts with none of the parent's exports: they run in the parent (its child process or its
threads), so the child neither waits for them at exit nor reports them, and a handle it
inherited raises instead of waiting for a job that is not there (see :func:`_forget_in_child`).
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExportStats:
    """What an export wrote."""

    #: Trace events written (process/thread metadata, activities, flows, closing events).
    events: int
    #: Bytes of JSON text (before compression).
    uncompressed_bytes: int
    #: Bytes in the file (equal to ``uncompressed_bytes`` for plain JSON).
    file_bytes: int
    #: Wall-clock seconds the export took.
    seconds: float
    #: Where the trace was written.
    path: str


class ExportHandle:
    """A background export: a forked process (``kinetrace._export.background``) reads the
    activities and writes the file; without ``os.fork``, Rust threads finish writing fields
    already extracted.

    ``result()`` waits for the file and returns its :class:`ExportStats`, or raises the
    error that stopped it. An error nobody asked for is raised by the next
    ``export_chrome_trace`` call instead, so a failure is never silent.
    """

    def __init__(
        self, exporter: Any, path: str, started: float, worker_outputs: list[Any] | None = None
    ) -> None:
        self._exporter = exporter
        # Worker output files the writer still reads; removed once it is done.
        self._worker_outputs = worker_outputs or []
        self._lock = threading.Lock()
        self._outcome: ExportStats | BaseException | None = None
        self._reported = False
        #: Where the trace is being written.
        self.path = path
        self._started = started
        # The process that started the export: only it can wait for the export.
        self._owner = os.getpid()
        # Start order, for :func:`wait`.
        self._number = 0

    def done(self) -> bool:
        """True once the file is complete (or the export failed)."""
        return self._settle(0.0)

    def result(self, timeout: float | None = None) -> ExportStats:
        """Wait for the export (at most ``timeout`` seconds) and return its stats.

        Raises:
            TimeoutError: still running after ``timeout`` seconds.
            OSError, ValueError, ...: whatever stopped the export.
        """
        if not self._settle(timeout):
            raise TimeoutError(f"export to {self.path} still running after {timeout} s")
        self._reported = True
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome

    def _settle(self, timeout: float | None) -> bool:
        # Before the lock: in a forked child, a thread of the parent may have held it.
        if os.getpid() != self._owner:
            raise RuntimeError(
                f"the export to {self.path} belongs to process {self._owner}, which started "
                f"it; this process (pid {os.getpid()}) is a fork of it and cannot wait for it"
            )
        with self._lock:
            if self._outcome is None:
                try:
                    counts = self._exporter.wait(timeout)
                except Exception as exc:
                    self._outcome = exc
                except BaseException as exc:
                    # Ctrl-C while waiting: the export is cancelled, not left to finish
                    # behind the caller's back; the interrupt goes on up.
                    self._exporter.abort()
                    self._outcome = exc
                    self._reported = True
                    self._release()
                    raise
                else:
                    if counts is None:
                        return False
                    events, raw_bytes, file_bytes, _ = counts
                    self._outcome = ExportStats(
                        events=events,
                        uncompressed_bytes=raw_bytes,
                        file_bytes=file_bytes,
                        seconds=time.perf_counter() - self._started,
                        path=self.path,
                    )
                self._release()
            return True

    def _abandon(self) -> None:
        """Stop the export if it still runs (its temporary file is removed)."""
        if os.getpid() != self._owner:
            return
        with self._lock:
            if self._outcome is None and self._exporter is not None:
                self._exporter.abort()
                self._outcome = KeyboardInterrupt()
                self._reported = True
                self._release()

    def _release(self) -> None:
        self._exporter = None
        if self._worker_outputs:
            from kinetrace._export import workers as _workers

            _workers.remove_outputs(self._worker_outputs)

    def _unreported_error(self) -> BaseException | None:
        if self._reported or not isinstance(self._outcome, BaseException):
            return None
        self._reported = True
        return self._outcome

    def __repr__(self) -> str:
        state = "running" if self._outcome is None else "done"
        return f"<ExportHandle {self.path!r} {state}>"


_pending: list[ExportHandle] = []
# Exports that succeeded and left ``_pending`` before :func:`wait` was called (the next
# export reaps finished ones): (start number, stats), kept for ``wait()`` to return.
_finished: list[tuple[int, ExportStats]] = []
_pending_lock = threading.Lock()
_numbers = itertools.count(1)


def add_pending(handle: ExportHandle) -> None:
    """Track a background export: :func:`wait`, the next export and exit report it."""
    with _pending_lock:
        handle._number = next(_numbers)
        _pending.append(handle)


def _forget_in_child() -> None:
    """In a forked child: the parent's exports are not this process's to wait for or
    report (their child process or threads belong to the parent), and a lock another thread
    held at the fork would stay held here."""
    global _pending_lock
    _pending_lock = threading.Lock()
    _pending.clear()
    _finished.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _raise_unreported_errors() -> None:
    """Raise the first error of a finished background export nobody looked at."""
    with _pending_lock:
        handles = list(_pending)
    for handle in handles:
        if handle.done():
            with _pending_lock:
                if handle in _pending:
                    _pending.remove(handle)
                    if isinstance(handle._outcome, ExportStats):
                        _finished.append((handle._number, handle._outcome))
            error = handle._unreported_error()
            if error is not None:
                raise RuntimeError(
                    f"an earlier background export to {handle.path} failed"
                ) from error


def wait(timeout: float | None = None) -> list[ExportStats]:
    """Wait for every background export this process started since the previous
    ``wait()`` (or since it started, or was forked: a forked child has none of its
    parent's exports).

    Returns the stats of every one of them that succeeded, in start order, those that
    finished before this call included; each export is returned by one ``wait()`` only.
    After waiting for all of them, raises the first error that nobody has seen yet (an
    error already raised by ``result()`` or by a later export is not raised again).
    Until ``wait()`` is called, each finished export keeps its :class:`ExportStats` (a few
    hundred bytes) for it. A call that raises returns nothing: the stats it collected are
    dropped with it.

    Raises:
        TimeoutError: an export is still running after ``timeout`` seconds; the exports
            finished so far are kept for the next ``wait()``.
    """
    with _pending_lock:
        handles = list(_pending)
    deadline = None if timeout is None else time.monotonic() + timeout
    first_error: BaseException | None = None
    for handle in handles:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not handle._settle(remaining):
            raise TimeoutError(f"export to {handle.path} still running after {timeout} s")
        with _pending_lock:
            if handle in _pending:
                _pending.remove(handle)
                if isinstance(handle._outcome, ExportStats):
                    _finished.append((handle._number, handle._outcome))
        if not isinstance(handle._outcome, ExportStats):
            error = handle._unreported_error()
            first_error = first_error or error
    with _pending_lock:
        done = sorted(_finished, key=lambda entry: entry[0])
        _finished.clear()
    if first_error is not None:
        raise first_error
    return [stats for _, stats in done]


@atexit.register
def _wait_at_exit() -> None:
    """Finish pending background exports before the interpreter goes away."""
    with _pending_lock:
        handles = list(_pending)
    for i, handle in enumerate(handles):
        try:
            handle._settle(None)
        except KeyboardInterrupt:
            # A second Ctrl-C (the first stopped the program): abandon every export still
            # running; each removes its temporary file, so no partial file is left.
            for rest in handles[i:]:
                rest._abandon()
            print("kinetrace: background exports abandoned (Ctrl-C)", file=sys.stderr)
            return
        error = handle._unreported_error()
        if error is not None:  # report (once), never raise during shutdown
            print(f"kinetrace: background export to {handle.path} failed: {error}", file=sys.stderr)
