"""How often ``kinetrace diff --runs --fail-above PCT`` alarms on unchanged code, and how
often it catches an added operator, with each CPU estimator (``--cpu-estimator``): docs/
ci.md's workload, three variants recorded in turns (BASE, the same code again, and the code
with one more product per step, about a tenth of a step), each run one profile of its 10
steps; comparisons of ``--runs`` runs a side made of consecutive runs, unchanged ones
(BASE against the same code) and slower ones (BASE against the added product), and the
first run of each comparison alone as a single-run pair for contrast.

    python benches/diff_rates.py OUT                    # 300 runs of each, in this process
    python benches/diff_rates.py OUT --processes 100    # each run a process of its own
    python benches/diff_rates.py OUT --analyse --runs 20

Not part of CI. By default each run is a profile made in this process (~0.15 s each), so
300 runs of each variant take a few minutes; ``--processes N`` records each run in a fresh
process with ``kinetrace record``, as docs/ci.md's recipe does, and each such process pays
torch's import and Kineto's start-up (~14 s of CPU here, 30-80 s of wall time beside a CI
run), so it is for a long quiet evening. OUT keeps the runs' step times (``steps.json``;
the processes' profiles under ``OUT/processes``, resumable). Prints, per estimator and
per PCT, the alarms among the unchanged comparisons and the detections among the slower
ones, the verdicts' counts, the median interval width, and the load average seen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import kinetrace
from kinetrace._tools.diff import CPU_ESTIMATORS, StepComparison, compare_runs, job_steps

ROOT = Path(__file__).resolve().parent.parent
#: The line after which the slower workload adds its product (docs/ci.md's step).
STEP_LINE = "        loss.backward()\n"
#: The added product: one more of the step's size (the step is two 64 x 256 x 256 layers
#: forward and back, six such products and the rest).
EXTRA = "        torch.mm(x, model[0].weight.detach())\n"
VARIANTS = ("base", "same", "slower")
PCTS = (0.0, 5.0, 10.0)
PROFILE = "python perf/profile_step.py {dir}/trace.json.gz"


def _workload_text() -> str:
    """docs/ci.md's ``perf/profile_step.py``, as the page shows it."""
    page = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    start = page.index("# file: perf/profile_step.py\n")
    text = page[start : page.index("```", start)]
    if text.count(STEP_LINE) != 1:
        raise SystemExit("docs/ci.md's workload no longer has the step line this adds to")
    return text


