"""Export benchmark: stock C++, torch Python and kinetrace on one profile, in one process.

    python benches/bench_export.py                  # 50k steps = ~300k activities
    python benches/bench_export.py --iterations 5000 --repeat 1   # the short CI run

Prints a table and writes it as JSON (``--json``). Ratios, not seconds, are what carry
over between machines: every exporter runs on the same ``_ProfilerResult``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

from kinetrace import _bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--iterations", type=int, default=50_000, help="workload steps (6 ops each)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="best of N (stock C++ runs once)")
    parser.add_argument("--no-shapes", action="store_true", help="profile without record_shapes")
    parser.add_argument("--with-stack", action="store_true", help="profile with with_stack")
    parser.add_argument("--formats", default="json,json.gz")
    parser.add_argument(
        "--workers", default="1,2", help="kinetrace worker counts to run (comma-separated)"
    )
    parser.add_argument("--out", default=None, help="directory for the traces (default: temp)")
    parser.add_argument("--json", default=None, help="write the rows here as JSON")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    prof = _bench.record_workload(
        args.iterations, record_shapes=not args.no_shapes, with_stack=args.with_stack
    )
    n = len(prof.profiler.kineto_results.trace_activities())
    print(f"profiled {n} activities in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="kinetrace-bench-") as tmp:
        out = args.out or tmp
        rows = _bench.compare(
            prof,
            out,
            formats=args.formats.split(","),
            repeat=args.repeat,
            worker_counts=[int(w) for w in args.workers.split(",")],
        )
    print(_bench.format_table(rows, n))
    if args.json:
        import torch

        payload = {
            "activities": n,
            "iterations": args.iterations,
            "record_shapes": not args.no_shapes,
            "with_stack": args.with_stack,
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "torch": torch.__version__,
                "platform": platform.platform(),
            },
            "rows": _bench.rows_as_dicts(rows),
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
