"""Throughput of the tools over existing traces: ``check``, ``repair`` (of a trace that loads,
and of a damaged one), against ``filter`` (the parallel reader's own speed) and ``cp`` in the
same run.

    python benches/bench_tools.py big.json            # a trace made by:
    python tests/synthetic.py export 2800000 big.json --gpu    # ~1.07 GB, 3.15M events

Not part of CI (a GB of disk, minutes). Each tool runs as the command a user types, in a fresh
``kinetrace`` process (``/usr/bin/time``-like: wall time, peak RSS from ``wait4``), the tools
alternating within each round, the median of the rounds reported with the machine's load:
the figures are only comparable within one run on a shared machine. The damaged copy is the
trace with a raw tab in one name in ten (every such event goes through the tolerant reader)
and cut in its last tenth.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _timed(argv: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS in bytes) of a command, which must succeed."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execvp(argv[0], argv)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return wall, usage.ru_maxrss * 1024


def _damaged(src: Path, dst: Path) -> None:
    """A copy of ``src`` with a raw tab in one name of ten, cut in its last tenth."""
    size = src.stat().st_size
    cut = size - size // 10
    done = 0
    with open(src, "rb") as f, open(dst, "wb") as out:
        for n, line in enumerate(f):
            if done + len(line) > cut:
                out.write(line[: cut - done])
                break
            if n % 10 == 0:
                line = line.replace(b'"name":"', b'"name":"\t', 1)
            out.write(line)
            done += len(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a big plain .json trace that loads")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    src: Path = args.trace
    mb = src.stat().st_size / 1e6
    kt = [sys.executable, "-m", "kinetrace"]
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp:
        out = Path(tmp) / "out.json"
        damaged = Path(tmp) / "damaged.json"
        _damaged(src, damaged)
        damaged_mb = damaged.stat().st_size / 1e6
        tools = {
            "check": ([*kt, "check", "--examples", "1", str(src)], mb),
            "repair (loads: a copy)": ([*kt, "repair", "-f", str(src), str(out)], mb),
            "repair (damaged)": ([*kt, "repair", "-f", str(damaged), str(out)], damaged_mb),
            "filter --include-cat kernel": (
                [*kt, "filter", str(src), str(out), "--include-cat", "kernel"],
                mb,
            ),
            "cp": (["cp", str(src), str(out)], mb),
        }
        runs: dict[str, list[tuple[float, int]]] = {name: [] for name in tools}
        loads = []
        for r in range(args.rounds):
            order = list(tools) if r % 2 == 0 else list(reversed(tools))
            for name in order:
                loads.append(os.getloadavg()[0])
                runs[name].append(_timed(tools[name][0]))
                out.unlink(missing_ok=True)
    print(
        f"{src}: {mb:,.0f} MB of JSON; {args.rounds} rounds, medians; load average "
        f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
    )
    print(f"{'tool':<30} {'wall':>8} {'MB/s':>7} {'peak RSS':>9}")
    for name, samples in runs.items():
        wall = statistics.median(s[0] for s in samples)
        rss = max(s[1] for s in samples)
        print(f"{name:<30} {wall:7.2f}s {tools[name][1] / wall:7.0f} {rss / 1e6:7.0f}MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
