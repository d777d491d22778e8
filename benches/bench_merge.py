"""Merge benchmark: N synthetic ranks of about M MB each into one trace.

    python benches/bench_merge.py                        # 8 ranks x 250 MB, 3 rounds
    python benches/bench_merge.py --ranks 4 --mb 50 --rounds 5 --dir /tmp/ranks

Not part of CI (GBs of disk, minutes). The ranks are exported once into ``--dir`` (kept for
the next run: ``tests/synthetic.py export --rank R``, GPU-shaped, every rank its own seed and
a base 1 ms after the previous one, so every ``ts`` but rank 0's is rewritten). Each round
runs, in alternating order, ``kinetrace merge DIR -o OUT`` and the copy floor ``cat
SOURCES > OUT`` (the same bytes read and written, nothing parsed), each in a fresh process
under ``/usr/bin/time`` (wall time, CPU time, peak RSS); prints medians, MB/s of JSON read,
and the merge's time as a multiple of the floor's. The copy floor is a read/write loop with
1 MiB buffers (what any merge must at least do; ``cat`` would copy in the kernel, without the
bytes ever passing through a process). ``kinetrace merge DIR -o /dev/null`` is timed too: the
merge without the page-cache writes. The machine's load average is printed with them: on a
shared machine, CPU seconds say more than wall time.
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


#: The copy floor: every source read and written through one 1 MiB buffer.
COPY = """
import sys
buf = bytearray(1 << 20)
with open(sys.argv[1], "wb", buffering=0) as out:
    for path in sys.argv[2:]:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                out.write(memoryview(buf)[:n])
"""


def timed(cmd: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (bytes) of ``cmd``, a fresh
    process."""
    args = ["/usr/bin/time", "-f", "%e %U %S %M", *cmd]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    wall, user, system, rss_kb = done.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(rss_kb) * 1024


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
    merge = [sys.executable, "-m", "kinetrace", "merge", str(args.dir), "-o"]
    commands = {
        "kinetrace merge DIR -o merged.json": [*merge, str(out)],
        "kinetrace merge DIR -o /dev/null": [*merge, "/dev/null"],
        "copy floor (read/write, 1 MiB)": [
            sys.executable,
            "-c",
            COPY,
            str(out),
            *map(str, sources),
        ],
    }
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
    timed([sys.executable, "-c", COPY, "/dev/null", *map(str, sources)])  # page cache
    for r in range(args.rounds):
        names = list(commands) if r % 2 == 0 else list(reversed(commands))
        for name in names:
            runs[name].append(timed(commands[name]))
            if out.exists():
                out.unlink()
    load = os.getloadavg()
    rows = {}
    for name, samples in runs.items():
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        rss = max(s[2] for s in samples)
        rows[name] = {
            "wall_s": wall,
            "cpu_s": cpu,
            "mb_per_s": total / 1e6 / wall,
            "peak_rss_mb": rss / 1e6,
        }
    print(
        f"{args.ranks} ranks, {total / 1e6:.0f} MB of JSON in all; {args.rounds} rounds, "
        f"medians; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"({os.cpu_count()} cores) at {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print("| run | wall | JSON in | CPU (user + sys) | peak RSS |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        print(
            f"| `{name}` | {row['wall_s']:.2f} s | {row['mb_per_s']:.0f} MB/s | "
            f"{row['cpu_s']:.1f} s | {row['peak_rss_mb']:.0f} MB |"
        )
    first, _, floor = rows.values()
    print(f"merge / copy floor: {first['wall_s'] / floor['wall_s']:.2f}x wall")
    print(
        "all samples (wall s, CPU s, peak RSS MB):",
        {k: [(w, c, round(m / 1e6)) for w, c, m in v] for k, v in runs.items()},
    )
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
