"""``kinetrace summary`` beside HolisticTraceAnalysis 0.5.0 on the same files (time, CPU time,
peak RSS; each run a fresh process under ``/usr/bin/time``), the inflate floor of a
``.json.gz`` (the time to only decompress it, zlib in a fresh process), the speed per core on
plain ``.json`` (the process pinned to one CPU), and a synthetic folder of 64 ranks.

    python benches/bench_summary.py                       # xdit trace + 64 ranks x 32 MB
    python benches/bench_summary.py --mb 8 --rounds 1 --dir /tmp/summary-ranks

Not part of CI (GBs of disk, minutes). The synthetic ranks are one rank exported by
``tests/synthetic.py`` (``benches/bench_merge.py``'s ``make_ranks``), copied 63 times with
its ``distributedInfo.rank`` changed. HTA is not run on them (it would need hours and tens of
GB). Prints a markdown table and the load average (``uptime``): on a shared machine, CPU
seconds say more than wall time.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import make_ranks, timed

ROOT = Path(__file__).resolve().parent.parent
XDIT = ROOT / ".." / "shared" / "traces" / "TraceLens" / "inference" / "xdit_sd_3.5"
XDIT_FILE = XDIT / "profile_trace_rank_0.json.gz"

#: HTA's imports, then its four analyses of the folder ``sys.argv[1]`` (apart, so the gate
#: can time the analyses without the imports: benches/gate.py).
HTA_IMPORTS = """
import logging, os, sys, tempfile, warnings
warnings.simplefilter("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
"""
HTA_ANALYSES = """
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**6)
ta.get_comm_comp_overlap(visualize=False)
ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
"""
HTA = HTA_IMPORTS + HTA_ANALYSES

INFLATE = """
import sys, zlib
d = zlib.decompressobj(31)
n = 0
with open(sys.argv[1], "rb") as f:
    while chunk := f.read(1 << 20):
        n += len(d.decompress(chunk))
        while d.unused_data:
            rest = d.unused_data
            d = zlib.decompressobj(31)
            n += len(d.decompress(rest))
print(n)
"""


def kinetrace_cmd(path: Path, rules: str = "exact", cpus: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "kinetrace", "summary", str(path), "--json", "--rules", rules]
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


def median_of(cmd: list[str], rounds: int) -> tuple[float, float, int]:
    runs = [timed(cmd) for _ in range(rounds)]
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        max(r[2] for r in runs),
    )


def row(what: str, json_bytes: int, t: tuple[float, float, int]) -> str:
    wall, cpu, rss = t
    return (
        f"| {what} | {wall:.2f} | {cpu:.2f} | {rss / 2**20:.0f} | "
        f"{json_bytes / 1e6 / wall:.0f} | {json_bytes / 1e6 / max(cpu, 1e-9):.0f} |"
    )


def synthetic_ranks(directory: Path, ranks: int, mb: float) -> list[Path]:
    """One exported rank, copied with its rank changed in the head of the file."""
    (first,) = make_ranks(directory / "one", 1, mb)
    paths = []
    for rank in range(ranks):
        path = directory / f"rank{rank}.json"
        paths.append(path)
        if path.exists():
            continue
        with open(first, "rb") as src, open(path, "wb") as dst:
            head = src.read(4096)
            dst.write(head.replace(b'"rank": 0', f'"rank": {rank}'.encode(), 1))
            shutil.copyfileobj(src, dst, 1 << 20)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb", type=float, default=32.0, help="MB of JSON per synthetic rank")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "summary-ranks")
    ap.add_argument("--no-hta", action="store_true")
    args = ap.parse_args(argv)
    json_bytes = len(gzip.decompress(XDIT_FILE.read_bytes()))
    lines = [
        "| run | wall s | CPU s | peak RSS MiB | MB/s of JSON (wall) | MB/s per CPU s |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        lines.append(
            row(
                "inflate floor (zlib, xdit .json.gz)",
                json_bytes,
                median_of([sys.executable, "-c", INFLATE, str(XDIT_FILE)], args.rounds),
            )
        )
        lines.append(
            row(
                "kinetrace summary, xdit .json.gz",
                json_bytes,
                median_of(kinetrace_cmd(XDIT_FILE), args.rounds),
            )
        )
        lines.append(
            row(
                "kinetrace summary --rules hta, xdit .json.gz",
                json_bytes,
                median_of(kinetrace_cmd(XDIT_FILE, "hta"), args.rounds),
            )
        )
        plain = Path(tmp) / "xdit.json"
        plain.write_bytes(gzip.decompress(XDIT_FILE.read_bytes()))
        lines.append(
            row(
                "kinetrace summary, xdit plain .json, 1 CPU",
                json_bytes,
                median_of(kinetrace_cmd(plain, cpus="0"), args.rounds),
            )
        )
        if not args.no_hta:
            lines.append(
                row(
                    "HTA 0.5.0 (load + 4 analyses), xdit .json.gz",
                    json_bytes,
                    timed([sys.executable, "-c", HTA, str(XDIT)]),
                )
            )
    paths = synthetic_ranks(args.dir, args.ranks, args.mb)
    total = sum(p.stat().st_size for p in paths)
    lines.append(
        row(
            f"kinetrace summary, {args.ranks} synthetic ranks ({total / 1e9:.2f} GB .json)",
            total,
            timed(kinetrace_cmd(args.dir)),
        )
    )
    print("\n".join(lines))
    print(f"\nload: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"cores: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
