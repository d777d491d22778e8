"""Traces people can open: ``kinetrace split`` and ``kinetrace filter``, for any trace file
and at export time.

Viewers stop well short of the traces a long run produces (``chrome://tracing`` at a few
hundred MB of JSON, Perfetto's UI at about 1-2 GB, TensorBoard's trace view earlier). Two
ways to make a trace they open:

- :func:`split_trace` cuts it into parts, each a contiguous time window of at most
  ``max_mb`` MB of JSON and each a complete trace on its own;
- :func:`filter_trace` keeps only the events a :class:`Keep` selects (categories, a
  minimum duration, a time window, processes).

Both stream the file through Rust with the GIL released (``.json`` or gzip of any number
of members), copy every kept event's text unchanged, keep a flow only when all its ends
are kept (in the same part), and write the process/thread metadata events only for the
processes and threads that remain. See ``src/tools/split.rs`` for the rules and the memory bound.

``kinetrace.export_chrome_trace(..., keep=..., split_mb=...)`` and
``tensorboard_trace_handler(..., keep=..., split_mb=...)`` apply the same rules to an
export: the full trace is written to a private temporary file beside the destination, then
filtered and/or split from it, and the temporary file removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import gzip_settings

__all__ = [
    "FilterResult",
    "Keep",
    "Part",
    "SplitResult",
    "as_keep",
    "check_part_size",
    "export_cut",
    "filter_trace",
    "split_trace",
]

#: Bytes in the MB of ``max_mb`` / ``split_mb`` / ``--max-mb``.
MB = 1_000_000


@dataclasses.dataclass(frozen=True)
class Keep:
    """Which events a filtered trace keeps; the default keeps everything.

    Events are kept when they pass every criterion given. Metadata (``M``) events follow
    what remains; a flow is kept only when the events at all its ends are kept.
    """

    #: Keep only events whose ``cat`` is one of these (events without ``cat`` pass).
    include_cats: tuple[str, ...] = ()
    #: Drop events whose ``cat`` is one of these.
    exclude_cats: tuple[str, ...] = ()
    #: Drop events with a ``dur`` below this many microseconds.
    min_dur_us: float | None = None
    #: Keep only events overlapping [start, end) in microseconds of the trace's ``ts``.
    window_us: tuple[float, float] | None = None
    #: Keep only events of these processes (the ``pid`` as written: a number, or a string
    #: such as ``"Spans"``).
    pids: tuple[int | str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("include_cats", "exclude_cats"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(c, str) for c in value):
                raise TypeError(f"{name} must be a sequence of str, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        pids: Any = self.pids  # checked: callers may pass anything
        if isinstance(pids, (str, int)) or not all(
            isinstance(p, (str, int)) and not isinstance(p, bool) for p in pids
        ):
            raise TypeError(f"pids must be a sequence of int or str, got {pids!r}")
        object.__setattr__(self, "pids", tuple(pids))
        if self.min_dur_us is not None:
            if isinstance(self.min_dur_us, bool) or not isinstance(self.min_dur_us, (int, float)):
                raise TypeError(f"min_dur_us must be a number, got {self.min_dur_us!r}")
            if not 0 <= self.min_dur_us < float("inf"):
                raise ValueError(f"min_dur_us must be >= 0 and finite, got {self.min_dur_us}")
        if self.window_us is not None:
            start, end = self.window_us
            if not (float("-inf") < float(start) < float(end) < float("inf")):
                raise ValueError(
                    f"window_us must be (start, end) with start < end, got {start}, {end}"
                )
            object.__setattr__(self, "window_us", (float(start), float(end)))

    def _native(
        self,
    ) -> tuple[list[str], list[str], float | None, tuple[float, float] | None, list[str]]:
        return (
            list(self.include_cats),
            list(self.exclude_cats),
            None if self.min_dur_us is None else float(self.min_dur_us),
            self.window_us,
            [str(p) for p in self.pids],
        )


@dataclasses.dataclass(frozen=True)
class FilterResult:
    """What :func:`filter_trace` wrote."""

    path: str
    #: Events of the source's ``traceEvents``, and events written (metadata included).
    events_read: int
    events_written: int
    metadata_written: int
    #: Flow ends dropped because another end of their flow was not kept.
    flow_events_cut: int
    #: Flow ends dropped because their flow has no other end in the source at all (many in
    #: real GPU traces: not drawn by viewers either).
    flow_events_unpaired: int
    json_bytes_read: int
    json_bytes_written: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of a split: a complete trace of the window [start_us, end_us)."""

    path: str
    start_us: float
    end_us: float
    #: Events written, metadata included, and its size as JSON.
    events: int
    json_bytes: int


