"""torch < 2.13 (no ``_ProfilerResult.trace_activities()``): Kineto's own writer.

``result.save(p)`` (Kineto's C++ ChromeTraceLogger) is the only exporter those versions have.
``save`` holds the GIL throughout, so what kinetrace does meanwhile runs on Rust threads.

A plain ``.json`` (see ``kinetrace._kinetrace._FallbackFile``): Kineto writes into a private
directory (mode 0700) beside the destination's target, at its own speed, while a thread reads
and checks what it wrote; when ``save`` returns, the file is edited where it lies (only from
the first change on) and renamed over the destination. A destination written in place (an
existing FIFO or device), a directory whose name Kineto would not write as a plain JSON string,
or a system other than POSIX takes the next way instead.

``.json.gz`` (see ``kinetrace._kinetrace._FallbackStream``): FIFOs in a private directory
(mode 0700, in the system's temporary directory: FIFOs hold no data) whose text is streamed
into the destination: written atomically (or directly, for an existing FIFO or ``/dev/null``)
through the parallel single-member gzip encoder. No file as large as the trace is written.

The file is Kineto's format, not torch's Python-exporter format, made strict JSON: quotes
Kineto leaves unescaped in names are escaped, and the text is validated, so an export whose
trace is still not strict JSON raises instead of writing it. ``traceName`` names the
destination rather than the private file. Metadata kinetrace carries itself
(``kinetrace.profile.add_metadata`` on these versions, and the ``metadata`` argument) is
written as top-level keys exactly as given; Kineto's own metadata passes through Kineto, which
writes every ``\\`` in a value as ``/``. Kineto also writes a ``\\`` in a name as ``/`` and a
name with a tab or non-ASCII character as ``"unknown"``; kinetrace cannot recover those names.

Kineto writes ``p + ".tmp"`` and renames it over ``p`` (torch 2.11 to 2.15) or writes ``p``
itself (older Kineto), so there is a file (or FIFO) at each; exactly one must receive the
trace. Should Kineto leave a regular file of its own instead (a writer that replaces the
FIFO or the file), that file is used after ``save``. Where FIFOs are unavailable (Windows, or
a filesystem without them), ``save`` writes a regular temporary file beside the destination,
which is then streamed (compressed for ``.gz``) into place and removed: there, a full-size
copy exists while the export runs.

Ctrl-C: ``save`` holds the GIL, so an interrupt while Kineto writes is seen only when
``save`` returns; the export then stops, and the private directory and the temporary output
are removed before the ``KeyboardInterrupt`` reaches the caller.

A FIFO destination read by a thread of this same process deadlocks (``save`` holds the
GIL while it waits for the reader), as it does with torch's own ``save``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import _torch_version
from kinetrace._export.handles import ExportHandle, ExportStats

__all__ = ["FallbackWarning", "export_chrome_trace", "export_via_kineto"]

#: The name Kineto is told to write (inside the private temporary directory).
_TRACE_FILE = "trace.json"

#: The FallbackWarning messages given so far (each is given once per process).
_warned: set[str] = set()


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
    metadata: Mapping[str, Any] | None,
    ignored: Mapping[str, bool],
) -> ExportStats | ExportHandle:
    """``kinetrace.export_chrome_trace`` for a result without ``trace_activities()``.

    After a successful export, warns :class:`FallbackWarning` once per process (once per
    distinct list of ignored arguments: the time base, ``workers``, ``progress``,
    ``background``), pointing at the caller's code. ``background=True`` runs synchronously
    and returns a finished :class:`ExportHandle`.
    """
    stats = export_via_kineto(result, path, level, threads, started=started, metadata=metadata)
    skipped = [name for name, given in ignored.items() if given]
    if background:
        skipped.append("background (ran synchronously)")
    note = f"; ignored: {', '.join(skipped)}" if skipped else ""
    message = (
        f"torch {_torch_version()} has no _ProfilerResult.trace_activities(), so kinetrace "
        "writes traces with Kineto's own writer, in Kineto's trace format (torch's "
        f"Python-exporter format needs torch >= 2.13){note}"
    )
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, FallbackWarning, stacklevel=_caller_stacklevel())
    if not background:
        return stats
    handle = ExportHandle(None, stats.path, started)
    handle._outcome = stats
    return handle


def _internal(filename: str) -> bool:
    """A frame of kinetrace's or torch's own code (not what a warning should point at)."""
    for name in ("kinetrace", "torch"):
        module = sys.modules.get(name)
        root = os.path.dirname(getattr(module, "__file__", None) or "") if module else ""
        if root and filename.startswith(root + os.sep):
            return True
    return False


def _caller_stacklevel() -> int:
    """The ``stacklevel`` (for a ``warnings.warn`` in the function calling this) of the
    innermost frame outside kinetrace and torch: the user's call, even when the export
    ran from a trace handler inside ``prof.step()``."""
    level = 1
    frame = sys._getframe(1)
    while frame.f_back is not None and _internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


def export_via_kineto(
    result: Any,
    path: str | os.PathLike[str],
    level: int | None,
    threads: int,
    *,
    started: float | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> ExportStats:
    """Write ``result.save()``'s trace to ``path``: plain when ``level`` is None, else one
    gzip member at that level on ``threads`` threads. ``metadata`` (key: JSON text) is
    written as top-level keys.

    Raises whatever ``save`` raises (the destination is then untouched), ``OSError`` for a
    destination that cannot be written (naming the destination, before ``save`` runs where
    FIFOs are used), and ``RuntimeError`` when ``save`` wrote no trace or a trace that is not
    strict JSON even after the repairs.
    """
    if started is None:
        started = time.perf_counter()
    trace_name = os.fsdecode(os.fspath(path))
    members = _metadata_members(metadata)
    # Filled before each directory is made, so that the `finally` removes it even when
    # Ctrl-C lands right after os.mkdir.
    scratches: list[str] = []
    try:
        beside = _in_place_directory(trace_name) if level is None else None
        if beside is not None:
            target = os.path.join(_private_dir(beside, scratches, trace_name), _TRACE_FILE)
            rename = _trace_name_rewrite(target, trace_name)
            counts = _save_in_place(result, target, trace_name, rename, members)
            return _stats(counts, started, trace_name)
        target = os.path.join(_private_dir(tempfile.gettempdir(), scratches), _TRACE_FILE)
        fifos = _make_fifos(target)
        if fifos is None:
            parent = os.path.dirname(os.path.abspath(trace_name))
            if not os.path.isdir(parent):
                raise FileNotFoundError(
                    errno.ENOENT, f"cannot write {trace_name}: no such directory", parent
                )
            target = os.path.join(_private_dir(parent, scratches, trace_name), _TRACE_FILE)
            rename = _trace_name_rewrite(target, trace_name)
            result.save(target)
            counts = _stream_saved_file(target, trace_name, level, threads, rename, members)
        else:
            rename = _trace_name_rewrite(target, trace_name)
            counts = _stream_fifos(
                result, target, fifos, trace_name, level, threads, rename, members
            )
    finally:
        _remove_dirs(scratches)
    return _stats(counts, started, trace_name)


def _stats(counts: tuple[int, int, int], started: float, trace_name: str) -> ExportStats:
    events, text_bytes, file_bytes = counts
    return ExportStats(
        events=events,
        uncompressed_bytes=text_bytes,
        file_bytes=file_bytes,
        seconds=time.perf_counter() - started,
        path=trace_name,
    )


def _in_place_directory(trace_name: str) -> str | None:
    """Where the private directory for a plain destination goes (beside the file the
    destination names), or None where the FIFOs are used instead: a destination written
    in place (an existing FIFO or device), a system without FIFOs' POSIX semantics, or a
    directory whose name Kineto would not write as a plain JSON string (a quote, a
    backslash, a control character, text that is not UTF-8): Kineto writes the path it is
    given into the trace, and it must be found there again to be replaced. Raises OSError
    naming the destination for one that cannot be written."""
    if os.name != "posix":
        return None
    directory = _kinetrace._FallbackFile.directory(trace_name)
    if directory is None:
        return None
    text = os.fsdecode(os.path.abspath(directory))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    if '"' in text or "\\" in text or not text.isprintable():
        return None
    return text


def _save_in_place(
    result: Any,
    target: str,
    trace_name: str,
    rename: tuple[bytes, bytes],
    members: list[tuple[str, str]],
) -> tuple[int, int, int]:
    """``save`` into ``target`` (a private file beside the destination), checked while
    Kineto writes it, then edited and renamed over the destination."""
    stream = None
    try:
        stream = _kinetrace._FallbackFile(target, trace_name, rename, members)
        result.save(target)
        counts = stream.finish()
    finally:
        # abort() first, and nothing before it that runs Python code (see _stream_fifos).
        if stream is not None:
            stream.abort()
    if counts is None:
        raise RuntimeError(
            f"torch's _ProfilerResult.save() wrote no trace (nothing arrived at {target}); "
            f"{trace_name} was not written"
        )
    return counts


def _metadata_members(metadata: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(key, JSON text)`` pairs; a value that is not a string is written as JSON."""
    if not metadata:
        return []
    return [
        (str(key), value if isinstance(value, str) else json.dumps(value))
        for key, value in metadata.items()
    ]


