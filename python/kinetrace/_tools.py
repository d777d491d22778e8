"""``kinetrace check`` and ``kinetrace compress``: tools for trace files that already exist.

Both stream the file through Rust with the GIL released (constant memory, so multi-GB traces
are fine) and read ``.json`` or gzip with any number of members, recognised by the magic
bytes rather than the name.

- :func:`check_trace` validates strictly (RFC 8259 JSON: no NaN/Infinity, no trailing commas,
  only valid escapes and UTF-8; then the trace: ``traceEvents``, ``ph`` on every event, the
  fields ``X``/``i``/``M`` events need, every flow start matched by a finish) and summarizes
  the trace.
- ``kinetrace compress`` rewrites a trace as ONE gzip member with the parallel encoder (some
  viewers read only the first member of a gzip file), checking it on the way with the strict
  reader ``split`` and ``filter`` use: what is not a trace (truncated, NaN, a byte-order
  mark, invalid UTF-8, empty, a second document, a top-level member or event over 64 MiB)
  fails at the offset of its first fault and leaves nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import DEFAULT_COMPRESSLEVEL, available_cpus

__all__ = [
    "CheckReport",
    "add_check_parser",
    "add_compress_parser",
    "check_main",
    "check_trace",
    "compress_main",
]

#: Error messages kept by default (every error is counted).
DEFAULT_MAX_ERRORS = 50

_GZIP_MAGIC = b"\x1f\x8b"


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
            status = f"INVALID trace ({_plural(self.error_count, 'error')}; the JSON is valid)"
        else:
            status = f"INVALID ({_plural(self.error_count, 'error')})"
        lines = [f"{self.path}: {status}"]
        if self.gzip_members:
            container = f"gzip, {_plural(self.gzip_members, 'member')}"
            lines.append(
                f"  file        {_size(self.file_bytes)} ({container}), "
                f"{_size(self.json_bytes)} of JSON"
            )
        else:
            lines.append(f"  file        {_size(self.file_bytes)} of JSON")
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
        lines.append(f"  events      {self.events:,}{_counts(self.phases)}")
        if self.categories:
            lines.append(f"  categories  {_counts(self.categories, lead='').strip()}")
        lines.append(f"  processes   {self.processes:,}, threads {self.threads:,}")
        span = self.span_us
        if span is not None:
            lines.append(
                f"  time span   {_duration(span)} (ts {self.ts_min:.3f} .. {self.ts_max:.3f} us)"
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


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _size(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _duration(us: float) -> str:
    if us < 1000:
        return f"{us:.3f} us"
    if us < 1_000_000:
        return f"{us / 1000:.3f} ms"
    return f"{us / 1_000_000:.3f} s"


def _counts(counts: Mapping[str, int], lead: str = ": ", limit: int = 12) -> str:
    if not counts:
        return ""
    items = list(counts.items())
    text = ", ".join(f"{k if k else '(none)'} {n:,}" for k, n in items[:limit])
    if len(items) > limit:
        text += f", ... ({len(items) - limit} more)"
    return lead + text


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


def check_main(args: argparse.Namespace) -> int:
    """``kinetrace check FILE``: prints the report.

    Returns:
        0 when the trace is valid, 1 when it is not, 2 when it cannot be read.
    """
    try:
        report = check_trace(args.file, max_errors=args.max_errors)
    except OSError as exc:
        print(f"kinetrace check: {_os_error_text(exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return 0 if report.valid else 1


def _os_error_text(exc: OSError) -> str:
    """``[Errno 2] cannot open x: No such file or directory`` without the errno part."""
    if exc.errno is not None and exc.strerror:
        return exc.strerror
    return str(exc)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_check_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the ``check`` subcommand (``func=check_main``) to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "check",
        help="validate a trace file strictly and summarize it",
        description=(
            "Validate a Chrome trace file (.json, or gzip with any number of members) "
            "strictly and print a summary: strict JSON (no NaN/Infinity, trailing commas, "
            "bad escapes, invalid UTF-8 or raw control characters), a traceEvents array, "
            "ph on every event, name/cat/ts/dur on X events, name/ts on instant events, "
            "name/args on M events, every flow start (s) matched by a finish (f) with the "
            "same cat and id. Streams the file in constant memory. Exit status: 0 valid, "
            "1 invalid, 2 unreadable."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="the trace (.json or gzip)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--max-errors",
        type=_non_negative_int,
        default=DEFAULT_MAX_ERRORS,
        metavar="N",
        help=f"error messages to show (all are counted; default {DEFAULT_MAX_ERRORS})",
    )
    parser.set_defaults(func=check_main)
    return parser


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def compress_main(args: argparse.Namespace) -> int:
    """``kinetrace compress SRC [DST]``: rewrites a trace as one gzip member.

    DST defaults to ``SRC.gz`` for plain JSON and to SRC itself (replaced atomically) for
    gzip input. An existing DST other than a gzip SRC itself is replaced only with
    ``force``.

    SRC is checked as it streams, as ``split`` and ``filter`` check their input: anything
    that is not a trace fails at the offset of its first fault.

    Returns:
        0 on success; 1 when it failed (SRC is not a trace: corrupt, truncated, not strict
        JSON; a write error) or refused to overwrite DST; 2 for a bad level or thread count,
        or an unreadable SRC.
    """
    prog = "kinetrace compress"
    level = DEFAULT_COMPRESSLEVEL if args.level is None else args.level
    threads = available_cpus() if args.threads is None else args.threads
    if not 0 <= level <= 9:
        print(f"{prog}: error: --level must be between 0 and 9, got {level}", file=sys.stderr)
        return 2
    if not 1 <= threads <= 256:
        print(
            f"{prog}: error: --threads must be between 1 and 256, got {threads}",
            file=sys.stderr,
        )
        return 2
    src: str = os.fsdecode(args.src)
    try:
        gzip_in = _is_gzip(src)
        src_bytes = os.stat(src).st_size
    except OSError as exc:
        print(f"{prog}: error: cannot read {src}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    dst: str = os.fsdecode(args.dst) if args.dst is not None else (src if gzip_in else src + ".gz")
    in_place = _same_file(src, dst)
    if os.path.exists(dst) and not args.force and not (in_place and gzip_in):
        print(
            f"{prog}: error: {dst} exists (use -f/--force to overwrite it)",
            file=sys.stderr,
        )
        return 1
    start = time.perf_counter()
    try:
        json_bytes, dst_bytes = _kinetrace.recompress(src, dst, level, threads)
    except (OSError, ValueError) as exc:
        text = _os_error_text(exc) if isinstance(exc, OSError) else str(exc)
        print(f"{prog}: error: {text}", file=sys.stderr)
        return 1
    elapsed = max(time.perf_counter() - start, 1e-9)
    kind = "gzip" if gzip_in else "JSON"
    target = f"{dst} (in place)" if in_place else dst
    print(
        f"{src} ({_size(src_bytes)} {kind}) -> {target}: {_size(dst_bytes)}, one gzip member; "
        f"{_size(json_bytes)} of JSON in {elapsed:.2f} s ({json_bytes / 1e6 / elapsed:.0f} MB/s, "
        f"level {level}, {threads} thread{'s' if threads != 1 else ''})"
    )
    return 0


def _int_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def add_compress_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the ``compress`` subcommand (``func=compress_main``) to an argparse subparsers
    object."""
    parser = subparsers.add_parser(
        "compress",
        help="rewrite a trace as one gzip member with parallel compression",
        description=(
            "Stream a trace (.json, or gzip with any number of members) into a single-member "
            "gzip file with the parallel encoder. Some viewers (chrome://tracing, TensorBoard "
            "in a browser, zlib.decompress(data, 31)) read only the first member of a gzip "
            "file. SRC is checked strictly as it streams (as split and filter read it): "
            "anything that is not a trace fails at the offset of its first fault, and a "
            "top-level member or event over 64 MiB is refused. The output appears "
            "atomically; on error or Ctrl-C nothing is left behind. "
            "Exit status: 0 done, 1 failed (SRC not a trace) or refused to overwrite, 2 usage "
            "error or unreadable SRC."
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the trace to compress (.json or gzip)")
    parser.add_argument(
        "dst",
        metavar="DST",
        nargs="?",
        help="output (default: SRC.gz for JSON, SRC itself, rewritten, for gzip)",
    )
    parser.add_argument(
        "-l",
        "--level",
        type=_int_arg,
        default=None,
        help=f"gzip level 0-9 (default: {DEFAULT_COMPRESSLEVEL})",
    )
    parser.add_argument(
        "-j",
        "--threads",
        type=_int_arg,
        default=None,
        help="compression threads (default: the cores available)",
    )
    parser.add_argument("-f", "--force", action="store_true", help="overwrite DST if it exists")
    parser.set_defaults(func=compress_main)
    return parser
