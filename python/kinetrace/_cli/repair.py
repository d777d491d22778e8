"""``kinetrace repair SRC DST [--untangle]``: the best loadable trace a damaged file holds."""

from __future__ import annotations

import argparse
import errno
import json
import os
from typing import Any

from kinetrace._cli.args import add_gzip_options, non_negative_int
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._tools.check import DEFAULT_EXAMPLES
from kinetrace._tools.repair import repair_trace

__all__ = ["add_parser", "cmd_repair"]


def cmd_repair(args: argparse.Namespace) -> int:
    """Prints what :func:`kinetrace.repair_trace` changed.

    Returns:
        0 when DST was written (also when there was nothing to repair: DST is then a copy),
        1 when it failed (nothing loadable in SRC, a write error, DST exists without
        ``--force``), 2 when SRC cannot be read (:mod:`kinetrace._cli.status`).
    """
    return run_tool("kinetrace repair", [args.src], lambda: _repair(args))


def _repair(args: argparse.Namespace) -> int:
    src, dst = os.fsdecode(args.src), os.fsdecode(args.dst)
    if os.path.lexists(dst) and not args.force:
        raise FileExistsError(errno.EEXIST, f"{dst} exists (use -f/--force to replace it)")
    report = repair_trace(
        src,
        dst,
        untangle=args.untangle,
        compresslevel=args.level,
        threads=args.threads,
        examples=args.examples,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return DONE


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "repair",
        help="write the best loadable trace a damaged trace file holds",
        description=(
            "Write to DST the best loadable trace SRC holds (.json, or gzip with any number "
            "of members; SRC is never modified), and report what was changed, counted, with "
            "the first places: a truncated text keeps every complete event before the cut "
            "and is closed; corrupt or truncated gzip keeps what decompresses; several gzip "
            "members become one; a raw quote, backslash or control character in a string is "
            "escaped where the string's end is clear (else the event is dropped and "
            "counted); invalid UTF-8 becomes U+FFFD; NaN/Infinity become strings; stray "
            "commas and trailing data go. --untangle moves X events Perfetto would drop for "
            "overlapping on their thread to extra thread lanes of their process. A trace "
            "with nothing to repair is copied unchanged. DST is gzip when its name ends in "
            ".gz; it appears atomically. " + exit_statuses("written")
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the damaged trace")
    parser.add_argument("dst", metavar="DST", help="the repaired trace")
    parser.add_argument(
        "--untangle",
        action="store_true",
        help="move X events Perfetto drops for overlapping to extra thread lanes",
    )
    parser.add_argument("-f", "--force", action="store_true", help="replace DST if it exists")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--examples",
        type=non_negative_int,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"places shown per change (all are counted; default {DEFAULT_EXAMPLES})",
    )
    add_gzip_options(parser, "a .gz DST")
    parser.set_defaults(func=cmd_repair)
