""":func:`compress_trace` (``kinetrace compress``): rewrites a trace file that already
exists as ONE gzip member with the parallel encoder (some viewers read only the first member
of a gzip file), streamed through Rust with the GIL released in constant memory. The source
is ``.json`` or gzip with any number of members, recognised by the magic bytes rather than
the name (:func:`is_gzip`), and it is checked on the way with the strict reader ``split``
and ``filter`` use: what is not a trace (truncated, NaN, a byte-order mark, invalid UTF-8,
empty, a second document, a top-level member or event over 64 MiB) raises
:class:`~kinetrace.TraceFormatError` at the offset of its first fault and leaves nothing.
Checking a trace is :mod:`kinetrace._tools.check`'s, repairing one :mod:`kinetrace._tools.repair`'s.

The text is kept byte for byte, whatever its form: a trace in the JSON Array Format (a
top-level array of events, its ``]`` left off or not) stays one; :func:`repair_trace
<kinetrace._tools.repair.repair_trace>` writes it as ``{"traceEvents": [...]}``.
"""

from __future__ import annotations

import dataclasses
import os
import time

from kinetrace import _kinetrace
from kinetrace._env import gzip_settings

__all__ = ["CompressResult", "compress_trace", "is_gzip"]

#: The first bytes of every gzip member.
GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` starts like gzip (by its bytes, whatever its name).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


@dataclasses.dataclass(frozen=True)
class CompressResult:
    """What :func:`compress_trace` wrote."""

    path: str
    #: Size of the source file, bytes of JSON it holds, and size of the gzip written.
    source_bytes: int
    json_bytes: int
    file_bytes: int
    level: int
    threads: int
    seconds: float


def compress_trace(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    compresslevel: int | None = None,
    threads: int | None = None,
) -> CompressResult:
    """Rewrites the trace at ``src`` (``.json``, or gzip of any number of members) as ONE
    gzip member at ``dst``, with the parallel encoder, streamed in constant memory and
    checked on the way as ``split`` and ``filter`` check their input (strict JSON, a trace,
    no top-level member or event over 64 MiB).

    ``dst`` appears atomically and replaces an existing file (``dst`` may be ``src``
    itself); on any error nothing is left and an existing ``dst`` is untouched.

    Raises:
        TypeError, ValueError: ``compresslevel`` (0-9) or ``threads`` (1-256) out of range.
        kinetrace.TraceFormatError: ``src`` is not a trace (a ``ValueError``: where and why,
            a corrupt or truncated gzip stream included).
        OSError: a file cannot be read or written.
        KeyboardInterrupt: Ctrl-C; nothing is written.
    """
    level, n_threads = gzip_settings(compresslevel, threads)
    src_path, dst_path = os.fsdecode(src), os.fsdecode(dst)
    source_bytes = os.stat(src_path).st_size
    started = time.perf_counter()
    json_bytes, file_bytes = _kinetrace.recompress(src_path, dst_path, level, n_threads)
    return CompressResult(
        path=dst_path,
        source_bytes=source_bytes,
        json_bytes=json_bytes,
        file_bytes=file_bytes,
        level=level,
        threads=n_threads,
        seconds=time.perf_counter() - started,
    )
