""":func:`check_trace` (``kinetrace check``): what viewers will do with a trace file.

The file (``.json``, or gzip with any number of members) is streamed through Rust with the
GIL released (``src/tools/check.rs``) and reported at three levels:

- **errors**: a viewer cannot load the file. Not strict JSON (RFC 8259: no NaN/Infinity,
  trailing commas, bad escapes, invalid UTF-8 or raw control characters), a text that ends
  early, corrupt or truncated gzip data, neither a top-level object with a ``traceEvents``
  array nor a top-level array of events, elements of ``traceEvents`` that are not objects.
- **warnings**: it loads, but a viewer drops or misplaces something. Flow ends without
  their other end (no arrow); ``X`` events Perfetto drops for overlapping another slice of
  their thread without nesting (Perfetto's import stat
  ``slice_drop_overlapping_complete_event``; the rule is in ``src/tools/overlap.rs``), counted per
  thread; ``X`` events with a negative or no ``dur``, events without ``ts`` (Perfetto drops
  them); events without a string ``ph``; numbers in ``ts``/``dur``/``pid``/``tid``/``id``
  beyond 2^53 (read rounded by every JSON viewer); metadata events naming one process or
  thread twice with different names; a gzip file of several members; a top level that is
  the array of events itself (the JSON Array Format: viewers load it, tools that read
  ``traceEvents`` find nothing), and such an array without its closing ``]`` (allowed by
  the format; viewers load it).
- **info**: the summary (events per phase and category, processes, threads, time span,
  flows).

Every finding is counted, with its first examples (byte offset in the decompressed JSON,
index in ``traceEvents``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from kinetrace import _kinetrace
from kinetrace._text import counts, duration, plural, size

__all__ = [
    "DEFAULT_EXAMPLES",
    "CheckReport",
    "Example",
    "Finding",
    "TraceInfo",
    "TrackCount",
    "check_trace",
]

#: Examples kept per finding by default (every finding is counted).
DEFAULT_EXAMPLES = 5


@dataclasses.dataclass(frozen=True)
class Example:
    """One place a finding (or a repair) was seen."""

    #: Byte offset in the decompressed JSON (None for a repair made at no one place, such
    #: as a thread lane added).
    offset: int | None
    #: Index in ``traceEvents``, when inside it.
    event_index: int | None
    message: str

    def format(self) -> str:
        """``offset N (traceEvents[I]): message``."""
        if self.offset is None:
            return self.message
        where = f"offset {self.offset}"
        if self.event_index is not None:
            where += f" (traceEvents[{self.event_index}])"
        return f"{where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class TrackCount:
    """One thread's share of the ``overlapping_slices`` warning."""

    #: ``pid`` and ``tid`` as JSON text (a number, or a quoted string; ``tid`` empty when
    #: absent).
    pid: str
    tid: str
    #: The thread's name from its ``thread_name`` metadata (JSON text), if any.
    name: str | None
    #: ``X`` events Perfetto drops on it.
    dropped: int


@dataclasses.dataclass(frozen=True)
class Finding:
    """A kind of problem, counted, with its first examples in file order."""

    #: ``syntax``, ``truncated``, ``gzip``, ``not_a_trace``, ``not_an_object`` (errors);
    #: ``unpaired_flows``, ``overlapping_slices``, ``negative_durations``,
    #: ``missing_durations``, ``missing_timestamps``, ``no_phase``, ``imprecise_numbers``,
    #: ``conflicting_names``, ``gzip_members``, ``array_form``, ``unclosed_array``
    #: (warnings).
    kind: str
    level: Literal["error", "warning"]
    count: int
    #: What it means for a viewer.
    message: str
    examples: tuple[Example, ...]
    #: ``overlapping_slices``: the threads with most dropped events, most first, and how
    #: many threads have any.
    tracks: tuple[TrackCount, ...] = ()
    track_count: int = 0
    #: A caveat on the count, if any.
    note: str | None = None

    def format(self, indent: str = "  ") -> list[str]:
        """The finding as lines of text."""
        lines = [f"{indent}{self.kind}: {self.message}"]
        if self.tracks:
            worst = ", ".join(
                f"pid {t.pid} tid {t.tid}{f' {t.name}' if t.name else ''}: {t.dropped:,}"
                for t in self.tracks
            )
            more = self.track_count - len(self.tracks)
            lines.append(f"{indent}  threads: {worst}" + (f" (+{more} more)" if more > 0 else ""))
        lines.extend(f"{indent}  {e.format()}" for e in self.examples)
        if self.count > len(self.examples) and self.examples:
            lines.append(f"{indent}  ... ({self.count - len(self.examples):,} more)")
        if self.note:
            lines.append(f"{indent}  ({self.note})")
        return lines

    @classmethod
    def _from_native(cls, raw: _kinetrace._Finding) -> Finding:
        return cls(
            kind=raw["kind"],
            level=raw["level"],
            count=raw["count"],
            message=raw["message"],
            examples=tuple(Example(**e) for e in raw["examples"]),
            tracks=tuple(TrackCount(**t) for t in raw["tracks"]),
            track_count=raw["track_count"],
            note=raw["note"],
        )


