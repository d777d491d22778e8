"""``kinetrace check FILE``: what viewers will do with a trace file (errors, warnings, and a
summary)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kinetrace._cli.args import non_negative_int
from kinetrace._cli.status import DONE, FAILED, exit_statuses, run_tool
from kinetrace._tools.check import DEFAULT_EXAMPLES, check_trace

__all__ = ["add_parser", "cmd_check"]


def cmd_check(args: argparse.Namespace) -> int:
    """Prints the report of :func:`kinetrace.check_trace`.

    Returns:
        0 when the trace loads (warnings are printed), 1 when it does not (or, with
        ``--strict``, when there is any warning), 2 when it cannot be read
        (:mod:`kinetrace._cli.status`).
    """
    return run_tool("kinetrace check", [args.file], lambda: _check(args))


def _check(args: argparse.Namespace) -> int:
    report = check_trace(args.file, examples=args.examples)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return DONE if (report.clean if args.strict else report.valid) else FAILED


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="tell what viewers will do with a trace file: errors, warnings, summary",
        description=(
            "Check a Chrome/Kineto trace file (.json, or gzip with any number of members), "
            "streamed in bounded memory. Errors: a viewer cannot load it (not strict JSON, "
            "a truncated text, corrupt gzip data, neither a traceEvents array nor an array "
            "of events, events that are not objects). Warnings: it loads but a viewer drops "
            "or misplaces something (flow ends without their other end, X events Perfetto "
            "drops for overlapping on their thread, negative or missing durations, events "
            "without ts or ph, numbers beyond 2^53, a process or thread named twice, several "
            "gzip members), or it is the JSON Array Format (a top-level array of events, its "
            "closing ] missing or not: viewers load it, `kinetrace repair` writes the object "
            "form). Each is counted "
            "with its first places (byte offset, event index); then a summary. "
            + exit_statuses("loads", "does not load (or any warning, with --strict)")
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
