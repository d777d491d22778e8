"""``kinetrace split SRC --max-mb N``: cut a trace into time-window parts a viewer opens."""

from __future__ import annotations

import argparse
from typing import Any

from kinetrace._cli.args import add_gzip_options, positive_float
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import size
from kinetrace._tools.split import split_trace

__all__ = ["add_parser", "cmd_split"]


def cmd_split(args: argparse.Namespace) -> int:
    """Prints the parts :func:`kinetrace.split_trace` wrote.

    Returns:
        0 on success, 1 when it failed (a bad trace, an unwritable directory, ...), 2 when
        SRC cannot be read (:mod:`kinetrace._cli.status`).
    """
    return run_tool("kinetrace split", [args.src], lambda: _split(args))


def _split(args: argparse.Namespace) -> int:
    result = split_trace(
        args.src,
        args.max_mb,
        out_dir=args.out_dir,
        compresslevel=args.level,
        threads=args.threads,
    )
    mb_s = 2 * result.json_bytes_read / 1e6 / max(result.seconds, 1e-9)
    print(
        f"{args.src}: {size(result.json_bytes_read)} of JSON, {result.events_read:,} events "
        f"-> {len(result.parts)} part{'s' if len(result.parts) != 1 else ''} in "
        f"{result.seconds:.2f} s (2 passes, {mb_s:.0f} MB/s of JSON read)"
    )
    for p in result.parts:
        print(
            f"  {p.path}  {size(p.json_bytes)} of JSON, {p.events:,} events, "
            f"ts {p.start_us:.3f} .. {p.end_us:.3f} us"
        )
    if result.flow_events_cut:
        print(f"  {result.flow_events_cut:,} flow events dropped: their flow crosses a window edge")
    if result.flow_events_unpaired:
        print(
            f"  {result.flow_events_unpaired:,} flow events dropped: the source has no other end "
            "of their flow"
        )
    if result.oversized_parts:
        print(
            f"  {result.oversized_parts} part(s) larger than {args.max_mb} MB: more than that "
            "falls within one histogram cell"
        )
    return DONE


def add_parser(subparsers: Any) -> None:
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
            "appear only when all are written. " + exit_statuses()
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the trace to split")
    parser.add_argument(
        "--max-mb",
        type=positive_float,
        required=True,
        metavar="N",
        help="most MB of JSON per part",
    )
    parser.add_argument(
        "--out-dir", metavar="DIR", default=None, help="where the parts go (default: beside SRC)"
    )
    add_gzip_options(parser, "gzip parts")
    parser.set_defaults(func=cmd_split)
