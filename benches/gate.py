"""The benchmark gate CI runs (``nox -s bench``): kinetrace against its peers in one run, red
when a ratio falls below its floor.

    python benches/gate.py                      # CI: every check, 3 rounds
    python benches/gate.py --only export --iterations 2000 --rounds 1   # a quick look

Each check times kinetrace and a peer on the same work in this run, in alternating order,
and compares the medians' ratio with a floor set well under the figure measured on a busy
2-core machine (``FLOORS``: measured, floor, and so the margin), so that noise does not turn
it red and a real slowdown does:

- **export**: ``kinetrace.export_chrome_trace`` against stock torch
  (``prof.export_chrome_trace``) and torch's Python exporter, each call on a fresh profile of
  the same workload, recorded just before it (``kinetrace._bench.compare``: rows in
  alternating order, medians of the rounds);
- **summary**: ``kinetrace summary`` against HolisticTraceAnalysis 0.5.0's four analyses on the
  62 MB xDiT SD3.5 trace of ``../shared/traces`` (each run a fresh process).

A check with a ratio below its floor is **measured again** before the gate turns red, with
twice the rounds and one more (7 in CI), and the second measurement alone decides: a real
slowdown is below its floor both times, while a burst of other work on a shared machine
seldom lasts through both (a CI run on a busy machine once gave ``.json`` vs stock C++ 0.56x
against a typical ~1.0x, every row of that run about twice as slow as usual).
``--no-confirm`` takes the first measurement as final.

Prints one line per ratio (measured, floor, verdict); exit status 0 when every ratio holds,
1 when one falls below its floor (each named, after its check was measured again), 2 for a
usage error.
``tests/test_bench_gate.py`` runs it against a kinetrace slowed on purpose (the test-hooks
build's ``KINETRACE_TEST_SLOWDOWN``) and watches it fail.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_summary import HTA  # HTA's four analyses, as `kinetrace summary` gives them

from kinetrace import _bench

ROOT = Path(__file__).resolve().parent.parent
XDIT_FILE = (
    ROOT.parent / "shared/traces/TraceLens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz"
)


@dataclass(frozen=True)
class Floor:
    """A ratio kinetrace must keep: ``speedup`` (peer's time / kinetrace's) at least
    ``floor``; ``measured`` is what a busy 2-core machine gave, for the margin."""

    check: str
    name: str
    floor: float
    measured: str


#: The floors, each well under its measured ratio (2026-12-03, 2 cores, load ~2, the CI
#: workload: 10k steps, 60k activities): the margin absorbs a machine twice as noisy.
#: ``.json`` vs stock C++ is the narrow one: kinetrace's export includes the accessor floor
#: (torch's ``trace_activities()`` and the field reads, Python calls) that stock torch's C++
#: writer does not make, and that floor alone measured 0.6-1.2x the C++ writer's whole time
#: in CI runs (Python code slows more than C++ when the machine is busy); kinetrace's ratio
#: there measured 0.56-1.2x in the CI runs of 2026-12-04. A 2x slower ``.json`` export is
#: also caught by ``.json`` vs torch Python (floor 1.5x, measured ~3x).
FLOORS = [
    Floor("export", "export .json.gz vs stock C++", 3.0, "~9x"),
    Floor("export", "export .json.gz vs torch Python", 1.5, "~4x"),
    Floor("export", "export .json vs stock C++", 0.5, "~1.0x"),
    Floor("export", "export .json vs torch Python", 1.5, "~3x"),
    Floor("summary", "summary vs HTA 0.5.0 (xDiT SD3.5, 62 MB)", 10.0, "~27x"),
]


def export_ratios(iterations: int, rounds: int) -> dict[str, float]:
    """Every export row once a round, alternating; kinetrace's speedups over the peers."""

    def record() -> object:
        return _bench.record_workload(iterations, record_shapes=True)

    with tempfile.TemporaryDirectory(prefix="kinetrace-gate-") as out:
        rows = _bench.compare(
            record,
            out,
            formats=("json", "json.gz"),
            repeat=rounds,
            extra_levels=(),
            worker_counts=(None,),
        )
    print(_bench.format_table(rows, rows[0].activities))
    seconds = {(r.exporter, r.fmt): r.seconds for r in rows}
    ratios = {}
    for fmt in ("json", "json.gz"):
        ours = seconds[("kinetrace", fmt)]
        ratios[f"export .{fmt} vs stock C++"] = seconds[("stock C++", fmt)] / ours
        ratios[f"export .{fmt} vs torch Python"] = seconds[("torch Python", fmt)] / ours
    return ratios


