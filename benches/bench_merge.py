"""Merge benchmark: N synthetic ranks of about M MB each into one trace.

    python benches/bench_merge.py                        # 8 ranks x 250 MB, 3 rounds
    python benches/bench_merge.py --ranks 4 --mb 50 --rounds 5 --dir /tmp/ranks

Not part of CI (GBs of disk, minutes). The ranks are exported once into ``--dir`` (kept for
the next run: ``tests/synthetic.py export --rank R``, GPU-shaped, every rank its own seed and
a base 1 ms after the previous one, so every ``ts`` but rank 0's is rewritten). Each round
runs, in alternating order, ``kinetrace merge DIR -o OUT`` and the copy floor ``cat
SOURCES > OUT`` (the same bytes read and written, nothing parsed), each in a fresh process
under ``/usr/bin/time`` (wall time, peak RSS); prints medians, MB/s of JSON read, and the
merge's time as a multiple of the floor's. The machine's load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = ROOT / "tests" / "synthetic.py"
#: JSON bytes per synthetic GPU-shaped activity (measured: ~379).
BYTES_PER_ACTIVITY = 379
BASE = 1_790_857_026_000_000_000


def make_ranks(directory: Path, ranks: int, mb: float) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    n = int(mb * 1e6 / BYTES_PER_ACTIVITY)
    paths = []
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    for rank in range(ranks):
        path = directory / f"rank{rank}.json"
        paths.append(path)
        if path.exists():
            continue
        cmd = [sys.executable, str(SYNTHETIC), "export", str(n), str(path), "--gpu"]
        cmd += ["--rank", str(rank), "--world-size", str(ranks), "--seed", str(rank)]
        cmd += ["--base-time-ns", str(BASE + rank * 1_000_000)]
        print(f"exporting {path} ({n:,} activities) ...", file=sys.stderr, flush=True)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return paths


def timed(cmd: list[str], shell: bool = False) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``cmd`` in a fresh process."""
    args = ["/usr/bin/time", "-f", "%e %M"]
    args += ["sh", "-c", cmd[0]] if shell else cmd
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    wall, rss_kb = done.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss_kb) * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=250.0, help="MB of JSON per rank")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kinetrace-bench-merge"))
    parser.add_argument("--out", type=Path, default=None, help="default: DIR/../merged.json")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args(argv)
    sources = make_ranks(args.dir, args.ranks, args.mb)
    total = sum(p.stat().st_size for p in sources)
    out = args.out or args.dir.parent / "kinetrace-bench-merged.json"
    merge_cmd = [sys.executable, "-m", "kinetrace", "merge", str(args.dir), "-o", str(out)]
    cat_cmd = [" ".join(["cat", *map(str, sources), ">", str(out)])]
    runs: dict[str, list[tuple[float, int]]] = {"merge": [], "cat": []}
    subprocess.run(["cat", *map(str, sources)], stdout=subprocess.DEVNULL, check=True)  # cache
    for r in range(args.rounds):
        order = ["merge", "cat"] if r % 2 == 0 else ["cat", "merge"]
        for what in order:
            runs[what].append(timed(merge_cmd) if what == "merge" else timed(cat_cmd, True))
            out.unlink()
    load = os.getloadavg()
    rows = {}
    for what, samples in runs.items():
        wall = statistics.median(s[0] for s in samples)
        rss = max(s[1] for s in samples)
        rows[what] = {"wall_s": wall, "mb_per_s": total / 1e6 / wall, "peak_rss_mb": rss / 1e6}
    print(
        f"{args.ranks} ranks, {total / 1e6:.0f} MB of JSON in all; {args.rounds} rounds, "
        f"medians; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"({os.cpu_count()} cores) at {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print("| run | wall | JSON in | peak RSS |")
    print("|---|---|---|---|")
    for what, row in rows.items():
        name = "kinetrace merge DIR -o merged.json" if what == "merge" else "cat SOURCES > out"
        print(
            f"| `{name}` | {row['wall_s']:.2f} s | {row['mb_per_s']:.0f} MB/s | "
            f"{row['peak_rss_mb']:.0f} MB |"
        )
    print(f"merge / copy floor: {rows['merge']['wall_s'] / rows['cat']['wall_s']:.2f}x")
    print(
        "all samples (wall s, peak RSS MB):",
        {k: [(w, round(m / 1e6)) for w, m in v] for k, v in runs.items()},
    )
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
