"""Memory of an export with workers, on real torch profiles: the whole export (every
process) and each worker's own pages, beyond what ``trace_activities()`` holds.

    python benches/bench_memory.py --activities 100000,500000,2000000 --workers 1,2,4,8

Per size, one profile of the ``shapes`` workload is recorded (``record_shapes=True``, six
activities a step) and its activity list is held before measuring, so what
``trace_activities()`` holds (the activity objects, pybind11's registry of them) is in the
baseline and not in the figures; the export's own call returns the same objects in a new
list, whose 8 bytes an activity are subtracted too. Then it is exported once per worker
count, the order alternating between rounds, with:

- ``total``: the growth of the proportional set size of every process of the export (the
  parent and its workers, shared copy-on-write pages counted once) beyond the baseline, at
  its fullest: the larger of a sampled peak (``support.measure.PeakRss``) and the sum read
  while every worker is held at its exit (``support.measure.ExitSnapshot``); median over
  rounds;
- ``worker private``: each worker's private dirty pages at that moment (the pages it
  copied on writing, the originals of pages the parent copied, its own allocations); the
  mean over workers;
- before each export, freed heap memory is given back to the system (``malloc_trim``), so
  that no export reuses what the one before it freed;
- the documented budget, its fixed part plus bytes per activity, and the estimate the
  default worker count uses (``kinetrace._export.workers.memory_estimate``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import benchlib  # noqa: F401  (puts tests/ on sys.path)

from kinetrace import _bench
from kinetrace._export import export as _export
from kinetrace._export import extract as _extract
from kinetrace._export import workers as _workers
from support.measure import ExitSnapshot, PeakRss, warm_up


def _trim() -> None:
    """Gives freed heap memory back to the system, so that an export does not reuse what
    the one before it freed (its growth would read too low)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def measure(result: Any, path: str, workers: int, n: int) -> dict[str, Any]:
    gc.collect()
    _trim()
    with PeakRss(interval=0.002, pss_interval=0.01) as rss, ExitSnapshot() as snapshot:
        t0 = time.perf_counter()
        _export.export_chrome_trace(result, path, workers=workers)
        seconds = time.perf_counter() - t0
    at_exit = None if snapshot.total is None else snapshot.total - rss.pss_baseline
    # The export's own trace_activities() list: the same objects as the held one (so not
    # counted), in a new list of n pointers, which belongs to what trace_activities() holds.
    own_list = 8 * n + 56
    return {
        "seconds": seconds,
        "total": max(rss.total_growth, at_exit or 0) - own_list,
        "parent": rss.growth,
        "worker_private": snapshot.workers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", default="100000,500000,2000000")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--format", default="json")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    warm_up()
    counts = [int(w) for w in args.workers.split(",")]
    table = []
    with tempfile.TemporaryDirectory(prefix="kinetrace-memory-") as out:
        for size in (int(a) for a in args.activities.split(",")):
            t0 = time.perf_counter()
            prof = _bench.record_workload(max(1, size // 6))
            result = prof.profiler.kineto_results
            held = result.trace_activities()  # in the baseline: what trace_activities() holds
            n = len(held)
            direct = _extract.activity_getters(held).direct
            print(f"{n} activities recorded in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            runs: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
            for r in range(args.rounds):
                for w in counts if r % 2 == 0 else counts[::-1]:
                    path = os.path.join(out, f"t.{args.format}")
                    runs[w].append(measure(result, path, w, n))
            for w in counts:
                total = statistics.median(x["total"] for x in runs[w])
                privates = [p for x in runs[w] for p in x["worker_private"]]
                row = {
                    "activities": n,
                    "workers": w,
                    "direct": direct,
                    "total": total,
                    "total_per_activity": total / n,
                    "worker_private_mean": statistics.mean(privates) if privates else None,
                    "seconds": statistics.median(x["seconds"] for x in runs[w]),
                    "estimate": _workers.memory_estimate(n, w, direct),
                    "budget": _workers.memory_budget(n, w),
                }
                row["estimate_error"] = (row["estimate"] - total) / total
                table.append(row)
                wp = row["worker_private_mean"]
                print(
                    f"{n:>9} {w:>2} workers: total {total / 2**20:7.1f} MiB "
                    f"({total / n:6.1f} B/act), worker private "
                    f"{'-' if wp is None else f'{wp / 2**20:6.1f} MiB'}, estimate "
                    f"{row['estimate'] / 2**20:7.1f} MiB, budget {row['budget'] / 2**20:7.1f} MiB, "
                    f"{row['seconds']:.2f} s; estimate error {row['estimate_error']:+.0%}",
                    flush=True,
                )
            del prof, result, held
            gc.collect()
    load = os.getloadavg()
    print(f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {len(os.sched_getaffinity(0))} cores")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": table, "load": load}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