def _wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def summary_ratio(trace: Path, rounds: int) -> dict[str, float]:
    """``kinetrace summary`` and HTA on ``trace``, fresh processes, alternating order."""
    if not trace.is_file():
        raise SystemExit(f"gate: {trace} is missing (../shared/traces beside the clone)")
    with tempfile.TemporaryDirectory(prefix="kinetrace-gate-") as folder:
        # HTA reads every trace of a folder: this one alone, by a link.
        (Path(folder) / trace.name).symlink_to(trace)
        commands = {
            "kinetrace": [sys.executable, "-m", "kinetrace", "summary", str(trace), "--json"],
            "HTA": [sys.executable, "-c", HTA, folder],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for round_ in range(rounds):
            order = list(commands) if round_ % 2 == 0 else list(commands)[::-1]
            for name in order:
                times[name].append(_wall(commands[name]))
    ours, theirs = (statistics.median(times[n]) for n in ("kinetrace", "HTA"))
    print(
        f"summary of {trace.name}: kinetrace {ours:.2f} s, HTA {theirs:.2f} s "
        f"(medians of {rounds}, fresh processes, alternating order)"
    )
    return {FLOORS[-1].name: theirs / ours}


def verdicts(ratios: dict[str, float], floors: list[Floor]) -> list[str]:
    """The floors that ``ratios`` break, one line each (empty: the gate holds)."""
    print(f"\n{'ratio':<44} {'measured':>9} {'floor':>7} {'typical':>8}  verdict")
    broken = []
    for f in floors:
        got = ratios[f.name]
        ok = got >= f.floor
        print(
            f"{f.name:<44} {got:8.2f}x {f.floor:6.1f}x {f.measured:>8}  {'ok' if ok else 'BELOW'}"
        )
        if not ok:
            broken.append(f"{f.name}: {got:.2f}x, below its floor of {f.floor}x")
    return broken


#: One check's measurement: its ratios, from ``rounds`` rounds.
Measure = Callable[[str, int], dict[str, float]]


def judge(measure: Measure, checks: list[str], rounds: int, confirm: bool) -> list[str]:
    """Measures ``checks`` and returns the floors broken (empty: the gate holds). With
    ``confirm``, a check with a ratio below its floor is measured again with twice the rounds
    and one more (an odd count: a true median), and that second measurement replaces the
    first."""
    floors = [f for f in FLOORS if f.check in checks]
    ratios: dict[str, float] = {}
    for check in checks:
        ratios |= measure(check, rounds)
    broken = verdicts(ratios, floors)
    if not broken or not confirm:
        return broken
    again = [c for c in checks if any(f.check == c and ratios[f.name] < f.floor for f in floors)]
    more = 2 * rounds + 1
    print(
        f"\nbelow a floor: measuring {', '.join(again)} again ({more} rounds); "
        "this second measurement decides"
    )
    for check in again:
        ratios |= measure(check, more)
    return verdicts(ratios, floors)


def main(argv: list[str] | None = None, measure: Measure | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("export", "summary"), help="one check alone")
    parser.add_argument("--iterations", type=int, default=10_000, help="workload steps")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians of them")
    parser.add_argument("--summary-trace", type=Path, default=XDIT_FILE)
    parser.add_argument(
        "--no-confirm",
        action="store_true",
        help="a ratio below its floor turns the gate red at once, without a second measurement",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.iterations < 1:
        parser.error("--rounds and --iterations must be at least 1")
    checks = [args.only] if args.only else ["export", "summary"]

    def measure_here(check: str, rounds: int) -> dict[str, float]:
        if check == "export":
            return export_ratios(args.iterations, rounds)
        return summary_ratio(args.summary_trace, rounds)

    broken = judge(measure or measure_here, checks, args.rounds, not args.no_confirm)
    if broken:
        print("\nbenchmark gate: RED\n" + "\n".join(broken), file=sys.stderr)
        return 1
    print("\nbenchmark gate: every ratio at or above its floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
