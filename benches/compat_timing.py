"""kinetrace against torch's own ``prof.export_chrome_trace`` on the installed torch.

    python benches/compat_timing.py                     # the table (CI: per compat venv)
    python benches/compat_timing.py --compare           # ... and the ratios against the
                                                        # committed ones (never fails)
    python benches/compat_timing.py --rounds 5 --save   # this venv's row into REFERENCE
    python benches/compat_timing.py --render            # docs/supported.md's table from it

Works on every torch kinetrace supports (2.11 to 2.15), so ``nox -s compat`` runs it
in each compatibility venv. Measured the way the main benchmark measures: every export
runs on a fresh profile of the same workload (not timed: Kineto's ``save`` works once per
result); each round exports once with torch's own ``export_chrome_trace`` to ``.json``
(Kineto's C++ writer) and to ``.json.gz`` (that file gzipped by torch at level 9, torch's own
sequence) and once with ``kinetrace.export_chrome_trace`` to both (torch 2.13+: kinetrace's
formatter, the bytes of torch's Python exporter; older torch: Kineto's writer, checked and
written by kinetrace's fallback), stock and kinetrace in alternating order; each figure is
the median of the rounds (see ``kinetrace._bench.compare_kineto_writer``).

The ratio is torch's time over kinetrace's (above 1: kinetrace is faster). The reference
(``benches/results/compat.json``) holds one row per torch/Python pair, each saved by a run
in that pair's venv with the machine's load; ``--compare`` marks a ratio that moved by more
than 25% from it, and ``--render`` writes the Supported table of ``docs/supported.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path
from typing import Any

import benchlib

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = benchlib.RESULTS / "compat.json"
SUPPORTED = ROOT / "docs" / "supported.md"
FORMATS = ("json", "json.gz")

#: The main suite's own pair (its venv runs the whole suite, not the compat one).
MAIN_SUITE = ("2.15.0", "3.11")


def measure(iterations: int, rounds: int) -> dict[str, Any]:
    """This venv's row: the medians, the ratios and the machine's load around the run."""
    import torch

    from kinetrace import _bench

    before = os.getloadavg() if hasattr(os, "getloadavg") else None
    # torch 2.11/2.12 say once that a profile clears its events each cycle: not our concern.
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
    with tempfile.TemporaryDirectory() as out:
        rows = _bench.compare_kineto_writer(
            lambda: _bench.record_workload(iterations), out, repeat=rounds
        )
    after = os.getloadavg() if hasattr(os, "getloadavg") else None
    by = {(r.exporter, r.fmt): r for r in rows}
    row: dict[str, Any] = {
        "torch": torch.__version__.split("+")[0],
        "python": ".".join(platform.python_version_tuple()[:2]),
        "writer": "formatter" if _bench.has_trace_activities() else "fallback",
        "iterations": iterations,
        "rounds": rounds,
        "load_before": list(before) if before else None,
        "load_after": list(after) if after else None,
        "machine": benchlib.machine_facts(),
        "table": _bench.format_table(rows),
    }
    for fmt in FORMATS:
        stock, ours = by["stock C++", fmt], by["kinetrace", fmt]
        row[fmt] = {
            "stock_s": stock.seconds,
            "kinetrace_s": ours.seconds,
            "ratio": stock.seconds / ours.seconds,
        }
    return row


def key(row: dict[str, Any]) -> str:
    return f"{row['torch']}/{row['python']}"


def load_reference(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"rows": {}}
    return payload if isinstance(payload, dict) and "rows" in payload else {"rows": {}}


def compare(row: dict[str, Any], reference: dict[str, Any], path: Path) -> list[str]:
    """Lines comparing this run's ratios with the reference row of the same pair."""
    ref = reference["rows"].get(key(row))
    if ref is None:
        return [f"no reference for torch {key(row)} in {path.name}: nothing to compare"]
    lines = [f"ratios against {path.name} (saved {ref['machine']['date']}; never fails the build):"]
    moved = 0
    for fmt in FORMATS:
        before, now = ref[fmt]["ratio"], row[fmt]["ratio"]
        change = now / before - 1
        flag = ""
        if abs(change) > benchlib.MOVED:
            moved += 1
            flag = "  <<< MOVED"
        lines.append(
            f"  .{fmt:<8} torch / kinetrace  reference {before:5.2f}x  this run {now:5.2f}x  "
            f"{change:+5.0%}{flag}"
        )
    if moved:
        lines.append(
            f"!!! {moved} ratio(s) moved by more than {benchlib.MOVED:.0%} (a short run on a "
            "busy machine moves some on its own)"
        )
    else:
        lines.append(f"no ratio moved by more than {benchlib.MOVED:.0%}")
    return lines


