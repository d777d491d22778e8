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
processes and threads that remain. See ``src/split.rs`` for the rules and the memory bound.

``kinetrace.export_chrome_trace(..., keep=..., split_mb=...)`` and
``tensorboard_trace_handler(..., keep=..., split_mb=...)`` apply the same rules to an
export: the full trace is written to a private temporary file beside the destination, then
filtered and/or split from it, and the temporary file removed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from kinetrace import _kinetrace

__all__ = [
    "FilterResult",
    "Keep",
    "Part",
    "SplitResult",
    "add_filter_parser",
    "add_split_parser",
    "export_cut",
    "filter_main",
    "filter_trace",
    "split_main",
    "split_trace",
]

#: Bytes in the MB of ``max_mb`` / ``split_mb`` / ``--max-mb``.
MB = 1_000_000

_GZIP_MAGIC = b"\x1f\x8b"


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
        if isinstance(self.pids, (str, int)) or not all(
            isinstance(p, (str, int)) and not isinstance(p, bool) for p in self.pids
        ):
            raise TypeError(f"pids must be a sequence of int or str, got {self.pids!r}")
        object.__setattr__(self, "pids", tuple(self.pids))
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
    from kinetrace._env import DEFAULT_COMPRESSLEVEL, available_cpus

    level = DEFAULT_COMPRESSLEVEL if compresslevel is None else compresslevel
    n_threads = available_cpus() if threads is None else threads
    for name, value, low, high in (("compresslevel", level, 0, 9), ("threads", n_threads, 1, 256)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not low <= value <= high:
            raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return (level, n_threads) if gzip else None


def _max_bytes(max_mb: float) -> int:
    if isinstance(max_mb, bool) or not isinstance(max_mb, (int, float)):
        raise TypeError(f"the part size must be a number of MB, not {type(max_mb).__name__}")
    if not 0 < max_mb < float("inf"):
        raise ValueError(f"the part size must be more than 0 MB, got {max_mb}")
    return max(1, int(max_mb * MB))


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
        raw = _kinetrace.split_trace(
            src_path, max_bytes, out_path, settings, like_source, stem, suffix, _trace_name
        )
    except BaseException:
        for directory in reversed(created):  # nothing is left, not even an empty folder
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise
    parts = tuple(
        Part(
            path=os.fsdecode(p["path"]),
            start_us=p["start_us"],
            end_us=p["end_us"],
            events=p["events"],
            json_bytes=p["json_bytes"],
        )
        for p in raw.pop("parts")
    )
    return SplitResult(parts=parts, seconds=time.perf_counter() - started, **raw)


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
    if isinstance(keep, dict):
        keep = Keep(**keep)
    elif keep is not None and not isinstance(keep, Keep):
        raise TypeError(
            f"keep must be a kinetrace.Keep or a dict of its fields, not {type(keep).__name__}"
        )
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


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _error(prog: str, exc: BaseException) -> int:
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        text = exc.strerror
    else:
        text = str(exc)
    print(f"{prog}: error: {text}", file=sys.stderr)
    return 1


def split_main(args: argparse.Namespace) -> int:
    """``kinetrace split SRC --max-mb N [--out-dir DIR]``.

    Returns:
        0 on success, 1 when it failed (bad trace, unwritable directory, ...).
    """
    prog = "kinetrace split"
    try:
        result = split_trace(
            args.src,
            args.max_mb,
            out_dir=args.out_dir,
            compresslevel=args.level,
            threads=args.threads,
        )
    except (OSError, ValueError, TypeError) as exc:
        return _error(prog, exc)
    mb_s = 2 * result.json_bytes_read / 1e6 / max(result.seconds, 1e-9)
    print(
        f"{args.src}: {_size(result.json_bytes_read)} of JSON, {result.events_read:,} events "
        f"-> {len(result.parts)} part{'s' if len(result.parts) != 1 else ''} in "
        f"{result.seconds:.2f} s (2 passes, {mb_s:.0f} MB/s of JSON read)"
    )
    for p in result.parts:
        print(
            f"  {p.path}  {_size(p.json_bytes)} of JSON, {p.events:,} events, "
            f"ts {p.start_us:.3f} .. {p.end_us:.3f} us"
        )
    if result.flow_events_cut:
        print(f"  {result.flow_events_cut:,} flow events dropped: their flow crosses a window edge")
    if result.oversized_parts:
        print(
            f"  {result.oversized_parts} part(s) larger than {args.max_mb} MB: more than that "
            "falls within one histogram cell"
        )
    return 0


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _window(text: str) -> tuple[float, float]:
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        window = (float(start), float(end))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START_US:END_US, got {text!r}") from None
    if not window[0] < window[1]:
        raise argparse.ArgumentTypeError(f"START must be less than END, got {text!r}")
    return window


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _add_gzip_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-l", "--level", type=_int, default=None, help="gzip level 0-9 for gzip output"
    )
    parser.add_argument(
        "-j",
        "--threads",
        type=_int,
        default=None,
        help="compression threads (default: the cores available)",
    )