def _private_dir(parent: str, made: list[str], destination: str | None = None) -> str:
    """A new directory only this user can enter (mode 0700), under ``parent``, named as a
    temporary (``.kinetrace.{pid}.{host}.{random}.kinetrace-tmp``: one a killed export left
    is removed by the next export there, see docs/security.md). Its name is appended to
    ``made`` before it is created (a name whose creation failed stays there: removing what
    does not exist does nothing). An error names ``destination`` when given (the directory
    is made beside it)."""
    while True:
        name = os.path.join(parent, os.fspath(_kinetrace._FallbackFile.private_name(parent)))
        made.append(name)
        try:
            os.mkdir(name, 0o700)
        except FileExistsError:  # not ours: never removed
            made.pop()
            continue
        except OSError as exc:
            if destination is None or exc.errno is None:
                raise
            raise type(exc)(
                exc.errno, f"cannot write {destination}: {exc.strerror}", destination
            ) from exc
        return name


def _remove_dirs(dirs: list[str]) -> None:
    """Removes the private directories, completely even if Ctrl-C lands meanwhile (the
    interrupt is raised once they are gone). Each is removed in one native call: a Ctrl-C
    inside ``shutil.rmtree`` can turn into an ``OSError`` (it closes a folder twice)."""
    interrupted: BaseException | None = None
    while dirs:
        try:
            _kinetrace.remove_temporary_dir(dirs[-1])
            dirs.pop()
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


