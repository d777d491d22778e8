"""``kinetrace parquet``: speed (MB of JSON per CPU second, wall time), the dataset's size
beside the trace's ``.json.gz``, files in parallel (the eight DLRM ranks), and
``export_parquet`` beside ``export_chrome_trace`` to ``.json`` on a fresh profile per round.

    python benches/bench_parquet.py                        # xDiT + DLRM, 300k activities
    python benches/bench_parquet.py --rounds 3 --iterations 10000

Not part of CI (minutes). Each conversion runs in this process; CPU seconds are the
process's (every thread) from ``resource.getrusage``. Rounds alternate the order of the
sides; the table gives medians and the load average (``uptime``).
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kinetrace
from kinetrace._bench import activity_count, record_workload
from kinetrace._tools.merge import trace_files

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / ".." / "shared" / "traces"
XDIT = TRACES / "TraceLens" / "inference" / "xdit_sd_3.5" / "profile_trace_rank_0.json.gz"
DLRM = TRACES / "param" / "dlrm_kineto"


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parquet_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def gz_bytes(sources: list[Path]) -> int:
    """The sources' size as ``.json.gz``: as found, or gzip's level 6 of the text."""
    total = 0
    for s in sources:
        data = s.read_bytes()
        total += len(data) if s.name.endswith(".gz") else len(gzip.compress(data, 6))
    return total


def timed(work: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = cpu_seconds(), time.perf_counter()
    out = work()
    return time.perf_counter() - wall, cpu_seconds() - cpu, out


def convert_rows(name: str, source: Path, rounds: int, out: Path) -> list[str]:
    files = trace_files([source])
    gz = gz_bytes([Path(f) for f in files])
    rows = []
    for level in (3, 9):
        walls, cpus, size, json_bytes = [], [], 0, 0
        for _ in range(rounds):
            shutil.rmtree(out, ignore_errors=True)
            wall, cpu, result = timed(lambda lv=level: kinetrace.to_parquet(source, out, level=lv))
            walls.append(wall)
            cpus.append(cpu)
            size, json_bytes = parquet_bytes(out), result.json_bytes
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        rows.append(
            f"| {name} | {len(files)} | {json_bytes / 1e6:.1f} MB | {level} | {wall:.3f} s | "
            f"{cpu:.3f} s | {json_bytes / 1e6 / cpu:.0f} MB/s | {size / 1e6:.2f} MB | "
            f"{size / gz:.2f}x |"
        )
    return rows


def export_rows(iterations: int, rounds: int, tmp: Path) -> list[str]:
    """A fresh profile per side and round, the order alternating."""
    sides: dict[str, Callable[[Any], Any]] = {
        "export_chrome_trace(.json)": lambda prof: kinetrace.export_chrome_trace(
            prof, tmp / "t.json"
        ),
        "export_parquet": lambda prof: kinetrace.export_parquet(prof, tmp / "ds", force=True),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    activities = 0
    for i in range(rounds):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            prof = record_workload(iterations)
            activities = activity_count(prof)
            start = time.perf_counter()
            sides[name](prof)
            times[name].append(time.perf_counter() - start)
            del prof
    base = statistics.median(times["export_chrome_trace(.json)"])
    return [
        f"| {name} | {activities:,} | {statistics.median(t):.3f} s | "
        f"{statistics.median(t) / base:.2f}x |"
        for name, t in times.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=50_000, help="steps (6 ops each)")
    args = parser.parse_args(argv)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"{os.cpu_count()} CPUs; {load}; kinetrace {kinetrace.__version__}\n")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        print(
            "| trace | files | JSON | zstd level | wall | CPU | JSON per CPU s | Parquet "
            "| vs .json.gz |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, source in (("xDiT SD3.5 (.json.gz)", XDIT), ("DLRM, 8 ranks (.json)", DLRM)):
            if source.exists():
                print("\n".join(convert_rows(name, source, args.rounds, tmp / "ds")))
        print("\n| export | activities | median | vs .json |")
        print("|---|---|---|---|")
        print("\n".join(export_rows(args.iterations, args.rounds, tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
