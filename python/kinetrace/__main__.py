"""The ``kinetrace`` command line (``python -m kinetrace`` or the ``kinetrace`` script).

Subcommands:
    demo      profile a built-in workload, export it with kinetrace and with torch's two
              exporters on the same result, and print how they compare.
    run       run an unchanged Python script (or module) with :func:`kinetrace.install` in
              effect, so that torch's profiler exports go through kinetrace.
    check     strictly validate a trace file (streamed; ``.json`` or ``.json.gz``).
    compress  rewrite a trace as one single-member gzip with the parallel encoder.
    split     cut a trace into parts by time window, each at most N MB of JSON.
    filter    keep only the events of some categories, processes, durations or window.
    merge     many ranks' traces on one timeline.

Adding a subcommand: write ``_add_<name>(subparsers)``, which adds its parser and sets
``func`` (a ``cmd_<name>(args) -> int``) with ``set_defaults``, and append it to
:data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SUBCOMMANDS", "build_parser", "cmd_demo", "cmd_run", "main"]


def cmd_run(args: argparse.Namespace) -> int:
    """``kinetrace run [-m] TARGET [ARGS...]``: run TARGET with kinetrace installed.

    TARGET runs as ``python TARGET ARGS...`` would run it (``__name__ == "__main__"``,
    ``sys.argv == [TARGET, *ARGS]``, the script's directory first on ``sys.path``), or as
    ``python -m TARGET ARGS...`` with ``-m``. Pending background exports are waited for
    before returning. ``sys.argv``, ``sys.path`` and the install state are restored
    afterwards.

    Returns:
        The script's exit status (0 when it ends normally, its ``SystemExit`` code
        otherwise); 2 when the script does not exist. An exception from the script
        propagates.
    """
    from kinetrace import _export, _profiler

    target: str = args.target
    if not args.module and not os.path.exists(target):
        print(f"kinetrace run: can't open file {target!r}", file=sys.stderr)
        return 2
    saved_argv = sys.argv[:]
    saved_path = sys.path[:]
    was_installed = _profiler.installed()
    _profiler.install()
    try:
        sys.argv = [target, *args.args]
        if args.module:
            # as ``python -m``: the current directory first on the path
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            directory = os.path.dirname(os.path.abspath(target))
            if sys.path:
                sys.path[0] = directory
            else:
                sys.path.append(directory)
            runpy.run_path(target, run_name="__main__")
        status = 0
    except SystemExit as exit_:
        status = _exit_status(exit_)
    finally:
        try:
            wait = getattr(_export, "wait", None)
            if wait is not None:
                wait()
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path
            if not was_installed:
                _profiler.uninstall()
    return status


def _exit_status(exit_: SystemExit) -> int:
    """What the interpreter would exit with for ``exit_`` (printing a message code)."""
    code = exit_.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _add_run(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a script with torch's trace export going through kinetrace",
        description=(
            "Run a Python script (or, with -m, a module) unchanged, with kinetrace.install() "
            "in effect: torch.profiler.profile(...).export_chrome_trace(), "
            "torch.autograd.profiler.profile(...).export_chrome_trace() and "
            "torch.profiler.tensorboard_trace_handler() write through kinetrace. Processes "
            "the script starts itself (multiprocessing spawn) are not affected; with "
            "torchrun, launch each rank through kinetrace: "
            "torchrun ... -m kinetrace run train.py ..."
        ),
    )
    parser.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="TARGET is a module name to run as `python -m TARGET`",
    )
    parser.add_argument("target", metavar="TARGET", help="the script (or module) to run")
    parser.add_argument(
        "args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments for the script"
    )
    parser.set_defaults(func=cmd_run)


def cmd_demo(args: argparse.Namespace) -> int:
    """``kinetrace demo``: profile ``--iterations`` steps of add/mul/sum on 8x8 tensors,
    export it with stock torch (Kineto C++), torch's Python exporter and kinetrace, each
    through the call its users make (stock torch on profiles of its own: it saves a result
    once), print the comparison table, and keep the traces in ``--out``. On torch < 2.13
    (no Python exporter) it compares torch's own export with kinetrace's fallback, and says
    so."""
    import time

    from kinetrace import _bench

    out = os.path.abspath(args.out)
    if not _bench.has_trace_activities():
        import torch

        print(_bench.KINETO_WRITER_NOTE.format(version=torch.__version__))
        rows = _bench.compare_kineto_writer(
            lambda: _bench.record_workload(
                args.iterations, record_shapes=not args.no_shapes, with_stack=args.with_stack
            ),
            out,
            repeat=args.repeat,
        )
        print(_bench.format_table(rows))
        print(f"\ntraces written to {out}")
        return 0
    started = time.perf_counter()
    print(
        f"profiling {args.iterations} steps (record_shapes={not args.no_shapes}, "
        f"with_stack={args.with_stack}) ...",
        file=sys.stderr,
    )

    def record() -> Any:
        return _bench.record_workload(
            args.iterations, record_shapes=not args.no_shapes, with_stack=args.with_stack
        )

    rows = _bench.compare(record, out, repeat=args.repeat)
    print(
        f"profiled and exported {rows[0].activities} activities per profile in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    print(_bench.format_table(rows, rows[0].activities))
    print(f"\ntraces written to {out}")
    return 0


def _add_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="profile a built-in workload and compare kinetrace with torch's exporters",
        description=cmd_demo.__doc__,
    )
    parser.add_argument("--iterations", type=int, default=20_000, help="workload steps, 6 ops each")
    parser.add_argument("--out", default="kinetrace-demo", help="directory for the traces")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs per exporter")
    parser.add_argument("--no-shapes", action="store_true", help="profile without record_shapes")
    parser.add_argument("--with-stack", action="store_true", help="profile with with_stack")
    parser.set_defaults(func=cmd_demo)


def _add_check(subparsers: Any) -> None:
    from kinetrace._tools import add_check_parser

    add_check_parser(subparsers)


def _add_compress(subparsers: Any) -> None:
    from kinetrace._tools import add_compress_parser

    add_compress_parser(subparsers)


def _add_split(subparsers: Any) -> None:
    from kinetrace._split import add_split_parser

    add_split_parser(subparsers)


def _add_filter(subparsers: Any) -> None:
    from kinetrace._split import add_filter_parser

    add_filter_parser(subparsers)


def _add_merge(subparsers: Any) -> None:
    from kinetrace._merge import add_merge_parser

    add_merge_parser(subparsers)


#: Functions that each add one subcommand to the parser (see the module docstring).
SUBCOMMANDS: list[Callable[[Any], None]] = [
    _add_demo,
    _add_run,
    _add_check,
    _add_compress,
    _add_split,
    _add_filter,
    _add_merge,
]


def build_parser() -> argparse.ArgumentParser:
    """The ``kinetrace`` argument parser, with every subcommand of :data:`SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="kinetrace",
        description="Fast, exact Chrome-trace export for the PyTorch profiler.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kinetrace`` command: parse ``argv`` (default ``sys.argv[1:]``)
    and run the subcommand.

    Returns:
        The exit status (2 for a usage error or no subcommand).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return int(func(args))


if __name__ == "__main__":
    sys.exit(main())
