"""Reading trace files: the JSON bytes (``.gz`` decompressed as exactly one member), strict
JSON (no NaN / Infinity), the events written for activities, JSON string identity.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

import kinetrace
from kinetrace import _kinetrace


def read_trace(path: str | os.PathLike[str]) -> bytes:
    """The JSON bytes of a trace file; a ``.gz`` one is decompressed (and must be one member)."""
    data = Path(path).read_bytes()
    if os.fspath(path).endswith(".gz"):
        return gzip.decompress(data)
    return data


def single_member_text(data: bytes) -> bytes:
    """Decompresses ``data`` as exactly one gzip member (what viewers read)."""
    d = zlib.decompressobj(31)
    text = d.decompress(data) + d.flush()
    assert d.eof, "gzip stream is truncated"
    assert d.unused_data == b"", f"{len(d.unused_data)} bytes after the first gzip member"
    return text


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` that rejects NaN / Infinity / -Infinity (what strict parsers do)."""

    def reject(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


def is_strict_json(text: str | bytes) -> bool:
    try:
        strict_loads(text)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return False
    return True


def activity_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The events written for activities (X and instant events on a numeric pid), in order."""
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") in ("X", "i") and isinstance(e.get("pid"), int) and "cat" in e
    ]


def json_string_identity(s: str) -> str:
    """What a JSON string round-trip can preserve of ``s``: a surrogate pair given as two
    lone surrogates reads back as the one character it encodes (``json.dumps`` writes both
    the same way)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def normalize_strings(value: Any) -> Any:
    """``value`` (parsed JSON) with every string, keys included, through
    :func:`json_string_identity`, so that strings holding lone surrogates compare by their
    UTF-16 code units, as JSON defines them."""
    if isinstance(value, str):
        return json_string_identity(value)
    if isinstance(value, list):
        return [normalize_strings(v) for v in value]
    if isinstance(value, dict):
        return {json_string_identity(k): normalize_strings(v) for k, v in value.items()}
    return value


def kinetrace_trace(
    result: Any, path: Path, metadata: Any = None, **kwargs: Any
) -> tuple[bytes, Any]:
    """Exports with kinetrace and returns (bytes, strictly parsed trace)."""
    kinetrace.export_chrome_trace(result, path, metadata, **kwargs)
    data = read_trace(path)
    return data, strict_loads(data)


def assert_valid_trace(path: Path) -> dict[str, Any]:
    """A complete, strictly valid trace (kinetrace's own validator and json agree)."""
    report = _kinetrace.check_trace(str(path))
    assert report["valid"], report["errors"]
    data = Path(path).read_bytes()
    trace = strict_loads(single_member_text(data) if path.name.endswith(".gz") else data)
    assert trace["traceName"] == str(path)
    assert len(trace["traceEvents"]) == report["info"]["events"]
    return trace