def _trace_name_rewrite(target: str, trace_name: str) -> tuple[bytes, bytes]:
    """Kineto writes ``"traceName": "<target>"`` (unescaped, each ``\\`` as ``/``); the
    destination replaces it, as a JSON string."""
    text = json.dumps(trace_name, ensure_ascii=False)
    try:
        replacement = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable bytes): escape them all
        replacement = json.dumps(trace_name).encode("ascii")
    return b'"' + os.fsencode(target).replace(b"\\", b"/") + b'"', replacement


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
    members: list[tuple[str, str]],
) -> tuple[int, int, int]:
    read_fds, write_fds = fifos
    stream = None
    try:
        # Every end belongs to the stream from here on, even if the constructor raises; it
        # closes the write ends in finish() (or abort(), or when dropped).
        handed = (list(read_fds), list(write_fds))
        read_fds.clear()
        write_fds.clear()
        stream = _kinetrace._FallbackStream(
            handed[0], handed[1], trace_name, level, threads, rename, members
        )
        result.save(target)
        counts = stream.finish()
        if counts is None:
            counts = _stream_saved_file(target, trace_name, level, threads, rename, members)
        return counts
    finally:
        # abort() first, and nothing before it that runs Python code: a Ctrl-C raised in a
        # Python call here would skip it and leave the temporary output to the traceback.
        if stream is not None:
            stream.abort()
        _close_all(write_fds)  # only ends never handed over
        _close_all(read_fds)


def _stream_saved_file(
    target: str,
    trace_name: str,
    level: int | None,
    threads: int,
    rename: tuple[bytes, bytes],
    members: list[tuple[str, str]],
) -> tuple[int, int, int]:
    """Streams the regular file ``save`` left at ``target`` (or ``target + ".tmp"``)."""
    for candidate in (target, target + ".tmp"):
        try:
            if not stat.S_ISREG(os.lstat(candidate).st_mode):
                continue
        except FileNotFoundError:
            continue
        stream = _kinetrace._FallbackStream.from_path(
            candidate, trace_name, level, threads, rename, members
        )
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
