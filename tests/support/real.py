"""The real traces of ``tests/data/real/`` (recorded on CUDA, ROCm and MTIA machines; see its
README), and where each event's text lies in them."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

#: The folder of the real traces (in the repository, so CI has them).
REAL_DIR = Path(__file__).resolve().parent.parent / "data" / "real"

#: The real traces, by file name.
REAL_TRACES: list[Path] = sorted(REAL_DIR.glob("*.json.gz"))


@functools.cache
def real_text(path: Path) -> bytes:
    """The decompressed JSON text of a real trace."""
    return gzip.decompress(path.read_bytes())


@functools.cache
def real_trace(path: Path) -> dict[str, Any]:
    """A real trace, parsed."""
    return json.loads(real_text(path))


def event_spans(text: bytes) -> list[tuple[int, int]]:
    """(start, end) byte offsets of each element of ``traceEvents`` in ``text`` (valid
    JSON, ASCII keys up to ``traceEvents``)."""
    s = text.decode("utf-8")
    decoder = json.JSONDecoder()
    at = s.index('"traceEvents"')
    at = s.index("[", at) + 1
    spans = []
    # Offsets in bytes: count them as the text is walked.
    byte_at = len(s[:at].encode("utf-8"))
    while True:
        while s[at] in " \t\r\n,":
            at += 1
            byte_at += 1
        if s[at] == "]":
            return spans
        _, end = decoder.raw_decode(s, at)
        size = len(s[at:end].encode("utf-8"))
        spans.append((byte_at, byte_at + size))
        byte_at += size
        at = end
