"""The exit statuses of every tool subcommand, one per cause, and the one place where what a
tool raised becomes its status (:func:`run_tool`).

A subcommand's ``func`` hands its work to :func:`run_tool` with the inputs it reads; the
work prints its report and returns :data:`DONE` or :data:`FAILED` (findings). What it
raises is mapped here: an input that cannot be read (checked before the work starts, and
again when the work fails with an ``OSError``, in case it went away meanwhile) gives
:data:`UNREADABLE`; any other ``OSError`` (the output cannot be written), a
``ValueError`` (``kinetrace.TraceFormatError``: the input is not a trace; nothing
selected) or a ``TypeError`` gives :data:`FAILED`. Usage errors are argparse's own status
(:data:`USAGE`); stop signals and a closed stdout are handled by ``kinetrace._cli.main``.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import textwrap
from collections.abc import Callable, Iterable

__all__ = [
    "CLOSED_STDOUT",
    "DONE",
    "FAILED",
    "INTERRUPTED",
    "REGRESSION",
    "TABLE",
    "UNREADABLE",
    "USAGE",
    "epilog",
    "exit_statuses",
    "report",
    "run_tool",
    "stopped_by",
    "unreadable",
]

#: The work is done (``check``: the trace loads).
DONE = 0
#: Findings or a failure: the input is not a valid trace, ``check`` found errors (or
#: warnings, with ``--strict``), nothing was selected, DST exists without ``--force``, or the
#: output could not be written.
FAILED = 1
#: An input cannot be read: missing, a directory where a file is expected, no permission, an
#: I/O error.
UNREADABLE = 2
#: A usage error (argparse's own status, also for no subcommand).
USAGE = 2
#: ``diff --fail-above PCT``: NEW is significantly slower than BASE by more than PCT %, a
#: status of its own so CI tells a regression from a broken input (1).
REGRESSION = 3
#: Ctrl-C (128 + SIGINT).
INTERRUPTED = 128 + signal.SIGINT
#: stdout was closed (128 + SIGPIPE): ``kinetrace check big.json | head -3``.
CLOSED_STDOUT = 128 + getattr(signal, "SIGPIPE", 13)


def stopped_by(signum: int) -> int:
    """The status after stop signal ``signum`` (SIGTERM: 143, SIGHUP: 129)."""
    return 128 + signum


#: (status, cause) for every subcommand, as ``kinetrace --help`` and docs/api.md state them.
TABLE: tuple[tuple[str, str], ...] = (
    (str(DONE), "done (check: the trace loads)"),
    (
        str(FAILED),
        "findings or failure: the input is not a valid trace, check found errors (or "
        "warnings with --strict), nothing was selected, DST exists without --force, or the "
        "output could not be written",
    ),
    (
        str(UNREADABLE),
        "an input cannot be read (missing, a directory where a file is expected, no "
        "permission, an I/O error), or a usage error",
    ),
    (
        str(REGRESSION),
        "diff --fail-above PCT: the verdict that gates (GPU time per step or step time) "
        "is significantly slower than BASE's by more than PCT %; diff --fail-on-counts: "
        "NEW does more per step (a new GPU activity, more launches, more host <-> device "
        "bytes)",
    ),
    ("128+N", f"stopped by signal N: {INTERRUPTED} Ctrl-C, 143 SIGTERM, 129 SIGHUP"),
    (str(CLOSED_STDOUT), "stdout was closed (the reader of a pipe, such as head, stopped)"),
)


def epilog() -> str:
    """The table of :data:`TABLE` for ``kinetrace --help``."""
    width = max(len(status) for status, _ in TABLE)
    lines = ["exit status (every tool: check, repair, compress, split, filter, merge, ...):"]
    for status, cause in TABLE:
        lines += textwrap.wrap(
            cause,
            width=88,
            initial_indent=f"  {status.rjust(width)}  ",
            subsequent_indent=" " * (width + 4),
        )
    return "\n".join(lines)


def exit_statuses(done: str = "done", failed: str = "failed") -> str:
    """The sentence a subcommand's description ends with, in its own words for 0 and 1."""
    return (
        f"Exit status: 0 {done}, 1 {failed}, 2 an unreadable input or a usage error "
        "(kinetrace --help has the table)."
    )


def unreadable(path: str | os.PathLike[str], *, directory: bool = False) -> OSError | None:
    """Why ``path`` cannot be read as an input, None when it can: a regular file opened and
    its first byte read; where ``directory`` (``merge``'s sources) a directory listed; a
    FIFO or a device only looked up and its permission checked (reading would take bytes
    its reader needs, and opening a FIFO waits for a writer)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            if not directory:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            with os.scandir(path) as entries:
                next(entries, None)
        elif stat.S_ISREG(mode):
            with open(path, "rb") as file:
                file.read(1)
        elif not os.access(path, os.R_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    except OSError as exc:
        return exc
    return None


def report(
    prog: str, exc: BaseException, status: int, path: str | os.PathLike[str] | None = None
) -> int:
    """Prints ``PROG: error: [cannot read PATH: ]TEXT`` on stderr (an ``OSError``'s text
    without its errno, after the file it names where ``path`` is not given) and returns
    ``status``."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        text = exc.strerror
        if path is None and exc.filename is not None:
            text = f"{os.fsdecode(exc.filename)}: {text}"
    else:
        text = str(exc)
    where = "" if path is None else f"cannot read {os.fsdecode(path)}: "
    print(f"{prog}: error: {where}{text}", file=sys.stderr)
    return status


def run_tool(
    prog: str,
    inputs: Iterable[str | os.PathLike[str]],
    work: Callable[[], int],
    *,
    directories: bool = False,
) -> int:
    """Runs a subcommand's ``work`` (which prints its report and returns :data:`DONE` or
    :data:`FAILED`) after checking that every one of ``inputs`` can be read (directories
    too where ``directories``), and maps what it raises to the statuses of :data:`TABLE`.
    ``KeyboardInterrupt`` and the stop signals pass through to ``kinetrace._cli.main``."""
    inputs = list(inputs)
    for path in inputs:
        if (problem := unreadable(path, directory=directories)) is not None:
            return report(prog, problem, UNREADABLE, path)
    try:
        return work()
    except BrokenPipeError:  # stdout closed: kinetrace._cli.main ends the tool quietly
        raise
    except OSError as exc:
        for path in inputs:  # an input gone or changed while the tool ran
            if unreadable(path, directory=directories) is not None:
                return report(prog, exc, UNREADABLE, path)
        return report(prog, exc, FAILED)
    except (ValueError, TypeError) as exc:  # TraceFormatError is a ValueError
        return report(prog, exc, FAILED)
