"""The instruction-count gate CI runs (``nox -s counts``): the native work of each tool counted
in instructions under Valgrind, compared with the committed baseline, red on a rise.

    ./scripts/counts.sh                               # as CI runs it (nox -s counts)
    ./scripts/counts.sh --update                      # count and write the baseline
    ./scripts/counts.sh --update --only diff          # count diff again, keep the others
    python benches/counts.py --only export-json,check --repeat 3   # in your own venv

Time on a shared 2-core machine moves by 6-30% between runs, so no wall-clock ratio can see
the regression that really happens (the formatter or the scanner a few percent slower after
a change). The instructions a program executes hardly move at all: this gate counts them
(``valgrind --tool=cachegrind --cache-sim=no``) for each benchmark of ``src/counts/`` (the
call a binding makes, on a fixed input: a synthetic activity set for the export, real traces
of ``../shared/traces`` for the reading tools), built in the ``fast`` profile by the pinned
toolchain, each benchmark in a process of its own pinned to one CPU (so every thread count
that follows the CPUs is 1 and scheduling cannot move the count), and the interpreter's start
with ``import kinetrace`` (the installed wheel) apart from them.

A benchmark whose count rose more than ``THRESHOLD`` percent above the baseline turns the
gate red (exit 1), named; one that fell more than that is reported, for a baseline update.
The table gives baseline, now and change for every benchmark. Updating the baseline is
``./scripts/counts.sh --update`` (the release wheel in the counts session's venv, as CI
counts ``python-import``; docs/benchmarks.md, "Instruction counts"); the commit that does so
says why. A baseline made by another rustc or on another CPU model (glibc picks
its string functions by CPU) is refused: the counts would not be comparable.

Exit status: 0 the gate holds, 1 a count rose (or a benchmark failed), 2 a usage error or a
baseline that does not fit this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
BASELINE = ROOT / "benches" / "counts-baseline.json"

#: Percent above the baseline that turns the gate red (and below it that is reported).
#: Counts of an unchanged build repeat within 0.03% (docs/benchmarks.md: the A/A runs), so
#: 1% is far outside the noise and still catches a hot path made 3% slower.
THRESHOLD = 1.0

#: How the baseline is made (written into it).
UPDATE = (
    './scripts/counts.sh --update (docs/benchmarks.md, "Instruction counts"; '
    "CONTRIBUTING.md: commit it saying why)"
)

#: The Python benchmark: the interpreter's start and ``import kinetrace``.
IMPORT = "python-import"


@dataclass(frozen=True)
class Benchmark:
    """One count: ``name`` (a benchmark of ``src/counts/`` or ``IMPORT``) and its inputs
    (trace paths under ``../shared/traces``, or one number of synthetic activities)."""

    name: str
    inputs: tuple[str, ...] = ()

    def arguments(self) -> list[str]:
        return [a if a.isdigit() else str(TRACES / a) for a in self.inputs]


ACTIVITIES = "60000"
B200 = "TraceLens/b200/eager_trace.json.gz"
MI300 = "TraceLens/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"
#: Sized so that every count together takes ~2 minutes under Valgrind on one busy core.
BENCHMARKS = [
    Benchmark("export-input", (ACTIVITIES,)),
    Benchmark("export-json", (ACTIVITIES,)),
    Benchmark("export-gzip", (ACTIVITIES,)),
    Benchmark("check", (MI300,)),
    Benchmark("summary-exact", (B200,)),
    Benchmark("summary-hta", (B200,)),
    Benchmark(
        "diff", ("hta/trace_diff__control__control.json.gz", "hta/trace_diff__test__test.json.gz")
    ),
    Benchmark("ops", (B200,)),
    Benchmark("ops-tracelens", (B200,)),
    Benchmark("parquet", (MI300,)),
    Benchmark(
        "split",
        ("kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",),
    ),
    Benchmark(
        "merge",
        (
            "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json",
            "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json",
        ),
    ),
    Benchmark(IMPORT),
]

VALGRIND = [
    "valgrind",
    "--tool=cachegrind",
    "--cache-sim=no",
    "--cachegrind-out-file=/dev/null",
]
I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


class GateError(Exception):
    """A benchmark could not be counted, or the baseline does not fit: the message says why."""


def _text(cmd: list[str]) -> str:
    """``cmd``'s output, run in the project's root (where rust-toolchain.toml picks rustc)."""
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise GateError(f"{' '.join(cmd)} failed: {e}") from e
    return done.stdout.strip()


def machine() -> dict[str, str]:
    """What the counts depend on besides the code: the compiler, the CPU model (glibc's
    string functions are chosen by CPU), and Valgrind (for the record)."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    return {
        "rustc": _text(["rustc", "--version"]),
        "cpu": cpu,
        "valgrind": _text(["valgrind", "--version"]),
    }


