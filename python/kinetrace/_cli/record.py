"""``kinetrace record OUT --runs N (-- CMD... | --base CMD --new CMD)``: a workload run N
times, each run a fresh process writing one profile, into a folder of runs for
``kinetrace diff --runs``; two commands run in turns (:mod:`kinetrace._tools.record`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from kinetrace._cli.args import positive_int
from kinetrace._cli.status import DONE, FAILED, report, run_tool
from kinetrace._tools.record import DIR_PLACEHOLDER, DIR_VARIABLE, RecordedRun, RecordError, record

__all__ = ["add_parser", "cmd_record"]

PROG = "kinetrace record"


def cmd_record(args: argparse.Namespace) -> int:
    """Records the runs, a line per run on stderr.

    Returns:
        0 every run kept; 1 a run failed (its command's status, or no trace; the runs done
        are kept) or the options do not fit together; 2 a usage error
        (:mod:`kinetrace._cli.status`).
    """
    return run_tool(PROG, [], lambda: _record(args))


def _commands(args: argparse.Namespace) -> dict[str, list[str]]:
    one = args.workload
    if (args.base is None) != (args.new is None):
        raise ValueError("--base and --new go together (or one command after --)")
    if args.base is not None:
        if one:
            raise ValueError("give either --base and --new, or one command after --")
        return {"base": shlex.split(args.base), "new": shlex.split(args.new)}
    if not one:
        raise ValueError("no command: kinetrace record OUT --runs N -- CMD... (or --base/--new)")
    return {"": one}


def _record(args: argparse.Namespace) -> int:
    commands = _commands(args)
    cwds = {"base": args.base_cwd, "new": args.new_cwd} if "base" in commands else {}
    if not args.base and (args.base_cwd or args.new_cwd):
        raise ValueError("--base-cwd and --new-cwd need --base and --new")

    def progress(turn: int, turns: int, run: RecordedRun) -> None:
        side = f" {run.side.upper()}" if run.side else ""
        files = f", {run.traces} trace files" if run.traces > 1 else ""
        print(
            f"{PROG}: run {turn}/{turns}{side}: {run.path} ({run.seconds:.1f} s{files})",
            file=sys.stderr,
        )

    try:
        record(
            args.out,
            commands,
            args.runs,
            cwds={k: v for k, v in cwds.items() if v},
            timeout=args.timeout,
            progress=progress,
        )
    except RecordError as exc:
        return report(PROG, exc, FAILED)
    return DONE


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, not {text}")
    return value


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "record",
        usage="kinetrace record OUT [--runs N] [--timeout S] "
        "(-- CMD [ARG ...] | --base CMD --new CMD [--base-cwd DIR] [--new-cwd DIR])",
        help="run a workload N times, each a fresh process, into a folder of runs for diff",
        description=(
            "Run a command N times, each run a fresh process that writes its profile into a "
            f"folder of its own (${DIR_VARIABLE}, or {DIR_PLACEHOLDER} in the command); each "
            "run's trace (or folder of ranks) becomes OUT/run-NNNN, numbered after the runs "
            "already there. With --base and --new, the two commands run in turns, BASE, NEW, "
            "BASE, NEW, ..., into OUT/base and OUT/new: kinetrace diff --runs OUT/base "
            "OUT/new. Exit status: 0 every run kept, 1 a run failed (its status and the end "
            "of its output are printed; the runs done stay) or the options do not fit "
            "together, 2 a usage error."
        ),
    )
    parser.add_argument("out", metavar="OUT", help="the folder of runs (made where missing)")
    parser.add_argument(
        "--runs", type=positive_int, default=5, metavar="N", help="runs per side (default 5)"
    )
    parser.add_argument("--base", metavar="CMD", help="BASE's command (a shell-quoted string)")
    parser.add_argument("--new", metavar="CMD", help="NEW's command (a shell-quoted string)")
    parser.add_argument("--base-cwd", metavar="DIR", help="the folder BASE's command runs in")
    parser.add_argument("--new-cwd", metavar="DIR", help="the folder NEW's command runs in")
    parser.add_argument(
        "--timeout", type=_seconds, metavar="S", help="seconds a run may take (default: none)"
    )
    # The one command comes after `--` (kinetrace._cli.main sets it apart into `workload`).
    parser.set_defaults(func=cmd_record, workload=[])
