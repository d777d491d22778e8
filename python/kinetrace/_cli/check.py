"""``kinetrace check FILE``: strict, streamed validation of a trace file, and its summary."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kinetrace._cli.args import non_negative_int
from kinetrace._tools import DEFAULT_MAX_ERRORS, check_trace

__all__ = ["add_parser", "cmd_check"]


def cmd_check(args: argparse.Namespace) -> int:
    """Prints the report of :func:`kinetrace.check_trace`.

    Returns:
        0 when the trace is valid, 1 when it is not, 2 when it cannot be read.
    """
    try:
        report = check_trace(args.file, max_errors=args.max_errors)
    except OSError as exc:
        text = exc.strerror if exc.errno is not None and exc.strerror else str(exc)
        print(f"kinetrace check: {text}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return 0 if report.valid else 1


def add_parser(subparsers: Any) -> None:
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
        type=non_negative_int,
        default=DEFAULT_MAX_ERRORS,
        metavar="N",
        help=f"error messages to show (all are counted; default {DEFAULT_MAX_ERRORS})",
    )
    parser.set_defaults(func=cmd_check)
