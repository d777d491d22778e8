""":func:`check_trace` and :func:`compress_trace` (``kinetrace check`` / ``compress``): tools
for trace files that already exist.

Both stream the file through Rust with the GIL released (constant memory, so multi-GB traces
are fine) and read ``.json`` or gzip with any number of members, recognised by the magic
bytes rather than the name.

- :func:`check_trace` validates strictly (RFC 8259 JSON: no NaN/Infinity, no trailing commas,
  only valid escapes and UTF-8; then the trace: ``traceEvents``, ``ph`` on every event, the
  fields ``X``/``i``/``M`` events need, every flow start matched by a finish) and summarizes
  the trace.
- :func:`compress_trace` rewrites a trace as ONE gzip member with the parallel encoder (some
  viewers read only the first member of a gzip file), checking it on the way with the strict
  reader ``split`` and ``filter`` use: what is not a trace (truncated, NaN, a byte-order
  mark, invalid UTF-8, empty, a second document, a top-level member or event over 64 MiB)
  raises :class:`~kinetrace.TraceFormatError` at the offset of its first fault and leaves
  nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import gzip_settings
from kinetrace._text import counts, duration, plural, size

__all__ = [
    "DEFAULT_MAX_ERRORS",
    "CheckReport",
    "CompressResult",
    "check_trace",
    "compress_trace",
    "is_gzip",
]

#: Error messages kept by default (every error is counted).
DEFAULT_MAX_ERRORS = 50

#: The first bytes of every gzip member.
GZIP_MAGIC = b"\x1f\x8b"


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What :func:`check_trace` found. ``valid`` is False when there is any error."""

    path: str
    #: No errors at all (JSON syntax and trace checks).
    valid: bool
    #: The whole file parsed as JSON (it may still fail the trace checks).
    json_valid: bool
    #: The first messages, each starting ``offset N`` (in the decompressed JSON) and, inside
    #: ``traceEvents``, ``(traceEvents[I])``. A syntax error ends the check and is always
    #: the last message.
    errors: tuple[str, ...]
    #: Every error found (more than ``len(errors)`` when capped).
    error_count: int
    #: Valid but worth knowing (a gzip file of several members).
    warnings: tuple[str, ...]
    #: Size of the file on disk.
    file_bytes: int
    #: Bytes of JSON read (decompressed).
    json_bytes: int
    #: Gzip members (0 for plain JSON).
    gzip_members: int
    #: Top-level keys in file order.
    top_level_keys: tuple[str, ...]
    schema_version: Any
    trace_name: Any
    base_time_ns: Any
    display_time_unit: Any
    #: Elements of ``traceEvents``.
    events: int
    #: Events per ``ph``, most frequent first.
    phases: Mapping[str, int] = dataclasses.field(hash=False)
    #: ``X`` and ``i``/``I`` events per ``cat`` (``""`` when missing), most frequent first.
    categories: Mapping[str, int] = dataclasses.field(hash=False)
    #: Distinct ``pid`` values, and distinct (``pid``, ``tid``) pairs.
    processes: int
    threads: int
    #: Earliest ``ts`` and latest ``ts + dur`` in microseconds (None without timestamps).
    ts_min: float | None
    ts_max: float | None
    #: Flow starts matched with a finish by (``cat``, ``id``), and flow events left alone.
    flows_paired: int
    flows_unpaired: int
    #: More distinct values than the checker keeps: the counts are lower bounds.
    summary_truncated: bool

    @property
    def span_us(self) -> float | None:
        """``ts_max - ts_min`` in microseconds."""
        if self.ts_min is None or self.ts_max is None:
            return None
        return self.ts_max - self.ts_min

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-serialisable values."""
        out = dataclasses.asdict(self)
        for key in ("errors", "warnings", "top_level_keys"):
            out[key] = list(out[key])
        out["phases"] = dict(self.phases)
        out["categories"] = dict(self.categories)
        return out

    def format(self) -> str:
        """A human-readable summary (what ``kinetrace check`` prints)."""
        if self.valid:
            status = "valid"
        elif self.json_valid:
            status = f"INVALID trace ({plural(self.error_count, 'error')}; the JSON is valid)"
        else:
            status = f"INVALID ({plural(self.error_count, 'error')})"
        lines = [f"{self.path}: {status}"]
        if self.gzip_members:
            container = f"gzip, {plural(self.gzip_members, 'member')}"
            lines.append(
                f"  file        {size(self.file_bytes)} ({container}), "
                f"{size(self.json_bytes)} of JSON"
            )
        else:
            lines.append(f"  file        {size(self.file_bytes)} of JSON")
        header = [
            f"{key} {json.dumps(value)}"
            for key, value in (
                ("schemaVersion", self.schema_version),
                ("displayTimeUnit", self.display_time_unit),
                ("baseTimeNanoseconds", self.base_time_ns),
            )
            if value is not None
        ]
        if header:
            lines.append(f"  header      {', '.join(header)}")
        if self.trace_name is not None:
            lines.append(f"  traceName   {json.dumps(self.trace_name)}")
        if self.top_level_keys:
            lines.append(f"  keys        {', '.join(self.top_level_keys)}")
        lines.append(f"  events      {self.events:,}{counts(self.phases)}")
        if self.categories:
            lines.append(f"  categories  {counts(self.categories, lead='').strip()}")
        lines.append(f"  processes   {self.processes:,}, threads {self.threads:,}")
        span = self.span_us
        if span is not None:
            lines.append(
                f"  time span   {duration(span)} (ts {self.ts_min:.3f} .. {self.ts_max:.3f} us)"
            )
        lines.append(
            f"  flows       {self.flows_paired:,} paired, {self.flows_unpaired:,} unpaired"
        )
        if self.summary_truncated:
            lines.append("  (some counts are lower bounds: too many distinct values)")
        if self.warnings:
            lines.append("warnings:")
            lines.extend(f"  {w}" for w in self.warnings)
        if self.errors:
            shown = len(self.errors)
            more = "" if shown >= self.error_count else f" (first {shown} of {self.error_count:,})"
            lines.append(f"errors{more}:")
            lines.extend(f"  {e}" for e in self.errors)
        return "\n".join(lines)


def check_trace(
    path: str | bytes | os.PathLike[str], *, max_errors: int = DEFAULT_MAX_ERRORS
) -> CheckReport:
    """Validates the trace file at ``path`` strictly and summarizes it, in constant memory.

    ``path`` may be JSON or gzip (one member or several; recognised by its first bytes).
    An invalid trace is reported (``valid`` is False, the reasons are in ``errors``), not
    raised.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError``, ``IsADirectoryError``,
            ``PermissionError``, ...).
        KeyboardInterrupt: Ctrl-C while checking.
    """
    if isinstance(max_errors, bool) or not isinstance(max_errors, int) or max_errors < 0:
        raise ValueError(f"max_errors must be an int >= 0, got {max_errors!r}")
    fs_path = os.fsdecode(path)
    raw = _kinetrace.check_trace(fs_path, max_errors)
    try:
        file_bytes = os.stat(fs_path).st_size
    except OSError:
        file_bytes = 0
    return CheckReport(
        path=fs_path,
        valid=raw["valid"],
        json_valid=raw["json_valid"],
        errors=tuple(raw["errors"]),
        error_count=raw["error_count"],
        warnings=tuple(raw["warnings"]),
        file_bytes=file_bytes,
        json_bytes=raw["json_bytes"],
        gzip_members=raw["gzip_members"],
        top_level_keys=tuple(raw["top_level_keys"]),
        schema_version=raw["schema_version"],
        trace_name=raw["trace_name"],
        base_time_ns=raw["base_time_ns"],
        display_time_unit=raw["display_time_unit"],
        events=raw["events"],
        phases=raw["phases"],
        categories=raw["categories"],
        processes=raw["processes"],
        threads=raw["threads"],
        ts_min=raw["ts_min"],
        ts_max=raw["ts_max"],
        flows_paired=raw["flows_paired"],
        flows_unpaired=raw["flows_unpaired"],
        summary_truncated=raw["summary_truncated"],
    )


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