def _cell(rows: list[dict[str, Any]], fmt: str) -> str:
    """A ratio cell: the first Python's figure, the others' in parentheses."""
    first, *others = rows
    text = f"{first[fmt]['ratio']:.2f}x"
    if others:
        text += " (" + ", ".join(f"{r['python']}: {r[fmt]['ratio']:.2f}x" for r in others) + ")"
    return text


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def render(reference: dict[str, Any]) -> str:
    """The Supported table, and how its figures were measured."""
    by_torch: dict[str, list[dict[str, Any]]] = {}
    for row in reference["rows"].values():
        by_torch.setdefault(row["torch"], []).append(row)
    lines = [
        "| torch | Python | the file | `.json` vs torch | `.json.gz` vs torch |",
        "|---|---|---|---|---|",
    ]
    loads = []
    for torch_version in sorted(by_torch, key=_version, reverse=True):
        # 3.11 first where measured, then the others in order.
        rows = sorted(by_torch[torch_version], key=lambda r: (r["python"] != "3.11", r["python"]))
        pythons = [r["python"] for r in rows]
        if (torch_version, MAIN_SUITE[1]) == MAIN_SUITE and MAIN_SUITE[1] not in pythons:
            python_cell = f"{MAIN_SUITE[1]} (full suite), " + ", ".join(pythons)
            note = f" ({', '.join(pythons)})"
        else:
            python_cell = ", ".join(pythons)
            note = ""
        the_file = (
            "torch's Python-exporter bytes, strict JSON"
            if rows[0]["writer"] == "formatter"
            else "Kineto's format (fallback), strict JSON"
        )
        lines.append(
            f"| {torch_version} | {python_cell} | {the_file} | {_cell(rows, 'json')}{note} "
            f"| {_cell(rows, 'json.gz')}{note} |"
        )
        for r in rows:
            loads += [x[0] for x in (r["load_before"], r["load_after"]) if x]
    rows = list(reference["rows"].values())
    dates = sorted(r["machine"]["date"][:10] for r in rows)
    first = rows[0]
    cpus = first["machine"].get("cpus_usable") or first["machine"].get("cpus")
    load = f"{min(loads):.1f} to {max(loads):.1f}" if loads else "unknown"
    lines += [
        "",
        _wrap(
            f"Measured {dates[0]}"
            + (f" to {dates[-1]}" if dates[-1] != dates[0] else "")
            + f" on {cpus} cores ({first['machine']['cpu_model']}) shared with other jobs, "
            f"1-minute load average {load} during the runs: `python benches/compat_timing.py "
            f"--iterations {first['iterations']} --rounds {first['rounds']} --save` in each "
            "venv, then `--render`. Each row's figures are the medians of "
            f"{first['rounds']} rounds; each round exports a fresh profile of the same workload "
            f"({first['iterations']} steps, `record_shapes`, about 60,000 activities) once per "
            "exporter and format, torch's and kinetrace's in alternating order. The ratio is "
            "torch's time over kinetrace's (above 1: kinetrace is faster); the figures per row "
            "are in `benches/results/compat.json`. CI's short run (`nox -s compat`, "
            "3 rounds) prints the same table per venv and marks a ratio that moved by more "
            "than 25% from these."
        ),
    ]
    return "\n".join(lines)


def _wrap(text: str) -> str:
    """A paragraph in lines of at most 96 characters (code spans kept whole)."""
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000, help="workload steps, 6 ops each")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians")
    parser.add_argument("--save", action="store_true", help=f"write this row into {REFERENCE}")
    parser.add_argument(
        "--compare", action="store_true", help="compare the ratios with the reference row"
    )
    parser.add_argument(
        "--render", action="store_true", help=f"only write {SUPPORTED}'s table from the reference"
    )
    parser.add_argument("--reference", type=Path, default=REFERENCE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    reference = load_reference(args.reference)
    if args.render:
        if not reference["rows"]:
            print(f"no rows in {args.reference}", file=sys.stderr)
            return 1
        page = SUPPORTED.read_text()
        SUPPORTED.write_text(benchlib.replace_between(page, "compat-table", render(reference)))
        print(f"{SUPPORTED}: the Supported table from {args.reference}")
        return 0
    if args.rounds < 1 or args.iterations < 1:
        parser.error("--rounds and --iterations must be at least 1")
    row = measure(args.iterations, args.rounds)
    writer = "kinetrace formatter" if row["writer"] == "formatter" else "Kineto fallback"
    print(
        f"torch {row['torch']}, Python {row['python']}, {writer}, {args.iterations} steps "
        f"(record_shapes), median of {args.rounds} rounds, load average "
        f"{row['load_before'][0] if row['load_before'] else '?'} before the run"
    )
    print(row["table"])
    for fmt in FORMATS:
        f = row[fmt]
        print(
            f"  .{fmt:<8} torch {f['stock_s']:.3f} s, kinetrace {f['kinetrace_s']:.3f} s: "
            f"{f['ratio']:.2f}x"
        )
    if args.compare:
        print("\n".join(compare(row, reference, args.reference)))
    if args.save:
        reference["rows"][key(row)] = row
        reference["rows"] = dict(sorted(reference["rows"].items()))
        args.reference.write_text(json.dumps(reference, indent=1) + "\n")
        print(f"saved torch {key(row)} into {args.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
