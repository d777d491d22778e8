"""How often ``kinetrace diff --fail-above PCT`` alarms on profiles of one unchanged workload,
each recorded in a process of its own, the two of a pair back to back; and what the same
profiles give read as runs (``--runs``: every BASE profile against every NEW one).

    python benches/bench_diff_alarms.py                 # 10 pairs, 12 steps of 10 products
    python benches/bench_diff_alarms.py --pairs 10 --steps 24 --mms 100

Not part of CI (the slow test
``test_unchanged_runs_in_separate_processes_keep_their_counts_and_statuses`` records the
same pairs and asserts what holds under any load: unchanged counts, statuses that follow
their verdicts). Each process pays torch's import
and Kineto's start-up (~12 s of CPU) before it records, so 10 pairs take 3-5 minutes on two
cores. Prints a Markdown table, the alarm rate and the load average: the rate measures the
machine (how far apart two processes' step times fall) as much as the diff.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import benchlib  # noqa: F401  (puts tests/ on sys.path for support)

import kinetrace
from support.recorders import record_in_processes


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(name: str, result: kinetrace.DiffResult, fail_above: float) -> str:
    v = result.verdict
    alarm = "**alarm**" if result.regression(fail_above) else ""
    base_ms = None if v.base_median_us is None else v.base_median_us / 1000
    new_ms = None if v.new_median_us is None else v.new_median_us / 1000
    return (
        f"| {name} | {_f(base_ms, '.2f')} | {_f(new_ms, '.2f')} | {_f(v.change_pct, '+.1f')} "
        f"| [{_f(v.ci_low_pct, '+.1f')}, {_f(v.ci_high_pct, '+.1f')}] "
        f"| {_f(v.p_value, '.2g')} | {v.verdict} | {alarm} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=12, help="recorded steps per profile")
    parser.add_argument("--mms", type=int, default=10, help="matrix products per step")
    parser.add_argument("--size", type=int, default=256, help="the matrices' side")
    parser.add_argument("--fail-above", type=float, default=10.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kinetrace-alarms-") as tmp:
        base, new = Path(tmp) / "base", Path(tmp) / "new"
        base.mkdir()
        new.mkdir()
        pairs = [(base / f"run{i}.json", new / f"run{i}.json") for i in range(args.pairs)]
        # BASE first in even pairs, NEW first in odd ones (as the slow test records them).
        paths = [p for i, pair in enumerate(pairs) for p in (pair if i % 2 == 0 else pair[::-1])]
        record_in_processes(paths, size=args.size, mms=args.mms, steps=args.steps, at_once=4)
        print(
            f"{args.pairs} pairs, {args.steps} steps of {args.mms} products of "
            f"{args.size} x {args.size}, --fail-above {args.fail_above:g}; "
            f"load average {os.getloadavg()[0]:.1f}\n"
        )
        print("| pair | BASE ms | NEW ms | change % | 95% interval | p | verdict | status |")
        print("|---|---|---|---|---|---|---|---|")
        alarms = 0
        for i, (one, other) in enumerate(pairs):
            result = kinetrace.diff(one, other)
            alarms += result.regression(args.fail_above)
            print(_row(str(i), result, args.fail_above))
        for name, (one, other) in {"runs": (base, new), "runs, reversed": (new, base)}.items():
            print(_row(name, kinetrace.diff(one, other, runs=True), args.fail_above))
        print(f"\nalarms: {alarms} of {args.pairs} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
