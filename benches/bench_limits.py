"""The limits torch sets on an export, measured on real CPU profiles (the tables in
docs/background.md and docs/api.md):

- how long Ctrl-C waits while torch's ``trace_activities()`` holds the GIL (SIGINT sent a
  fifth of the way into the call, from a forked helper);
- the peak private memory of the ``background=True`` child (its own activity list, the first
  pass, batches, buffers, pages copied on write).

    python benches/bench_limits.py                       # 300k and 1.5M activities
    python benches/bench_limits.py --activities 300000,1000000 --rounds 3

Each size runs in a fresh interpreter (a profile of 1.5M activities holds ~5 GB). Not part
of CI (minutes, GBs of memory). Prints a table; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20

ONE_SIZE = """
import json, os, sys, tempfile
from support.limits import (
    background_child_private_peak, profile_activities, sigint_during_trace_activities,
    trace_activities_seconds,
)
import kinetrace
n, rounds = int(sys.argv[1]), int(sys.argv[2])
prof = profile_activities(n)
count, call = trace_activities_seconds(prof)
row = {"activities": count, "trace_activities_s": call, "latency_s": [], "after_call_s": [],
       "child_private": []}
with tempfile.TemporaryDirectory() as out:
    for i in range(rounds):
        hit = sigint_during_trace_activities(prof, os.path.join(out, "i.json"), call / 5)
        row["latency_s"].append(hit.latency)
        row["after_call_s"].append(hit.after_call)
        peak = background_child_private_peak(prof, os.path.join(out, "b.json"))
        row["child_private"].append(peak)
print(json.dumps(row))
"""


def measure(n: int, rounds: int) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", ONE_SIZE, str(n), str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measurement failed ({done.returncode}):\n{done.stderr}")
    return dict(json.loads(done.stdout.splitlines()[-1]))


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| activities | trace_activities() | Ctrl-C latency (median, max) | after the call | "
        "background child, private peak | per activity |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["activities"]
        child = max(r["child_private"])
        latency = r["latency_s"]
        lines.append(
            f"| {n:,} | {r['trace_activities_s'] * 1e3:.0f} ms "
            f"({r['trace_activities_s'] / n * 1e9:.0f} ns/activity) | "
            f"{statistics.median(latency) * 1e3:.0f} ms, {max(latency) * 1e3:.0f} ms | "
            f"{max(r['after_call_s']) * 1e3:.0f} ms | {child / MIB:.0f} MiB | {child / n:.0f} B |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", default="300000,1500000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.activities.split(",")):
        rows.append(measure(n, args.rounds))
        print(f"{n}: {rows[-1]}", file=sys.stderr)
    print(f"load average before and after: {os.getloadavg()}")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