def add_split_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the ``split`` subcommand (``func=split_main``)."""
    parser = subparsers.add_parser(
        "split",
        help="split a trace into parts a viewer can open",
        description=(
            "Split a Chrome/Kineto trace (.json, or gzip with any number of members) into "
            "parts that each cover a contiguous time window and hold at most N MB of JSON. "
            "Each part is a complete trace: every top-level key of the source plus "
            "kinetrace_part (index, count, window), the events starting in its window, the "
            "flows whose ends are all in it, and the metadata of its processes and threads. "
            "Parts are named <stem>.part-001-of-012.json[.gz] (gzip like the source) and "
            "appear only when all are written. Exit status: 0 done, 1 failed."
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the trace to split")
    parser.add_argument(
        "--max-mb",
        type=_positive_float,
        required=True,
        metavar="N",
        help="most MB of JSON per part",
    )
    parser.add_argument(
        "--out-dir", metavar="DIR", default=None, help="where the parts go (default: beside SRC)"
    )
    _add_gzip_options(parser)
    parser.set_defaults(func=split_main)
    return parser


def _pid(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def filter_main(args: argparse.Namespace) -> int:
    """``kinetrace filter SRC DST [criteria]``.

    Returns:
        0 on success, 1 when it failed (bad trace, nothing selected, ...).
    """
    prog = "kinetrace filter"
    try:
        keep = Keep(
            include_cats=tuple(args.include_cat or ()),
            exclude_cats=tuple(args.exclude_cat or ()),
            min_dur_us=args.min_dur_us,
            window_us=args.window,
            pids=tuple(_pid(p) for p in (args.pid or ())),
        )
        result = filter_trace(
            args.src, args.dst, keep, compresslevel=args.level, threads=args.threads
        )
    except (OSError, ValueError, TypeError) as exc:
        return _error(prog, exc)
    print(
        f"{args.src} -> {result.path}: {result.events_written:,} of {result.events_read:,} "
        f"events kept ({result.metadata_written:,} metadata), {_size(result.json_bytes_written)} "
        f"of {_size(result.json_bytes_read)} of JSON in {result.seconds:.2f} s"
        + (
            f"; {result.flow_events_cut:,} flow events dropped (an end was not kept)"
            if result.flow_events_cut
            else ""
        )
    )
    return 0


def add_filter_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the ``filter`` subcommand (``func=filter_main``)."""
    parser = subparsers.add_parser(
        "filter",
        help="keep only some events of a trace",
        description=(
            "Write to DST the events of the trace SRC that pass every criterion given, each "
            "unchanged; flows only when all their ends are kept, process/thread metadata "
            "only for what remains. DST is gzip when its name ends in .gz. "
            "Exit status: 0 done, 1 failed (including: nothing selected)."
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the trace to filter")
    parser.add_argument("dst", metavar="DST", help="the filtered trace")
    parser.add_argument(
        "--include-cat", action="append", metavar="CAT", help="keep only this category (repeatable)"
    )
    parser.add_argument(
        "--exclude-cat", action="append", metavar="CAT", help="drop this category (repeatable)"
    )
    parser.add_argument(
        "--min-dur-us", type=_non_negative_float, metavar="X", help="drop events shorter than X us"
    )
    parser.add_argument(
        "--window",
        type=_window,
        metavar="START_US:END_US",
        help="keep events overlapping this window of ts",
    )
    parser.add_argument(
        "--pid", action="append", metavar="P", help="keep only this process (repeatable)"
    )
    _add_gzip_options(parser)
    parser.set_defaults(func=filter_main)
    return parser
