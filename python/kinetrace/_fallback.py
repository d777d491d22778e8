"""torch < 2.13 (no ``_ProfilerResult.trace_activities()``): Kineto's own writer, streamed.

``result.save(p)`` (Kineto's C++ ChromeTraceLogger) is the only exporter those versions have.
kinetrace points it at FIFOs in a private temporary directory and streams what arrives,
from Rust threads that never need the GIL (``save`` holds it throughout), into the
destination: written atomically (or directly, for an existing FIFO or ``/dev/null``), and
for ``.gz`` through the parallel single-member gzip encoder. No file as large as the trace
is written. The file is Kineto's format, not torch's Python-exporter format, apart from
``traceName``, which names the destination rather than the FIFO.

Kineto writes ``p + ".tmp"`` and renames it over ``p`` (torch 2.15) or writes ``p`` itself
(older Kineto), so there is a FIFO at each; exactly one must receive the trace. Should
Kineto leave a regular file instead (a writer that replaces the FIFO), that file is
streamed into the destination after ``save``. Where FIFOs are unavailable (Windows, or a
filesystem without them), ``save`` writes a regular temporary file beside the destination,
which is then streamed (compressed for ``.gz``) into place and removed: there, a full-size
copy exists while the export runs.

A FIFO destination read by a thread of this same process deadlocks (``save`` holds the
GIL while it waits for the reader), as it does with torch's own ``save``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Mapping
from typing import Any

from kinetrace import _kinetrace
from kinetrace._export import ExportHandle, ExportStats, _torch_version

__all__ = ["FallbackWarning", "export_chrome_trace", "export_via_kineto"]

#: The name Kineto is told to write (inside the private temporary directory).
_TRACE_FILE = "trace.json"


class FallbackWarning(UserWarning):
    """The trace was written by Kineto's own writer, in Kineto's format (torch < 2.13)."""


def export_chrome_trace(
    result: Any,
    path: str,
    level: int | None,
    threads: int,
    *,
    started: float,
    background: bool,
    ignored: Mapping[str, bool],
) -> ExportStats | ExportHandle:
    """``kinetrace.export_chrome_trace`` for a result without ``trace_activities()``.

    Warns :class:`FallbackWarning` once, naming the arguments that do not apply there
    (``metadata``: the profile's own metadata is already in Kineto's output; the time base;
    ``workers``; ``progress``). ``background=True`` runs synchronously and returns a
    finished :class:`ExportHandle`.
    """
    skipped = [name for name, given in ignored.items() if given]
    if background:
        skipped.append("background (ran synchronously)")
    note = f"; ignored: {', '.join(skipped)}" if skipped else ""
    warnings.warn(
        f"torch {_torch_version()} has no _ProfilerResult.trace_activities(), so {path} is "
        "written by Kineto's own writer in Kineto's trace format (torch's Python-exporter "
        f"format needs torch >= 2.13){note}",
        FallbackWarning,
        stacklevel=3,
    )
    stats = export_via_kineto(result, path, level, threads, started=started)
    if not background:
        return stats
    handle = ExportHandle(None, stats.path, started)
    handle._outcome = stats
    return handle


def export_via_kineto(
    result: Any,
    path: str | os.PathLike[str],
    level: int | None,
    threads: int,
    *,
    started: float | None = None,
) -> ExportStats:
    """Write ``result.save()``'s trace to ``path``: plain when ``level`` is None, else one
    gzip member at that level on ``threads`` threads.

    Raises whatever ``save`` raises (the destination is then untouched), ``OSError`` for a
    destination that cannot be written (before ``save`` runs, where FIFOs are used), and
    ``RuntimeError`` when ``save`` wrote no trace.
    """
    if started is None:
        started = time.perf_counter()
    trace_name = os.fsdecode(os.fspath(path))
    scratch = tempfile.mkdtemp(prefix=".kinetrace-", dir=_scratch_parent(trace_name))
    try:
        target = os.path.join(scratch, _TRACE_FILE)
        rename = _trace_name_rewrite(target, trace_name)
        fifos = _make_fifos(target)
        if fifos is None:
            result.save(target)
            counts = _stream_saved_file(target, trace_name, level, threads, rename)
        else:
            counts = _stream_fifos(result, target, fifos, trace_name, level, threads, rename)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    events, text_bytes, file_bytes = counts
    return ExportStats(
        events=events,
        uncompressed_bytes=text_bytes,
        file_bytes=file_bytes,
        seconds=time.perf_counter() - started,
        path=trace_name,
    )


def _scratch_parent(trace_name: str) -> str:
    """Beside the destination (where its temporary file goes too), unless the destination
    is an existing special file such as ``/dev/null``: then the system's temp directory."""
    try:
        st = os.stat(trace_name)
    except OSError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            return tempfile.gettempdir()
    return os.path.dirname(os.path.abspath(trace_name))


