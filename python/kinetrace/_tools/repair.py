""":func:`repair_trace` (``kinetrace repair``): the best loadable trace a damaged file holds.

The source (``.json``, or gzip with any number of members) is streamed through Rust with the
GIL released (``src/tools/repair/``, the tolerant reader in ``src/json/tolerant.rs``) and never
modified; the destination appears atomically, or not at all. What is changed, each counted
with its first places (:class:`Change`):

- gzip: what decompresses before a corrupt or truncated point is kept; several members
  become one; data after the last member that is not gzip is dropped;
- a text that ends early keeps every complete event before the cut, byte for byte, and the
  document is closed after it;
- in strings: a raw ``"`` is escaped where the string's end is clear (the first ``"``
  followed by what can follow the string), a backslash starting no valid escape is
  escaped, a raw control character is escaped, invalid UTF-8 becomes U+FFFD; ``NaN``,
  ``Infinity`` and other bare words become strings, as kinetrace's export writes them;
  stray commas go; an event that still does not read is dropped and counted, and reading
  goes on at the next line that starts an event;
- elements of ``traceEvents`` that are not objects are dropped, a top-level array of events
  (the JSON Array Format, which loads as it is) is wrapped in ``{"traceEvents": ...}``, its
  events byte for byte, and closed when its ``]`` was left off; a missing ``traceEvents`` is
  added, text after the top-level value is dropped;
- ``untangle=True``: ``X`` events Perfetto would drop for overlapping on their thread move
  to extra thread lanes of the same process (``stream 7 (overlap 1)``), with their flow
  ends.

A source in the object form with nothing to repair is copied unchanged (``changes`` is
empty): a plain ``.json`` destination is byte-identical, a ``.gz`` one holds the same text as
one gzip member.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import gzip_settings
from kinetrace._text import size
from kinetrace._tools.check import DEFAULT_EXAMPLES, Example

__all__ = ["Change", "RepairReport", "repair_trace"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One kind of change :func:`repair_trace` made, counted, with its first places (offsets
    in the source's decompressed JSON)."""

    #: ``gzip_damage``, ``gzip_members``, ``truncated``, ``unreadable_tail``,
    #: ``trailing_data``, ``wrapped_array``, ``closed_array``, ``added_trace_events``,
    #: ``dropped_members``, ``dropped_events``, ``dropped_elements``, ``escaped_quotes``,
    #: ``escaped_backslashes``, ``escaped_control_characters``, ``replaced_invalid_utf8``,
    #: ``non_finite_numbers``, ``bare_words``, ``commas``, ``moved_slices``,
    #: ``added_lanes``.
    kind: str
    count: int
    message: str
    examples: tuple[Example, ...]


@dataclasses.dataclass(frozen=True)
class RepairReport:
    """What :func:`repair_trace` wrote."""

    #: The destination, and the source it was repaired from.
    path: str
    source: str
    #: The changes; empty when there was nothing to repair (the text was copied unchanged).
    changes: tuple[Change, ...]
    #: Bytes of JSON read from the source (decompressed) and written.
    json_bytes_read: int
    json_bytes_written: int
    #: Elements of ``traceEvents`` read, and events written.
    events_read: int
    events_written: int
    seconds: float

    @property
    def nothing_to_repair(self) -> bool:
        """The source loaded as it was (and nothing was to be untangled)."""
        return not self.changes

    def change(self, kind: str) -> Change | None:
        """The change of ``kind`` (see :attr:`Change.kind`), if any."""
        return next((c for c in self.changes if c.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-serialisable values (``kinetrace repair --json``)."""
        out = dataclasses.asdict(self)
        out["nothing_to_repair"] = self.nothing_to_repair
        for c in out["changes"]:
            c["examples"] = list(c["examples"])
        out["changes"] = list(out["changes"])
        return out

    def format(self) -> str:
        """A human-readable report (what ``kinetrace repair`` prints)."""
        rate = self.json_bytes_read / 1e6 / max(self.seconds, 1e-9)
        head = (
            f"{self.source} -> {self.path}: {self.events_written:,} events, "
            f"{size(self.json_bytes_written)} of JSON in {self.seconds:.2f} s "
            f"({rate:.0f} MB/s of JSON read)"
        )
        if self.nothing_to_repair:
            return f"{head}\n  nothing to repair: the trace loads as it is; copied unchanged"
        lines = [head, "changes:"]
        for c in self.changes:
            lines.append(f"  {c.kind}: {c.message}")
            lines.extend(f"    {e.format()}" for e in c.examples)
            if c.count > len(c.examples) and c.examples:
                lines.append(f"    ... ({c.count - len(c.examples):,} more)")
        return "\n".join(lines)


def repair_trace(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    untangle: bool = False,
    compresslevel: int | None = None,
    threads: int | None = None,
    examples: int = DEFAULT_EXAMPLES,
) -> RepairReport:
    """Writes to ``dst`` the best loadable trace the file at ``src`` holds (see the module
    docs), and reports what it changed.

    ``dst`` is gzip (one member, parallel encoder) when its name ends in ``.gz``. It appears
    atomically and replaces an existing file; on any error nothing is left. ``src`` is never
    modified, and may not be ``dst``. With ``untangle``, complete events Perfetto would drop
    for overlapping move to extra thread lanes. ``examples`` places are kept per change.

    Raises:
        TraceFormatError: nothing loadable in the source (no JSON object or array of events
            at its start).
        ValueError: ``dst`` is ``src``; an argument out of range.
        OSError: a file cannot be read or written.
        KeyboardInterrupt: Ctrl-C; nothing is written.
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be an int >= 0, got {examples!r}")
    src_path, dst_path = os.fsdecode(src), os.fsdecode(dst)
    settings = gzip_settings(compresslevel, threads)
    gzip = settings if dst_path.endswith(".gz") else None
    started = time.perf_counter()
    raw = _kinetrace.repair_trace(src_path, dst_path, bool(untangle), gzip, examples)
    return RepairReport(
        path=dst_path,
        source=src_path,
        changes=tuple(
            Change(
                kind=c["kind"],
                count=c["count"],
                message=c["message"],
                examples=tuple(Example(**e) for e in c["examples"]),
            )
            for c in raw["changes"]
        ),
        json_bytes_read=raw["json_bytes_read"],
        json_bytes_written=raw["json_bytes_written"],
        events_read=raw["events_read"],
        events_written=raw["events_written"],
        seconds=time.perf_counter() - started,
    )