@dataclasses.dataclass(frozen=True)
class SplitResult:
    """What :func:`split_trace` wrote."""

    parts: tuple[Part, ...]
    events_read: int
    #: Flow ends dropped because their flow crosses a window edge.
    flow_events_cut: int
    #: Flow ends dropped because their flow has no other end in the source at all (many in
    #: real GPU traces: not drawn by viewers either).
    flow_events_unpaired: int
    #: JSON read per pass (the input is read twice).
    json_bytes_read: int
    #: Parts larger than asked (more than that much JSON within one histogram cell).
    oversized_parts: int
    seconds: float

    @property
    def paths(self) -> list[str]:
        """The part files, in time order."""
        return [p.path for p in self.parts]


def _gzip_settings(
    gzip: bool, compresslevel: int | None, threads: int | None
) -> tuple[int, int] | None:
    """The encoder's settings (checked even where unused, so a typo never passes), or None
    for plain JSON."""
    settings = gzip_settings(compresslevel, threads)
    return settings if gzip else None


def check_part_size(max_mb: float) -> float:
    """``max_mb`` if it is a usable part size (a finite number of MB above 0).

    Raises:
        TypeError: not a number.
        ValueError: not above 0, or not finite.
    """
    if isinstance(max_mb, bool) or not isinstance(max_mb, (int, float)):
        raise TypeError(f"the part size must be a number of MB, not {type(max_mb).__name__}")
    if not 0 < max_mb < float("inf"):
        raise ValueError(f"the part size must be more than 0 MB, got {max_mb}")
    return max_mb


def _max_bytes(max_mb: float) -> int:
    return max(1, int(check_part_size(max_mb) * MB))


def as_keep(keep: Keep | Mapping[str, Any] | None) -> Keep | None:
    """``keep=`` as a :class:`Keep` (a mapping gives its fields).

    Raises:
        TypeError: neither a Keep, a mapping nor None; a field of the wrong type.
        ValueError: a field out of range.
    """
    if keep is None or isinstance(keep, Keep):
        return keep
    if isinstance(keep, Mapping):
        return Keep(**keep)
    raise TypeError(
        f"keep must be a kinetrace.Keep or a dict of its fields, not {type(keep).__name__}"
    )


def filter_trace(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    keep: Keep | None = None,
    *,
    compresslevel: int | None = None,
    threads: int | None = None,
    _trace_name: str | None = None,
    **criteria: Any,
) -> FilterResult:
    """Writes to ``dst`` the trace at ``src`` with only the events ``keep`` selects.

    Criteria may be given as a :class:`Keep` or as its fields (``exclude_cats=["kernel"]``),
    not both. ``dst`` is gzip (one member, parallel encoder) when its name ends in ``.gz``.
    The output appears atomically and only when something was kept.

    Raises:
        ValueError: the source is not a valid trace (the message names the file and the
            offset), the criteria are out of range, or they select no event.
        OSError: a file cannot be read or written.
        KeyboardInterrupt: Ctrl-C; nothing is written.
    """
    if keep is None:
        keep = Keep(**criteria)
    elif criteria:
        raise TypeError("give the criteria as a Keep or as keyword arguments, not both")
    src_path, dst_path = os.fsdecode(src), os.fsdecode(dst)
    gzip = _gzip_settings(dst_path.endswith(".gz"), compresslevel, threads)
    started = time.perf_counter()
    raw = _kinetrace.filter_trace(src_path, dst_path, *keep._native(), gzip, _trace_name)
    return FilterResult(path=dst_path, seconds=time.perf_counter() - started, **raw)


