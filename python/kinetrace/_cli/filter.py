"""``kinetrace filter SRC DST [criteria]``: keep only some events of a trace."""

from __future__ import annotations

import argparse
from typing import Any

from kinetrace._cli.args import add_gzip_options, add_keep_options, keep_from
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import size
from kinetrace._tools.split import filter_trace

__all__ = ["add_parser", "cmd_filter"]


def cmd_filter(args: argparse.Namespace) -> int:
    """Prints what :func:`kinetrace.filter_trace` kept.

    Returns:
        0 on success, 1 when it failed (a bad trace, nothing selected, ...), 2 when SRC
        cannot be read (:mod:`kinetrace._cli.status`).
    """
    return run_tool("kinetrace filter", [args.src], lambda: _filter(args))


def _filter(args: argparse.Namespace) -> int:
    keep = keep_from(args)
    result = filter_trace(args.src, args.dst, keep, compresslevel=args.level, threads=args.threads)
    print(
        f"{args.src} -> {result.path}: {result.events_written:,} of {result.events_read:,} "
        f"events kept ({result.metadata_written:,} metadata), {size(result.json_bytes_written)} "
        f"of {size(result.json_bytes_read)} of JSON in {result.seconds:.2f} s"
        + (
            f"; {result.flow_events_cut:,} flow events dropped (an end was not kept)"
            if result.flow_events_cut
            else ""
        )
        + (
            f"; {result.flow_events_unpaired:,} flow events dropped (the source has no other "
            "end of their flow)"
            if result.flow_events_unpaired
            else ""
        )
    )
    return DONE


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "filter",
        help="keep only some events of a trace",
        description=(
            "Write to DST the events of the trace SRC that pass every criterion given, each "
            "unchanged; flows only when all their ends are kept, process/thread metadata "
            "only for what remains. DST is gzip when its name ends in .gz. "
            + exit_statuses(failed="failed (including: nothing selected)")
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the trace to filter")
    parser.add_argument("dst", metavar="DST", help="the filtered trace")
    add_keep_options(parser)
    add_gzip_options(parser, "gzip output")
    parser.set_defaults(func=cmd_filter)