@dataclasses.dataclass(frozen=True)
class TraceInfo:
    """The summary of a trace (as far as it could be read)."""

    #: Size of the file on disk, bytes of JSON read (decompressed), gzip members (0 for
    #: plain JSON).
    file_bytes: int
    json_bytes: int
    gzip_members: int
    #: Top-level keys in file order (at most 64).
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
    #: Flow starts matched with a finish by (``cat``, ``id``), and flow ends left alone.
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

    def format(self) -> list[str]:
        """The summary as lines of text."""
        if self.gzip_members:
            container = f"gzip, {plural(self.gzip_members, 'member')}"
            lines = [
                f"  file        {size(self.file_bytes)} ({container}), "
                f"{size(self.json_bytes)} of JSON"
            ]
        else:
            lines = [f"  file        {size(self.file_bytes)} of JSON"]
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
        return lines


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What :func:`check_trace` found: errors (the file does not load), warnings (it loads,
    but a viewer drops or misplaces something) and the summary."""

    path: str
    #: The whole file was read (an error in the JSON text ends the reading; unpaired flows
    #: are then not reported).
    complete: bool
    errors: tuple[Finding, ...]
    warnings: tuple[Finding, ...]
    info: TraceInfo

    @property
    def valid(self) -> bool:
        """No error: viewers load the file."""
        return not self.errors

    @property
    def clean(self) -> bool:
        """No error and no warning."""
        return not self.errors and not self.warnings

    def finding(self, kind: str) -> Finding | None:
        """The finding of ``kind`` (see :attr:`Finding.kind`), if any."""
        return next((f for f in (*self.errors, *self.warnings) if f.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        """The whole report as plain JSON-serialisable values (``kinetrace check --json``)."""
        out = dataclasses.asdict(self)
        out["valid"] = self.valid
        out["clean"] = self.clean
        info = out["info"]
        info["top_level_keys"] = list(self.info.top_level_keys)
        info["phases"] = dict(self.info.phases)
        info["categories"] = dict(self.info.categories)
        for level in ("errors", "warnings"):
            for f in out[level]:
                f["examples"] = list(f["examples"])
                f["tracks"] = list(f["tracks"])
            out[level] = list(out[level])
        return out

    def format(self) -> str:
        """A human-readable report (what ``kinetrace check`` prints)."""
        if self.errors:
            status = f"DOES NOT LOAD ({plural(len(self.errors), 'error')}"
            if self.warnings:
                status += f", {plural(len(self.warnings), 'warning')}"
            status += ")"
        elif self.warnings:
            status = f"loads, with {plural(len(self.warnings), 'warning')}"
        else:
            status = "loads, nothing to warn about"
        lines = [f"{self.path}: {status}"]
        if self.errors:
            lines.append("errors (viewers cannot load the file):")
            for f in self.errors:
                lines.extend(f.format())
        if self.warnings:
            lines.append("warnings (viewers drop or misplace something):")
            for f in self.warnings:
                lines.extend(f.format())
        lines.append("info:" if self.complete else "info (up to where reading stopped):")
        lines.extend(self.info.format())
        return "\n".join(lines)


def check_trace(
    path: str | bytes | os.PathLike[str], *, examples: int = DEFAULT_EXAMPLES
) -> CheckReport:
    """Checks the trace file at ``path``: what viewers will do with it, in bounded memory.

    ``path`` may be JSON or gzip (one member or several; recognised by its first bytes). A
    trace that does not load is reported (``valid`` is False, the reasons are in
    ``errors``), not raised. ``examples`` places are kept per finding.

    Raises:
        ValueError: ``examples`` is not an int >= 0.
        OSError: the file cannot be read (``FileNotFoundError``, ``IsADirectoryError``,
            ``PermissionError``, ...).
        KeyboardInterrupt: Ctrl-C while checking.
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be an int >= 0, got {examples!r}")
    fs_path = os.fsdecode(path)
    raw = _kinetrace.check_trace(fs_path, examples)
    try:
        file_bytes = os.stat(fs_path).st_size
    except OSError:
        file_bytes = 0
    info = raw["info"]
    return CheckReport(
        path=fs_path,
        complete=raw["complete"],
        errors=tuple(Finding._from_native(f) for f in raw["errors"]),
        warnings=tuple(Finding._from_native(f) for f in raw["warnings"]),
        info=TraceInfo(
            file_bytes=file_bytes,
            json_bytes=info["json_bytes"],
            gzip_members=info["gzip_members"],
            top_level_keys=tuple(info["top_level_keys"]),
            schema_version=info["schema_version"],
            trace_name=info["trace_name"],
            base_time_ns=info["base_time_ns"],
            display_time_unit=info["display_time_unit"],
            events=info["events"],
            phases=info["phases"],
            categories=info["categories"],
            processes=info["processes"],
            threads=info["threads"],
            ts_min=info["ts_min"],
            ts_max=info["ts_max"],
            flows_paired=info["flows_paired"],
            flows_unpaired=info["flows_unpaired"],
            summary_truncated=info["summary_truncated"],
        ),
    )
