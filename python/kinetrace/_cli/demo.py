"""``kinetrace demo``: the main job, a built-in workload profiled and exported by kinetrace and
by torch's exporters, and the comparison printed."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from kinetrace._cli.args import positive_int
from kinetrace._cli.status import run_tool

__all__ = ["add_parser", "cmd_demo"]

PROG = "kinetrace demo"


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo through :func:`kinetrace._cli.status.run_tool`: a failure (an unwritable
    ``--out``, say) is one line and exit status 1, like every tool's, never a traceback."""
    return run_tool(PROG, [], lambda: _demo(args))


@contextlib.contextmanager
def _native_log_kept_aside() -> Iterator[None]:
    """torch's profiler (Kineto, C++) logs every start and stop of a profile straight to the
    process's standard error (``USDT: ... profiler_start``): ~50 lines between the demo's
    own. While the demo records, those writes to file descriptor 2 go to a temporary file,
    shown only if recording fails; Python's own ``sys.stderr`` keeps the terminal. Only the
    demo's process does this: the library never changes a user's logging."""
    sys.stderr.flush()
    saved = os.dup(2)
    python_stderr = sys.stderr
    try:
        with tempfile.TemporaryFile() as log:
            os.dup2(log.fileno(), 2)
            sys.stderr = open(saved, "w", closefd=False)
            try:
                yield
            except BaseException:
                os.dup2(saved, 2)
                log.seek(0)
                python_stderr.flush()
                os.write(saved, log.read())
                raise
            finally:
                sys.stderr.close()
                sys.stderr = python_stderr
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _quietly(record: Callable[[], Any]) -> Callable[[], Any]:
    def quiet_record() -> Any:
        with _native_log_kept_aside():
            return record()

    return quiet_record


def _demo(args: argparse.Namespace) -> int:
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
            _quietly(
                lambda: _bench.record_workload(
                    args.iterations, record_shapes=not args.no_shapes, with_stack=args.with_stack
                )
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

    rows = _bench.compare(_quietly(record), out, repeat=args.repeat)
    print(
        f"profiled and exported {rows[0].activities} activities per profile in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    print(_bench.format_table(rows, rows[0].activities))
    print(f"\ntraces written to {out}")
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="profile a built-in workload and compare kinetrace with torch's exporters",
        description=_demo.__doc__,
    )
    parser.add_argument(
        "--iterations", type=positive_int, default=20_000, help="workload steps, 6 ops each"
    )
    parser.add_argument("--out", default="kinetrace-demo", help="directory for the traces")
    parser.add_argument(
        "--repeat", type=positive_int, default=1, help="best of N runs per exporter"
    )
    parser.add_argument("--no-shapes", action="store_true", help="profile without record_shapes")
    parser.add_argument("--with-stack", action="store_true", help="profile with with_stack")
    parser.set_defaults(func=cmd_demo)
