"""``export_parquet``: a profile straight into a Parquet dataset (``docs/parquet.md``).

The export is ``export_chrome_trace``'s, workers included, into a FIFO in a private folder
(a temporary of the system's temporary directory, named as every temporary is, so one a
killed process left is removed by a later run there: ``docs/security.md``);
the native converter reads the other end on a thread of its own as the text arrives, so the
trace never lands on disk as JSON and the dataset holds exactly what ``kinetrace parquet``
makes of the exported trace. The dataset appears only when both ends succeeded.
"""

from __future__ import annotations

import errno
import os
import tempfile
import threading
import time
from typing import Any

from kinetrace import _kinetrace
from kinetrace._export.export import export_chrome_trace
from kinetrace._tools.parquet import DEFAULT_PARQUET_LEVEL, ParquetResult, to_parquet

__all__ = ["export_parquet"]

#: What ``meta.source`` calls a dataset exported from a profile.
PROFILE_SOURCE = "<profile>"


def export_parquet(
    source: Any,
    out_dir: str | os.PathLike[str],
    *,
    force: bool = False,
    level: int = DEFAULT_PARQUET_LEVEL,
    workers: int | None = None,
    progress: bool = False,
) -> ParquetResult:
    """Writes the trace of ``source`` (what :func:`export_chrome_trace` takes: a stopped
    profile or its result) as a Parquet dataset at ``out_dir``, one rank (its
    ``distributedInfo.rank``, else 0).

    Args:
        source: a stopped ``torch.profiler.profile``, a ``kinetrace.profile``, or a result.
        out_dir: the dataset's folder; it must not exist, unless ``force``.
        force: replace an existing dataset (a folder with ``_kinetrace.json``) or an empty one.
        level: zstd's level, 1-22.
        workers, progress: as for :func:`export_chrome_trace`.

    Raises:
        FileExistsError: ``out_dir`` exists (without ``force``, or it is not a dataset).
        KeyboardInterrupt: Ctrl-C (nothing is left behind).
        Whatever :func:`export_chrome_trace` raises.
    """
    private = os.fsdecode(_kinetrace.create_temporary_dir(tempfile.gettempdir(), "kinetrace"))
    try:
        fifo = os.path.join(private, "trace.json")
        os.mkfifo(fifo, 0o600)
        outcome: dict[str, Any] = {}
        cancel = threading.Event()
        exported = threading.Event()

        def convert() -> None:
            try:
                outcome["result"] = to_parquet(
                    [fifo],
                    out_dir,
                    force=force,
                    threads=1,
                    level=level,
                    names=[PROFILE_SOURCE],
                    cancel=cancel,
                )
            except BaseException as exc:  # handed to the calling thread below
                outcome["error"] = exc
                _drain(fifo, exported)

        reader = threading.Thread(target=convert, name="kinetrace-parquet", daemon=True)
        reader.start()
        try:
            export_chrome_trace(source, fifo, workers=workers, progress=progress)
            exported.set()
            _join(reader)
        except BaseException as exc:
            exported.set()
            cancel.set()
            _release(fifo, reader)
            reader.join()
            if "error" in outcome and not isinstance(exc, KeyboardInterrupt):
                raise outcome["error"] from exc  # the reader's failure is the cause
            raise
        if "error" in outcome:
            raise outcome["error"]
        result: ParquetResult = outcome["result"]
        return result
    finally:
        # One native call: a Ctrl-C inside shutil.rmtree can turn into an OSError.
        _kinetrace.remove_temporary_dir(private)


def _join(reader: threading.Thread) -> None:
    """Waits for the reader in short waits (Ctrl-C is seen between them)."""
    while reader.is_alive():
        reader.join(0.05)


def _drain(fifo: str, exported: threading.Event) -> None:
    """After the reader failed (an existing ``out_dir``, a bad argument) the export may not
    have opened the FIFO yet: it would wait for a reader for ever. Keep a reader there that
    discards what arrives until the export has returned; its failure is raised then."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                chunk = b""
            if not chunk:
                if exported.is_set():
                    return
                time.sleep(0.01)
    finally:
        os.close(fd)


def _release(fifo: str, reader: threading.Thread) -> None:
    """Ends the reader's wait on the FIFO when the export never opened it (it failed
    first): an open for writing and a close give the reader an empty input, which it
    refuses, leaving nothing behind. Once the export opened and closed it, the reader
    already has its end of file."""
    while reader.is_alive():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: the reader has not opened it yet
                raise
            time.sleep(0.01)
            continue
        os.close(fd)
        return
