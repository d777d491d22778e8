"""``kinetrace diff`` beside ``summarize`` of both sides and HolisticTraceAnalysis 0.5.0's
``TraceDiff.compare_traces`` on the same pair (time, CPU time, peak RSS; each run a fresh
process under ``/usr/bin/time``, the commands in turns, medians of ``--rounds``).

    python benches/bench_diff.py                  # HTA's own trace_diff pair, xdit vs itself
    python benches/bench_diff.py --rounds 3 --no-hta

Not part of CI. The aims: a diff in at most 1.5x the time ``summarize`` takes for both sides
(the diff reads each file once, for its summary and its operators' attribution), and
``--rules hta`` far below HTA's time. A file against itself is given to the diff as two
paths (NEW a link), so that it reads both as it would two files (a path named on both
sides is read once). Prints a markdown table and the load average: on a shared machine,
CPU seconds say more than wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_merge import timed

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
PAIRS = {
    "HTA trace_diff control/test (2 x 1.7 MB gzip)": (
        TRACES / "hta" / "trace_diff__control__control.json.gz",
        TRACES / "hta" / "trace_diff__test__test.json.gz",
    ),
    "xdit_sd_3.5 against itself (2 x 4.0 MB gzip, 62 MB JSON)": (
        TRACES / "TraceLens" / "inference" / "xdit_sd_3.5" / "profile_trace_rank_0.json.gz",
    )
    * 2,
}

SUMMARIES = "import sys, kinetrace\nfor p in sys.argv[1:]: kinetrace.summarize([p])\n"
DIFF = "import sys, kinetrace\nkinetrace.diff(sys.argv[1], sys.argv[2])\n"
DIFF_HTA = "import sys, kinetrace\nkinetrace.diff(sys.argv[1], sys.argv[2], rules='hta')\n"
# compare_traces reads a folder per side: each file is linked alone into one.
HTA = """
import logging, os, sys, tempfile, warnings
warnings.simplefilter("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_diff import TraceDiff
dirs = []
for f in sys.argv[1:]:
    d = tempfile.mkdtemp(); os.symlink(os.path.abspath(f), os.path.join(d, os.path.basename(f)))
    dirs.append(d)
TraceDiff.compare_traces(*dirs)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-hta", action="store_true", help="leave HTA out (slow)")
    args = parser.parse_args(argv)
    print(f"load before: {os.getloadavg()[0]:.1f}; rounds: {args.rounds}\n")
    print("| pair | run | wall s | CPU s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    links = tempfile.TemporaryDirectory()
    for label, (base, new) in PAIRS.items():
        if base == new:
            new = Path(links.name, new.name)
            new.symlink_to(base)
        commands = {
            "summarize both": [sys.executable, "-c", SUMMARIES, str(base), str(new)],
            "kinetrace diff": [sys.executable, "-c", DIFF, str(base), str(new)],
            "kinetrace diff --rules hta": [sys.executable, "-c", DIFF_HTA, str(base), str(new)],
        }
        if not args.no_hta:
            commands["HTA 0.5.0 compare_traces"] = [sys.executable, "-c", HTA, str(base), str(new)]
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
        for i in range(args.rounds):
            # In turns, the order reversed every other round: a drift falls on all alike.
            names = list(commands) if i % 2 == 0 else list(reversed(commands))
            for name in names:
                runs[name].append(timed(commands[name]))
        for name, got in runs.items():
            wall = statistics.median(r[0] for r in got)
            cpu = statistics.median(r[1] for r in got)
            rss = max(r[2] for r in got) / 2**20
            print(f"| {label} | {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")
    links.cleanup()
    print(f"\nload after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
