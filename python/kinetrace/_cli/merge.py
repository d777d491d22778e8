"""``kinetrace merge SRC... -o DST [options]``: many ranks' traces on one timeline."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from kinetrace._cli.args import add_gzip_options, add_keep_options, keep_from, positive_float
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import size
from kinetrace._tools.merge import MergeWarning, merge_traces

__all__ = ["add_parser", "cmd_merge"]

PROG = "kinetrace merge"


def cmd_merge(args: argparse.Namespace) -> int:
    """Prints what :func:`kinetrace.merge_traces` wrote, and its warnings on stderr.

    Returns:
        0 on success, 1 when it failed (a bad trace, two sources of one rank, ...), 2 when
        a source (a file or a directory) cannot be read (:mod:`kinetrace._cli.status`).
    """
    return run_tool(PROG, args.sources, lambda: _merge(args), directories=True)


def _merge(args: argparse.Namespace) -> int:
    keep = keep_from(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MergeWarning)
        result = merge_traces(
            args.sources,
            args.output,
            labels=args.label,
            align=args.align,
            keep=keep,
            max_mb=args.max_mb,
            compresslevel=args.level,
            threads=args.threads,
        )
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    mb_s = result.json_bytes_read / 1e6 / max(result.seconds, 1e-9)
    print(
        f"{len(result.ranks)} trace{'s' if len(result.ranks) != 1 else ''}, "
        f"{size(result.json_bytes_read)} of JSON, {result.events_read:,} events -> "
        f"{result.events_written:,} events, {size(result.json_bytes_written)} in "
        f"{result.seconds:.2f} s ({mb_s:.0f} MB/s of JSON read)"
    )
    for out in result.outputs:
        print(f"  {out.path}  {size(out.json_bytes)} of JSON, {out.events:,} events")
    if result.aligned_step is not None:
        print(f"  aligned on ProfilerStep#{result.aligned_step}")
    for rank in result.ranks:
        align = f" (align {rank.align_offset_ns:+,} ns)" if result.aligned_step is not None else ""
        print(f"  {rank.label} ({rank.rank_from}): {rank.source}, ts {rank.offset_ns:+,} ns{align}")
    if result.flow_events_cut:
        print(f"  {result.flow_events_cut:,} flow events dropped (an end was not kept)")
    return DONE


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="merge the traces of many ranks into one timeline",
        description=(
            "Merge trace files (.json or gzip; from torch, Kineto or kinetrace) or directories "
            "of them (e.g. a tensorboard_trace_handler log dir) into one trace: every process "
            "of every rank becomes its own process, named after its rank and host process or "
            "device and sorted rank by rank; flow ids are made unique per rank; ts are shifted "
            "exactly onto one clock (the earliest baseTimeNanoseconds). A rank is "
            "distributedInfo.rank, else a number in the file name (rank-3, rank_3, rank3), "
            "else the order given. DST is gzip when its name ends in .gz; it appears only when "
            "complete. " + exit_statuses()
        ),
    )
    parser.add_argument("sources", nargs="+", metavar="SRC", help="trace files or directories")
    parser.add_argument("-o", "--output", required=True, metavar="DST", help="the merged trace")
    parser.add_argument(
        "--label",
        action="append",
        metavar="L",
        help="name the sources instead of their ranks: once per trace file, in order",
    )
    parser.add_argument(
        "--align",
        choices=["step"],
        default=None,
        help="also align the ranks on the start of their first common ProfilerStep#N",
    )
    add_keep_options(parser, merged=True)
    parser.add_argument(
        "--max-mb",
        type=positive_float,
        default=None,
        metavar="N",
        help="write parts of at most N MB of JSON (time windows), named after DST",
    )
    add_gzip_options(parser, "gzip output (and reading threads)")
    parser.set_defaults(func=cmd_merge)
