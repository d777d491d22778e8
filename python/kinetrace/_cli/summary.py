"""``kinetrace summary PATH... [--rules exact|hta] [--json] [--html FILE]``: where the GPU
time of each rank went."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any

from kinetrace._cli.args import add_threads_option
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import duration, size
from kinetrace._tools.summary import RankSummary, Summary, SummaryWarning, summarize, top_kernels
from kinetrace._tools.summary_html import write_html

__all__ = ["add_parser", "cmd_summary", "report"]

PROG = "kinetrace summary"

#: Kernels and steps the terminal report lists.
TOP = 10


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole > 0 else "    -"


def _rank_rows(ranks: tuple[RankSummary, ...]) -> list[str]:
    lines = [
        f"{'rank':>5}  {'GPU span':>12}  {'compute':>7}  {'other':>7}  {'idle':>7}  "
        f"{'comm overlap':>12}  {'activities':>10}  source"
    ]
    for r in ranks:
        t = r.temporal_breakdown
        overlap = "-" if r.comm_comp_overlap_pct is None else f"{r.comm_comp_overlap_pct:.2f}%"
        lines.append(
            f"{r.rank:>5}  {duration(t.kernel_time_us):>12}  "
            f"{_pct(t.compute_time_us, t.kernel_time_us):>7}  "
            f"{_pct(t.non_compute_time_us, t.kernel_time_us):>7}  "
            f"{_pct(t.idle_time_us, t.kernel_time_us):>7}  {overlap:>12}  "
            f"{r.gpu_activities:>10,}  {os.path.basename(r.source)}"
        )
    return lines


def _kernel_rows(summary: Summary) -> list[str]:
    total = sum(k.sum_us for r in summary.ranks for k in r.kernels)
    lines = [f"{'total':>12}  {'share':>6}  {'count':>8}  {'mean':>12}  {'type':<13}  name"]
    for k in top_kernels(summary.ranks):
        name = k.name if len(k.name) <= 90 else k.name[:87] + "..."
        lines.append(
            f"{duration(k.sum_us):>12}  {_pct(k.sum_us, total):>6}  {k.count:>8,}  "
            f"{duration(k.mean_us):>12}  {k.type:<13}  {name}"
        )
    return lines


def _step_rows(summary: Summary) -> list[str]:
    spreads = sorted(summary.steps, key=lambda s: -(s.ratio or 0))[:TOP]
    return [
        f"{s.name:<20} slowest rank {s.slowest_rank} ({duration(s.slowest_us)}), fastest rank "
        f"{s.fastest_rank} ({duration(s.fastest_us)})"
        + (f", x{s.ratio:.3f}" if s.ratio is not None else "")
        for s in spreads
    ]


def report(summary: Summary) -> str:
    """The terminal report: a table of ranks, the top kernels, the stragglers."""
    json_bytes = sum(r.json_bytes for r in summary.ranks)
    n = len(summary.ranks)
    lines = [
        f"{n} rank{'s' if n != 1 else ''}, {size(json_bytes)} of JSON read in "
        f"{summary.seconds:.2f} s ({summary.rules} rules)",
        "",
        *_rank_rows(summary.ranks),
        "",
        f"Top {TOP} GPU activities (all ranks):",
        *_kernel_rows(summary),
    ]
    if summary.steps:
        lines += ["", "Steps (slowest / fastest rank, largest spread first):", *_step_rows(summary)]
    return "\n".join(lines)


def cmd_summary(args: argparse.Namespace) -> int:
    """Prints the report (or ``--json``), warnings on stderr; writes ``--html``.

    Returns:
        0 on success, 1 when it failed (a file that is not a trace, two files of one rank),
        2 when an input cannot be read (:mod:`kinetrace._cli.status`).
    """
    return run_tool(PROG, args.paths, lambda: _summary(args), directories=True)


def _summary(args: argparse.Namespace) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SummaryWarning)
        summary = summarize(args.paths, rules=args.rules, threads=args.threads)
    if args.html:
        write_html(summary, args.html)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary.to_json(), indent=1))
    else:
        print(report(summary))
    return DONE


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "summary",
        help="where the GPU time of each rank went",
        description=(
            "Summarise trace files (.json or gzip, one rank each) or directories of them: per "
            "rank the temporal breakdown (idle, compute, non-compute), kernel-type times, "
            "every GPU activity's totals, the communication/computation overlap, idle time "
            "per stream, and each ProfilerStep with the slowest and fastest rank. --rules "
            "exact (default) reads times exactly as the trace states them; --rules hta gives "
            "HolisticTraceAnalysis 0.5.0's figures. "
            + exit_statuses(failed="failed (a file is not a trace, two files of one rank)")
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories")
    parser.add_argument("--rules", choices=("exact", "hta"), default="exact")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    add_threads_option(parser, 1024, "files read at once")
    parser.set_defaults(func=cmd_summary)