def _trace_name_rewrite(target: str, trace_name: str) -> tuple[bytes, bytes]:
    """Kineto writes ``"traceName": "<target>"`` (unescaped); the destination replaces it,
    as a JSON string."""
    text = json.dumps(trace_name, ensure_ascii=False)
    try:
        replacement = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable bytes): escape them all
        replacement = json.dumps(trace_name).encode("ascii")
    return b'"' + os.fsencode(target) + b'"', replacement


def _make_fifos(target: str) -> tuple[list[int], list[int]] | None:
    """FIFOs at ``target`` and ``target + ".tmp"``: (read ends, write ends), the read ends
    blocking. The write ends stay open in Python so the readers never see end of file
    before ``save`` is over. None where FIFOs are unavailable."""
    if not hasattr(os, "mkfifo"):
        return None
    read_fds: list[int] = []
    write_fds: list[int] = []
    try:
        for fifo in (target, target + ".tmp"):
            os.mkfifo(fifo, 0o600)
            read_fds.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            write_fds.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            os.set_blocking(read_fds[-1], True)
    except OSError:
        # A filesystem without FIFOs: use a regular file there instead.
        _close_all(read_fds + write_fds)
        for fifo in (target, target + ".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(fifo)
        return None
    return read_fds, write_fds


def _close_all(fds: list[int]) -> None:
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _stream_fifos(
    result: Any,
    target: str,
    fifos: tuple[list[int], list[int]],
    trace_name: str,
    level: int | None,
    threads: int,
    rename: tuple[bytes, bytes],
) -> tuple[int, int, int]:
    read_fds, write_fds = fifos
    stream = None
    try:
        # The read ends belong to the stream from here on, even if the constructor raises.
        handed, read_fds = list(read_fds), []
        stream = _kinetrace._KinetoStream(handed, trace_name, level, threads, rename)
        result.save(target)
        _close_all(write_fds)
        counts = stream.finish()
        if counts is None:
            counts = _stream_saved_file(target, trace_name, level, threads, rename)
        return counts
    finally:
        # Write ends first: a reader blocked in read() returns only at end of file.
        _close_all(write_fds)
        _close_all(read_fds)
        if stream is not None:
            stream.abort()


def _stream_saved_file(
    target: str, trace_name: str, level: int | None, threads: int, rename: tuple[bytes, bytes]
) -> tuple[int, int, int]:
    """Streams the regular file ``save`` left at ``target`` (or ``target + ".tmp"``)."""
    for candidate in (target, target + ".tmp"):
        try:
            if not stat.S_ISREG(os.lstat(candidate).st_mode):
                continue
        except FileNotFoundError:
            continue
        stream = _kinetrace._KinetoStream.from_path(candidate, trace_name, level, threads, rename)
        try:
            counts = stream.finish()
        finally:
            stream.abort()
        if counts is not None:
            return counts
    raise RuntimeError(
        f"torch's _ProfilerResult.save() wrote no trace (nothing arrived at {target}); "
        f"{trace_name} was not written"
    )
