"""Export benchmark: stock C++, torch Python and kinetrace on one profile, in one process.

    python benches/bench_export.py                       # 50k steps = ~300k activities
    python benches/bench_export.py --iterations 5000 --repeat 1   # the short CI run

Workloads: ``shapes`` (record_shapes, op-heavy) and ``stack`` (with_stack, python_function
events). For each, every exporter runs on the same ``_ProfilerResult``; then the gzip
encoder alone runs on the kinetrace ``.json`` text. Prints tables and writes them as JSON
(``--json``). Ratios, not seconds, are what carry over between machines. The synthetic
multi-GB run is ``benches/bench_huge.py``.
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

WORKLOADS = {
    "shapes": {"record_shapes": True, "with_stack": False},
    "stack": {"record_shapes": False, "with_stack": True},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--iterations", type=int, default=50_000, help="workload steps (6 ops each)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="best of N (stock C++ runs once)")
    parser.add_argument("--workloads", default="shapes,stack", help="comma-separated")
    parser.add_argument("--formats", default="json,json.gz")
    parser.add_argument(
        "--workers", default="1,2", help="kinetrace worker counts to run (comma-separated)"
    )
    parser.add_argument("--no-encoder", action="store_true", help="skip the encoder-alone run")
    parser.add_argument(
        "--no-handler", action="store_true", help="skip the on_trace_ready blocking run"
    )
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)

    import torch

    payload: dict = {
        "iterations": args.iterations,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "platform": platform.platform(),
        },
        "workloads": {},
    }
    encoder_text = b""
    for name in args.workloads.split(","):
        options = WORKLOADS[name]
        t0 = time.perf_counter()
        prof = _bench.record_workload(args.iterations, **options)
        n = len(prof.profiler.kineto_results.trace_activities())
        print(
            f"[{name}] profiled {n} activities in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        with tempfile.TemporaryDirectory(prefix="kinetrace-bench-") as out:
            rows = _bench.compare(
                prof,
                out,
                formats=args.formats.split(","),
                repeat=args.repeat,
                worker_counts=[int(w) for w in args.workers.split(",")],
            )
            text_path = os.path.join(out, "kinetrace.w1.json")
            if not encoder_text and os.path.exists(text_path):
                with open(text_path, "rb") as f:
                    encoder_text = f.read()
        print(f"\nworkload {name}: {options}")
        print(_bench.format_table(rows, n))
        payload["workloads"][name] = {
            "options": options,
            "activities": n,
            "rows": _bench.rows_as_dicts(rows),
        }
        del prof

    if encoder_text and not args.no_encoder:
        encoder = _bench.encoder_throughput(encoder_text)
        print()
        print(_bench.format_encoder_table(encoder, len(encoder_text)))
        payload["encoder"] = {"text_bytes": len(encoder_text), "rows": encoder}

    if not args.no_handler:
        with tempfile.TemporaryDirectory(prefix="kinetrace-bench-") as out:
            handler = _bench.handler_blocking(args.iterations, out)
        print()
        print(_bench.format_handler_table(handler))
        payload["handler"] = handler

    if args.json:
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