def build(features: str) -> Path:
    """The benchmarks' program (``benches/counts.rs``), built in the fast profile with
    ``features``; its path. Not incremental: the code generated is the same whether the
    target folder is new or not."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS")}
    env["CARGO_INCREMENTAL"] = "0"
    cmd = [
        "cargo",
        "build",
        "--quiet",
        "--profile",
        "fast",
        "--bench",
        "counts",
        "--features",
        features,
        # One codegen unit for this crate: the code generated for a function then does not
        # depend on how the crate's modules fall into units (with 16, adding a module to
        # json/ moved export-json's count by +2.0% without a change to its code).
        "--config",
        "profile.fast.package.kinetrace.codegen-units=1",
        "--message-format=json",
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GateError(f"cargo could not build the counts program:\n{done.stderr}")
    for line in done.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "counts":
            if message.get("executable"):
                return Path(message["executable"])
    raise GateError("cargo built no counts program (no executable in its messages)")


def count(program: Path, bench: Benchmark, extra_env: dict[str, str], cpu: int) -> tuple[int, str]:
    """(instructions, what the benchmark said it did) of one run of ``bench``, pinned to
    ``cpu`` (its threads share that one CPU, and every thread count that follows the CPUs
    is 1)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", **extra_env}
    with tempfile.TemporaryDirectory(prefix="kinetrace-counts-") as scratch:
        if bench.name == IMPORT:
            env["PYTHONHASHSEED"] = "0"
            target = [sys.executable, "-c", "import kinetrace; print(kinetrace.__version__)"]
            # Once before counting: the first import of a new install compiles the bytecode
            # (~70% more instructions), every later one reads it.
            subprocess.run(target, env=env, capture_output=True, check=False)
        else:
            missing = [a for a in bench.arguments() if not a.isdigit() and not Path(a).is_file()]
            if missing:
                raise GateError(
                    f"{bench.name}: {missing[0]} is missing (../shared/traces beside the clone)"
                )
            target = [str(program), bench.name, *bench.arguments(), scratch]
        cmd = ["taskset", "-c", str(cpu), *VALGRIND, *target]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    found = I_REFS.findall(done.stderr)
    if done.returncode != 0 or not found:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise GateError(f"{bench.name} failed under Valgrind (status {done.returncode}):\n{tail}")
    said = done.stdout.strip().splitlines()
    return int(found[-1].replace(",", "")), (said[-1] if said else "")


@dataclass
class Counted:
    name: str
    runs: list[int]
    did: str

    @property
    def instructions(self) -> int:
        """The median of the runs (they differ by a few hundredths of a percent at most)."""
        return int(statistics.median(self.runs))


