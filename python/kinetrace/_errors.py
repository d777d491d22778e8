"""The exception for trace files that are not valid traces.

The native module raises :class:`TraceFormatError` (``src/error.rs``'s ``TraceFormat``
variant, mapped in ``src/python/errors.rs``) wherever a tool reads a trace file whose content
is not a valid trace: not strict JSON, no ``traceEvents``, a corrupt or truncated gzip
stream, more than a tool can hold. Arguments out of range stay plain ``ValueError``; files
that cannot be read at all stay ``OSError``.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["TraceFormatError", "TraceFormatKind"]

#: What is wrong with a trace file, as :attr:`TraceFormatError.kind` names it (the names
#: ``kinetrace check`` gives the same faults; ``src/error.rs``'s ``FormatKind``): code and
#: tests match these, never the message.
TraceFormatKind = Literal["syntax", "truncated", "gzip", "not_a_trace", "too_large"]


class TraceFormatError(ValueError):
    """A trace file's content is not a valid trace.

    A ``ValueError``, so code that caught ``ValueError`` before keeps working. The message
    reads ``PATH: offset N (traceEvents[I]): what is wrong``.

    Attributes:
        path: the file, as given.
        offset: the byte offset in the decompressed JSON where the fault is, or None when
            it is not at one place (a trace with no events).
        event_index: the index in ``traceEvents`` of the event the fault is in, or None.
        kind: what is wrong, a stable name: ``"syntax"`` (not strict JSON, invalid UTF-8
            included), ``"truncated"`` (the JSON text ends early), ``"gzip"`` (the gzip data
            is corrupt or truncated), ``"not_a_trace"`` (valid JSON but no ``traceEvents``
            array in a top-level object, an empty file, no event to keep), ``"too_large"``
            (more than a tool can hold: nesting, one member's or the kept text's size, the
            processes of a merge, a time that cannot be shifted exactly).
    """

    path: str | None
    offset: int | None
    event_index: int | None
    kind: TraceFormatKind

    def __init__(
        self,
        message: str,
        path: str | None = None,
        offset: int | None = None,
        event_index: int | None = None,
        kind: TraceFormatKind = "syntax",
    ) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.event_index = event_index
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy from a forked worker or background export keeps the fields.
        return (type(self), (str(self), self.path, self.offset, self.event_index, self.kind))
