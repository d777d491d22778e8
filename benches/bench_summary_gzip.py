"""``summarize`` on a ``.json.gz`` against its inflate floor, in one process: the time to only
decompress the file (Python's zlib, 64 KiB reads, the output discarded) beside the time of
``kinetrace.summarize`` on it, alternating, medians of 7 rounds. The trace is
``../shared/traces``' xDiT one unless a path is given.

    python benches/bench_summary_gzip.py [PATH] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import zlib
from pathlib import Path

import kinetrace

XDIT = (
    Path(__file__).resolve().parents[1].parent
    / "shared/traces/TraceLens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, default=XDIT)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    data = args.path.read_bytes()

    def inflate() -> None:
        d = zlib.decompressobj(31)
        for i in range(0, len(data), 1 << 16):
            d.decompress(data[i : i + (1 << 16)])

    def summarize() -> None:
        kinetrace.summarize([args.path], threads=args.threads)

    times: dict[str, list[float]] = {"inflate": [], "summarize": []}
    for r in range(args.rounds):
        order = [("inflate", inflate), ("summarize", summarize)]
        for name, run in order if r % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
    floor, ours = (statistics.median(times[k]) for k in ("inflate", "summarize"))
    print(
        f"{args.path.name}: inflate floor {floor:.3f} s, summarize ({args.threads} thread(s)) "
        f"{ours:.3f} s: {floor / ours:.0%} of the floor's speed; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
