"""The ``kinetrace`` command line (``kinetrace`` or ``python -m kinetrace``).

One module per subcommand, each with ``add_parser(subparsers)`` that adds its parser and
sets ``func`` (``(args) -> exit status``); :data:`SUBCOMMANDS` lists them in help order.
The library functions they call take no argparse; what the subcommands share is in
:mod:`kinetrace._cli.args` (argument types, gzip and ``Keep`` options) and
:mod:`kinetrace._cli.status` (one exit status per cause: a tool's ``func`` hands its work
to ``status.run_tool``, which checks the inputs and maps what the work raises).

``main`` is also where a process's life is handled the same way for every tool:

- SIGTERM and SIGHUP (what batch schedulers, ``timeout`` and a closed terminal send) stop a
  tool like Ctrl-C does: the signal becomes an exception at the next point where the work
  answers Ctrl-C (every ~50 ms), every file the tool created is removed on the way out, and
  the exit status is 128 + the signal's number; more stop signals meanwhile are ignored, so
  they cannot cut the cleanup short. Ctrl-C exits with 130. A stop signal ignored when the
  tool started stays ignored (``nohup`` ignores SIGHUP). ``kinetrace run`` leaves the
  signals to the script it runs.
- A closed stdout (``kinetrace check big.json | head -3``) ends the tool quietly with exit
  status 141 (128 + SIGPIPE), as other Unix tools end, without a traceback.

Exit statuses otherwise (``kinetrace --help`` prints the table, ``status.TABLE``): 0 done,
1 findings or failure (a bad trace, a write error, nothing selected), 2 an unreadable input
or a usage error, 3 a regression (``diff --fail-above``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType, ModuleType

from kinetrace._cli import (
    check,
    compress,
    demo,
    diff,
    merge,
    ops,
    parquet,
    record,
    repair,
    run,
    split,
    status,
    summary,
)
from kinetrace._cli import filter as filter_

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: The subcommand modules, in the order ``kinetrace --help`` lists them.
SUBCOMMANDS: list[ModuleType] = [
    demo,
    run,
    record,
    check,
    repair,
    compress,
    split,
    filter_,
    merge,
    summary,
    diff,
    ops,
    parquet,
]

#: Signals that stop a tool like Ctrl-C (``kinetrace run`` leaves them to its script).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Stopped(BaseException):
    """Raised by the handler of a stop signal (a ``BaseException``, like
    ``KeyboardInterrupt``, so no ``except Exception`` swallows it on the way out)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def build_parser() -> argparse.ArgumentParser:
    """The ``kinetrace`` argument parser, with every subcommand of :data:`SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="kinetrace",
        description="Fast, exact Chrome-trace export for the PyTorch profiler, and tools for "
        "the trace files it, torch and Kineto write.",
        epilog=status.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in SUBCOMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kinetrace`` command: parse ``argv`` (default ``sys.argv[1:]``)
    and run the subcommand.

    Returns:
        The subcommand's exit status; 2 for a usage error or no subcommand, 130 after
        Ctrl-C, 128 + N after a stop signal N, 141 when stdout was closed.
    """
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `kinetrace record OUT [options] -- CMD...`: the command after `--` is set apart before
    # parsing (argparse cannot take options between two positionals and a `--` tail).
    command: list[str] | None = None
    if argv[:1] == ["record"] and "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if command is not None:
        args.workload = command
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return status.USAGE
    prog = f"kinetrace {args.command}"
    try:
        with _stop_signals(getattr(args, "stop_on_signals", True)):
            code = int(func(args))
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except Stopped as stop:
        print(f"{prog}: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return status.stopped_by(stop.signum)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return status.INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return status.CLOSED_STDOUT


@contextlib.contextmanager
def _stop_signals(enabled: bool) -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Stopped` while the block runs (in the main thread
    only: Python runs signal handlers there), unless they were ignored when it began (as
    ``nohup`` ignores SIGHUP). After one, they stay ignored: the process is on its way out."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    stopped = False

    def stop(signum: int, frame: FrameType | None) -> None:
        # The first signal stops the tool; more (a scheduler and a group kill both sending
        # one) must not cut short the cleanup it started, nor end the process by the
        # signal's default action before it reports: ignored from now on.
        nonlocal stopped
        stopped = True
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        raise Stopped(signum)

    # A signal ignored when the tool started stays ignored: `nohup kinetrace ...` must
    # outlive the terminal.
    previous = {
        signum: signal.signal(signum, stop)
        for signum in STOP_SIGNALS
        if signal.getsignal(signum) != signal.SIG_IGN
    }
    try:
        yield
    finally:
        if not stopped:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _silence_stdout() -> None:
    """Points stdout at /dev/null, so the interpreter's last flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