def _in_process(runs: int, out: Path) -> dict[str, list[list[float]]]:
    """Each variant ``runs`` times in turns, each run one profile of docs/ci.md's step made
    here (its model and input, one thread, 10 recorded steps)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)
    )
    x = torch.rand(64, 256)
    steps: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
    path = out / "run.json"
    for i in range(runs):
        for variant in VARIANTS:
            schedule = kinetrace.schedule(wait=1, warmup=2, active=10, repeat=1)
            with kinetrace.profile(schedule=schedule) as prof:
                for _ in range(13):
                    loss = model(x).sum()
                    loss.backward()
                    if variant == "slower":
                        torch.mm(x, model[0].weight.detach())
                    prof.step()
            prof.export_chrome_trace(str(path))
            steps[variant].append(job_steps(kinetrace.summarize([path], threads=1), 0))
        if i % 50 == 49:
            print(f"{i + 1} of {runs}, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    path.unlink()
    return steps


def _in_processes(runs: int, out: Path) -> dict[str, list[list[float]]]:
    """Each variant ``runs`` times in turns, each run a fresh process of docs/ci.md's
    workload (``kinetrace record``, one run per call, so the turns hold across variants)."""
    text = _workload_text()
    for variant in VARIANTS:
        script = out / "processes" / variant / "perf" / "profile_step.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        body = text.replace(STEP_LINE, STEP_LINE + EXTRA) if variant == "slower" else text
        script.write_text(body)
    for i in range(runs):
        for variant in VARIANTS:
            folder = out / "processes" / variant / "runs"
            have = len(list(folder.iterdir())) if folder.is_dir() else 0
            if have > i:
                continue
            subprocess.run(
                ["kinetrace", "record", str(folder), "--runs", "1", "--", *PROFILE.split()],
                cwd=folder.parent,
                check=True,
                stderr=subprocess.DEVNULL,
            )
        print(f"{i + 1} of {runs}, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return {
        v: [
            job_steps(kinetrace.summarize([run], threads=1), 0)
            for run in sorted((out / "processes" / v / "runs").iterdir())[:runs]
        ]
        for v in VARIANTS
    }


def _alarm(v: StepComparison, pct: float) -> bool:
    return v.verdict == "slower" and v.change_pct is not None and v.change_pct > pct


def report(steps: dict[str, list[list[float]]], per_side: int, loads: Sequence[float]) -> str:
    base, same, slower = (steps[v] for v in VARIANTS)
    count = min(len(base), len(same), len(slower)) // per_side
    chunks = [slice(i * per_side, (i + 1) * per_side) for i in range(count)]
    lines = [
        f"{count} unchanged and {count} slower comparisons of {per_side} runs a side"
        + (f"; load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""),
        "",
        "| estimator | alarms (unchanged) at PCT "
        + " / ".join(f"{p:g}" for p in PCTS)
        + " | detected (slower) at PCT "
        + " / ".join(f"{p:g}" for p in PCTS)
        + " | unchanged: verdicts | slower: verdicts | slower: change (median) "
        "| unchanged: interval width (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for estimator in [*CPU_ESTIMATORS, "single run"]:
        if estimator == "single run":
            aa = [compare_runs([base[c.start]], [same[c.start]]) for c in chunks]
            ab = [compare_runs([base[c.start]], [slower[c.start]]) for c in chunks]
        else:
            aa = [compare_runs(base[c], same[c], estimator=estimator) for c in chunks]
            ab = [compare_runs(base[c], slower[c], estimator=estimator) for c in chunks]
        alarms = " / ".join(str(sum(_alarm(v, p) for v in aa)) for p in PCTS)
        found = " / ".join(str(sum(_alarm(v, p) for v in ab)) for p in PCTS)
        widths = [v.ci_high_pct - v.ci_low_pct for v in aa if v.ci_high_pct is not None]
        change = statistics.median(v.change_pct for v in ab if v.change_pct is not None)
        lines.append(
            f"| {estimator} | {alarms} of {count} | {found} of {count} "
            f"| {dict(Counter(v.verdict for v in aa))} | {dict(Counter(v.verdict for v in ab))} "
            f"| {change:+.1f}% | {statistics.median(widths):.0f} points |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where the step times (and profiles) are kept")
    parser.add_argument(
        "--in-process",
        type=int,
        default=300,
        metavar="N",
        help="runs of each variant made in this process (default 300)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="instead, runs of each variant as fresh processes (the recipe)",
    )
    parser.add_argument("--runs", type=int, default=5, help="runs a side of a comparison")
    parser.add_argument("--analyse", action="store_true", help="read OUT's steps.json again")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "steps.json"
    if args.analyse:
        data = json.loads(saved.read_text())
    else:
        if args.processes and not shutil.which("kinetrace"):
            raise SystemExit("diff_rates: no kinetrace command on PATH (the venv's bin)")
        start, before = time.monotonic(), os.getloadavg()[0]
        if args.processes:
            steps = _in_processes(args.processes, args.out)
        else:
            steps = _in_process(args.in_process, args.out)
        data = {"steps": steps, "loads": [before, os.getloadavg()[0]]}
        saved.write_text(json.dumps(data))
        print(f"recorded in {time.monotonic() - start:.0f} s", file=sys.stderr)
    print(report(data["steps"], args.runs, data["loads"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
