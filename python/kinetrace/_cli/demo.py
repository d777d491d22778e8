"""``kinetrace demo``: the main job, a built-in workload profiled and exported by kinetrace and
by torch's exporters, and the comparison printed."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kinetrace._cli.args import positive_int

__all__ = ["add_parser", "cmd_demo"]


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


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="profile a built-in workload and compare kinetrace with torch's exporters",
        description=cmd_demo.__doc__,
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