def split_trace(
    src: str | os.PathLike[str],
    max_mb: float,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    gzip: bool | None = None,
    compresslevel: int | None = None,
    threads: int | None = None,
    stem: str | None = None,
    suffix: str | None = None,
    _trace_name: str | None = None,
) -> SplitResult:
    """Splits the trace at ``src`` into parts of at most ``max_mb`` MB (10**6 bytes) of JSON.

    Each part covers a contiguous time window and is a complete trace: every top-level key
    of the source, a ``kinetrace_part`` key (``index``, ``count``, ``start_us``,
    ``end_us``, ``source``), the events that start in its window, the flows whose ends are
    all in it, and the metadata of its processes and threads. A part is larger than
    ``max_mb`` only when more than that falls in one histogram cell (``oversized_parts``).
    Parts are named ``<stem>.part-001-of-012<suffix>`` in ``out_dir`` (default: beside
    ``src``), ``stem`` being the source's name without ``.json``/``.json.gz`` and
    ``suffix`` ``.json.gz`` for gzip parts (``gzip=None``: like the source) or ``.json``.
    They appear together at the end, or not at all. A missing ``out_dir`` is created (and
    removed again if the split fails).

    Raises:
        ValueError: the source is not a valid trace (the message names the file and the
            offset), ``max_mb`` is not positive or too small for the header, or the split
            would make more than 999 parts.
        OSError: a file cannot be read, or ``out_dir`` cannot be written.
        KeyboardInterrupt: Ctrl-C; no part is left.
    """
    src_path = os.fsdecode(src)
    max_bytes = _max_bytes(max_mb)
    like_source = gzip is None
    settings = _gzip_settings(True if gzip is None else gzip, compresslevel, threads)
    started = time.perf_counter()
    out_path = None if out_dir is None else os.fsdecode(out_dir)
    created = [] if out_path is None else _make_dirs(out_path)
    try:
        raw_parts, stats = _kinetrace.split_trace(
            src_path, max_bytes, out_path, settings, like_source, stem, suffix, _trace_name
        )
    except BaseException:
        for directory in reversed(created):  # nothing is left, not even an empty folder
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    parts = tuple(Part(**p) for p in raw_parts)
    return SplitResult(parts=parts, seconds=time.perf_counter() - started, **stats)


def _make_dirs(path: str) -> list[str]:
    """Creates ``path`` and its missing parents, like ``os.makedirs``; returns the folders
    it created, outermost first."""
    missing: list[str] = []
    head = os.path.abspath(path)
    while not os.path.lexists(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    created: list[str] = []
    try:
        for directory in reversed(missing):
            os.mkdir(directory)
            created.append(directory)
    except BaseException:
        for directory in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    return created


@contextlib.contextmanager
def _private_temp(directory: str, name: str) -> Iterator[str]:
    """A new temporary file beside the destination (empty; named as every temporary is, so
    one a killed process leaves is removed by a later run), removed afterwards."""
    path = os.fsdecode(_kinetrace.create_temporary(directory, name))
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def export_cut(
    export: Any,
    path: str,
    keep: Keep | dict[str, Any] | None,
    split_mb: float | None,
    compresslevel: int | None,
    threads: int | None,
    stem: str | None = None,
    suffix: str | None = None,
) -> FilterResult | SplitResult:
    """An export with ``keep`` and/or ``split_mb``: ``export(tmp)`` writes the full trace to a
    private plain-JSON temporary file beside ``path``, which is then filtered into ``path``
    (``keep``) and/or split into parts named after ``path`` (``split_mb``)."""
    keep = as_keep(keep)
    max_bytes = None if split_mb is None else _max_bytes(split_mb)
    is_gzip = path.endswith(".gz")
    _gzip_settings(is_gzip, compresslevel, threads)  # range checks before any work
    directory, name = os.path.split(os.path.abspath(path))
    with _private_temp(directory, name) as full:
        export(full)
        if max_bytes is None:
            assert keep is not None
            return filter_trace(
                full, path, keep, compresslevel=compresslevel, threads=threads, _trace_name=path
            )
        if stem is None:
            stem = name
            # TensorBoard lists files ending .pt.trace.json[.gz]: parts keep that ending.
            for cut in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".gz"):
                if stem.endswith(cut) and len(stem) > len(cut):
                    stem = stem[: -len(cut)]
                    if cut.startswith(".pt.") and suffix is None:
                        suffix = cut
                    break
        if keep is None:
            return _split(
                full, max_bytes, directory, is_gzip, compresslevel, threads, stem, suffix, path
            )
        with _private_temp(directory, name + ".kept") as kept:
            filter_trace(full, kept, keep, _trace_name=path)
            return _split(
                kept, max_bytes, directory, is_gzip, compresslevel, threads, stem, suffix, path
            )


def _split(
    src: str,
    max_bytes: int,
    out_dir: str,
    gzip: bool,
    compresslevel: int | None,
    threads: int | None,
    stem: str,
    suffix: str | None,
    trace_name: str,
) -> SplitResult:
    return split_trace(
        src,
        max_bytes / MB,
        out_dir=out_dir,
        gzip=gzip,
        compresslevel=compresslevel,
        threads=threads,
        stem=stem,
        suffix=suffix,
        _trace_name=trace_name,
    )
