"""``GzipWriter``: a binary file object that writes ONE gzip member with parallel deflate."""

from __future__ import annotations

import io
import os
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import (
    DEFAULT_COMPRESSLEVEL,
    available_cpus,
    fifo_reader_ready,
    require_in_range,
)

__all__ = ["GzipWriter"]


class GzipWriter(io.BufferedIOBase):
    """Write-only gzip file whose blocks are compressed on several threads.

    The output is a single gzip member (readers that stop after the first member, such as
    ``zlib.decompress(data, 31)`` or a browser reading ``Content-Encoding: gzip``, see all
    of it). Usable anywhere a binary file is, e.g. as the ``fileobj`` of
    ``io.TextIOWrapper``.

    Args:
        file: a path (the file appears when the writer is closed; an exception inside a
            ``with`` block discards it and leaves any existing file untouched) or a
            writable binary file object (written from a background thread while the GIL
            is free; its exceptions come back from ``write``/``flush``/``close``).
        compresslevel: 0-9.
        threads: deflate threads (default: the cores available).
    """

    def __init__(
        self,
        file: str | bytes | os.PathLike[str] | Any,
        *,
        compresslevel: int = DEFAULT_COMPRESSLEVEL,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        require_in_range("compresslevel", compresslevel, 0, 9)
        n_threads = available_cpus() if threads is None else threads
        require_in_range("threads", n_threads, 1, 256)
        if isinstance(file, (str, bytes, os.PathLike)):
            target: Any = os.fsdecode(file)
            self.name: Any = target
        else:
            target = file
            self.name = getattr(file, "name", None)
        with fifo_reader_ready(target if isinstance(target, str) else ""):
            self._encoder: Any = _kinetrace._GzipEncoder(target, compresslevel, n_threads)
        # Set once the encoder is finished or discarded; io's close() calls flush() after.
        self._finished = False
        #: Uncompressed and compressed byte counts, set by ``close()``.
        self.bytes_in: int | None = None
        self.bytes_out: int | None = None

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def write(self, data: Any) -> int:
        """Compress ``data`` (bytes-like); returns its length."""
        if self.closed:
            raise ValueError("I/O operation on closed GzipWriter")
        written: int = self._encoder.write(data)
        return written

    def flush(self) -> None:
        """Make everything written so far decodable from the output (a sync flush)."""
        if self.closed:
            raise ValueError("I/O operation on closed GzipWriter")
        if not self._finished:
            self._encoder.flush()

    def close(self) -> None:
        """Finish the gzip member (and, for a path, move the file into place).

        Waiting for a file object that stalls (a pipe nobody reads) is answered by Ctrl-C:
        the ``KeyboardInterrupt`` leaves the writer open, so that ``close()`` again goes on
        waiting and ``abort()`` discards the output (both wait for the file object's current
        ``write`` to return)."""
        if self.closed:
            return
        try:
            counts = self._encoder.close()
        except KeyboardInterrupt:
            raise
        except BaseException:
            self._finished = True
            super().close()
            raise
        self.bytes_in, self.bytes_out = counts
        self._finished = True
        super().close()

    def abort(self) -> None:
        """Stop without finishing: a path's file is not created (nor replaced)."""
        if not self.closed:
            self._encoder.abort()
            self._finished = True
            super().close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<kinetrace.GzipWriter {self.name!r} {state}>"
