"""The exception for trace files that are not valid traces.

The native module raises :class:`TraceFormatError` (``src/error.rs``'s ``TraceFormat``
variant, mapped in ``src/python/errors.rs``) wherever a tool reads a trace file whose content
is not a valid trace: not strict JSON, no ``traceEvents``, a corrupt or truncated gzip
stream, more than a tool can hold. Arguments out of range stay plain ``ValueError``; files
that cannot be read at all stay ``OSError``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TraceFormatError"]


class TraceFormatError(ValueError):
    """A trace file's content is not a valid trace.

    A ``ValueError``, so code that caught ``ValueError`` before keeps working. The message
    reads ``PATH: offset N (traceEvents[I]): what is wrong``.

    Attributes:
        path: the file, as given.
        offset: the byte offset in the decompressed JSON where the fault is, or None when
            it is not at one place (a trace with no events).
        event_index: the index in ``traceEvents`` of the event the fault is in, or None.
    """

    path: str | None
    offset: int | None
    event_index: int | None

    def __init__(
        self,
        message: str,
        path: str | None = None,
        offset: int | None = None,
        event_index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.event_index = event_index

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy from a forked worker or background export keeps the fields.
        return (type(self), (str(self), self.path, self.offset, self.event_index))