def count_all(
    program: Path, benches: Sequence[Benchmark], repeat: int, jobs: int, extra_env: dict[str, str]
) -> list[Counted]:
    """Every benchmark ``repeat`` times, ``jobs`` Valgrind processes at once, each pinned to
    one CPU (in turn): a count does not depend on what runs beside it."""
    work = [b for b in benches for _ in range(repeat)]
    cpus = sorted(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(
            pool.map(
                lambda i: count(program, work[i], extra_env, cpus[i % len(cpus)]),
                range(len(work)),
            )
        )
    counted: dict[str, Counted] = {}
    for bench, (instructions, did) in zip(work, results, strict=True):
        c = counted.setdefault(bench.name, Counted(bench.name, [], did))
        c.runs.append(instructions)
    return list(counted.values())


def load_baseline(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise GateError(f"no baseline at {path}: make one with --update") from None
    except (OSError, ValueError) as e:
        raise GateError(f"cannot read the baseline {path}: {e}") from e


def check_machine(baseline: dict, here: dict[str, str]) -> None:
    """Refuses a baseline counted by another compiler or on another CPU model."""
    for key in ("rustc", "cpu"):
        if baseline.get("machine", {}).get(key) != here[key]:
            raise GateError(
                f"the baseline was counted with {key} {baseline.get('machine', {}).get(key)!r}, "
                f"this machine has {here[key]!r}: the counts are not comparable "
                "(count a baseline here with --update)"
            )


def compare(
    counted: list[Counted], baseline: dict, threshold: float
) -> tuple[list[str], list[str]]:
    """Prints the table; returns (rises over ``threshold``, falls below it), one line each."""
    print(f"\n{'benchmark':<16} {'baseline':>15} {'now':>15} {'change':>9}  verdict")
    rises, falls = [], []
    for c in counted:
        base = baseline["counts"].get(c.name)
        if base is None:
            print(f"{c.name:<16} {'-':>15} {c.instructions:>15,} {'':>9}  NOT IN THE BASELINE")
            rises.append(f"{c.name}: not in the baseline (count one with --update)")
            continue
        was = base["instructions"]
        change = (c.instructions - was) / was * 100
        verdict = "ok"
        if change > threshold:
            verdict = "ROSE"
            rises.append(f"{c.name}: {was:,} -> {c.instructions:,} instructions ({change:+.2f}%)")
        elif change < -threshold:
            verdict = "fell (update the baseline)"
            falls.append(f"{c.name}: {was:,} -> {c.instructions:,} instructions ({change:+.2f}%)")
        print(f"{c.name:<16} {was:>15,} {c.instructions:>15,} {change:>+8.2f}%  {verdict}")
        if base.get("did") and base["did"] != c.did:
            print(f"{'':<16} did: {c.did}\n{'':<16} was: {base['did']}")
    return rises, falls


def write_baseline(
    path: Path,
    counted: list[Counted],
    here: dict[str, str],
    features: str,
    earlier: dict | None = None,
) -> None:
    """Writes the baseline of ``counted``; with ``earlier`` (a baseline of this machine, for
    ``--update --only``), its other benchmarks' counts are kept, in their places."""
    counts = dict(earlier["counts"]) if earlier else {}
    counts.update({c.name: {"instructions": c.instructions, "did": c.did} for c in counted})
    doc = {
        "how": UPDATE,
        "profile": "fast",
        "features": features,
        "machine": here,
        "counts": counts,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nbaseline written: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--repeat", type=int, default=1, help="runs a benchmark; its median counts")
    parser.add_argument("--jobs", type=int, default=1, help="Valgrind processes at once")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument(
        "--update",
        action="store_true",
        help="write the baseline, compare nothing (with --only: those benchmarks' counts, "
        "the others kept)",
    )
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="percent")
    parser.add_argument(
        "--features",
        default="counts",
        help="cargo features of the program (tests add count-hooks)",
    )
    parser.add_argument("--program", type=Path, help="a counts program already built")
    parser.add_argument(
        "--build-only", action="store_true", help="build the program, print its path, count nothing"
    )
    args = parser.parse_args(argv)
    names = {b.name for b in BENCHMARKS}
    chosen = BENCHMARKS
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - names)
        if unknown:
            parser.error(
                f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
            )
        chosen = [b for b in BENCHMARKS if b.name in wanted]
    if args.repeat < 1 or args.jobs < 1 or args.threshold <= 0:
        parser.error("--repeat and --jobs must be at least 1, --threshold above 0")
    if shutil.which("valgrind") is None:
        print(
            "counts: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr
        )
        return 2
    extra_env = {k: v for k, v in os.environ.items() if k == "KINETRACE_TEST_EXTRA_WORK"}
    if args.build_only:
        try:
            print(build(args.features))
        except GateError as e:
            print(f"counts: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        here = machine()
        # --update --only rewrites those benchmarks in the baseline there is (of this machine).
        merging = args.update and args.only and args.baseline.exists()
        baseline = load_baseline(args.baseline) if merging or not args.update else None
        if baseline is not None:
            check_machine(baseline, here)
            if args.update and baseline.get("features") != args.features:
                raise GateError(
                    f"the baseline was counted with features {baseline.get('features')!r}, "
                    f"not {args.features!r}: update every benchmark (--update alone)"
                )
        program = args.program or build(args.features)
        print(f"counting {len(chosen)} benchmark(s) x {args.repeat} under Valgrind ({program})")
        counted = count_all(program, chosen, args.repeat, args.jobs, extra_env)
    except GateError as e:
        print(f"counts: {e}", file=sys.stderr)
        return 2
    for c in counted:
        spread = (max(c.runs) - min(c.runs)) / c.instructions * 100
        print(f"{c.name:<16} {c.did}" + (f"  (spread {spread:.4f}%)" if len(c.runs) > 1 else ""))
    if args.update:
        write_baseline(args.baseline, counted, here, args.features, baseline)
        return 0
    assert baseline is not None
    rises, falls = compare(counted, baseline, args.threshold)
    if falls:
        print(
            f"\nfell by more than {args.threshold:.1f}% (update the baseline, saying why):\n"
            + "\n".join(falls)
        )
    if rises:
        print(
            f"\ncount gate: RED (rose by more than {args.threshold:.1f}%)\n" + "\n".join(rises),
            file=sys.stderr,
        )
        return 1
    print(f"\ncount gate: every count within {args.threshold:.1f}% of its baseline or below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
