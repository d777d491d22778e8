"""``kinetrace check FILE``: what viewers will do with a trace file (errors, warnings, and a
summary)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kinetrace._check import DEFAULT_EXAMPLES, check_trace
from kinetrace._cli.args import non_negative_int

__all__ = ["add_parser", "cmd_check"]


def cmd_check(args: argparse.Namespace) -> int:
    """Prints the report of :func:`kinetrace.check_trace`.

    Returns:
        0 when the trace loads (warnings are printed), 1 when it does not (or, with
        ``--strict``, when there is any warning), 2 when it cannot be read.
    """
    try:
        report = check_trace(args.file, examples=args.examples)
    except OSError as exc:
        text = exc.strerror if exc.errno is not None and exc.strerror else str(exc)
        print(f"kinetrace check: {text}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return 0 if (report.clean if args.strict else report.valid) else 1


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="tell what viewers will do with a trace file: errors, warnings, summary",
        description=(
            "Check a Chrome/Kineto trace file (.json, or gzip with any number of members), "
            "streamed in bounded memory. Errors: a viewer cannot load it (not strict JSON, "
            "a truncated text, corrupt gzip data, no traceEvents array, events that are not "
            "objects). Warnings: it loads but a viewer drops or misplaces something (flow "
            "ends without their other end, X events Perfetto drops for overlapping on their "
            "thread, negative or missing durations, events without ts or ph, numbers beyond "
            "2^53, a process or thread named twice, several gzip members). Each is counted "
            "with its first places (byte offset, event index); then a summary. Exit status: "
            "0 loads, 1 does not load (or any warning, with --strict), 2 unreadable."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="the trace (.json or gzip)")
    parser.add_argument(
        "--json", action="store_true", help="print the whole report as one JSON object"
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail (exit status 1) on warnings too"
    )
    parser.add_argument(
        "--examples",
        type=non_negative_int,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"places shown per finding (all are counted; default {DEFAULT_EXAMPLES})",
    )
    parser.set_defaults(func=cmd_check)
