"""``kinetrace run [-m] TARGET [ARGS...]``: run an unchanged script with
:func:`kinetrace.install` in effect."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from typing import Any

from kinetrace._cli.status import run_tool

__all__ = ["add_parser", "cmd_run"]


PROG = "kinetrace run"


def cmd_run(args: argparse.Namespace) -> int:
    """``kinetrace run [-m] TARGET [ARGS...]``: run TARGET with kinetrace installed.

    TARGET runs as ``python TARGET ARGS...`` would run it (``__name__ == "__main__"``,
    ``sys.argv == [TARGET, *ARGS]``, the script's directory first on ``sys.path``), or as
    ``python -m TARGET ARGS...`` with ``-m``. Pending background exports are waited for
    before returning. ``sys.argv``, ``sys.path`` and the install state are restored
    afterwards.

    Returns:
        The script's exit status, as ``python`` gives it: 0 when it ends normally, its
        ``SystemExit`` code otherwise, and 1 after printing the traceback of an exception
        it raised. Through :func:`kinetrace._cli.status.run_tool`: 2 when the script cannot
        be read, 1 (one line, no traceback) when a background export it left fails.
    """
    return run_tool(PROG, [] if args.module else [args.target], lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from kinetrace._export import handles as _handles
    from kinetrace._export import profiler as _profiler

    target: str = args.target
    saved_argv = sys.argv[:]
    saved_path = sys.path[:]
    was_installed = _profiler.installed()
    _profiler.install()
    try:
        sys.argv = [target, *args.args]
        status = _run_as_main(target, module=args.module)
    finally:
        try:
            _handles.wait()
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path
            if not was_installed:
                _profiler.uninstall()
    return status


def _run_as_main(target: str, *, module: bool) -> int:
    """Runs the script or module as ``__main__``; its exit status as the interpreter would
    give it. An exception of the script's is its own: its traceback, status 1 (as
    ``python script.py``), never taken for a fault of kinetrace's. Ctrl-C passes through."""
    try:
        if module:
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
    except SystemExit as exit_:
        return _exit_status(exit_)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


def _exit_status(exit_: SystemExit) -> int:
    """What the interpreter would exit with for ``exit_`` (printing a message code)."""
    code = exit_.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def add_parser(subparsers: Any) -> None:
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
    # The script's own signal handling stays as Python sets it up.
    parser.set_defaults(func=cmd_run, stop_on_signals=False)
