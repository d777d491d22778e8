"""``kinetrace diff BASE NEW [--json | --markdown] [--html FILE] [--fail-above PCT]
[--gate gpu|cpu] [--fail-on-counts] [--same-within PCT] [--cpu-estimator E] [--runs]
[--skip-first N] [-j N] [--rules exact|hta [--rank R] [--step N]]``: what changed between
two runs (or two folders of runs) and in which operators, the verdict that gates first, the
other two next."""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from typing import Any

from kinetrace._cli.args import add_threads_option, non_negative_int
from kinetrace._cli.status import DONE, REGRESSION, run_tool
from kinetrace._text import change_pct, duration, p_value, signed_duration
from kinetrace._tools.diff import (
    CPU_ESTIMATOR,
    CPU_ESTIMATORS,
    ESTIMATOR_FIGURES,
    GATES,
    MIN_STEPS,
    SAME_WITHIN_PCT,
    CountChange,
    DiffResult,
    StepComparison,
    diff,
)
from kinetrace._tools.diff_hta import Pick, diff_hta
from kinetrace._tools.diff_html import write_html
from kinetrace._tools.diff_names import row_label
from kinetrace._tools.summary import SummaryWarning

__all__ = [
    "add_parser",
    "cmd_diff",
    "counts_line",
    "headline",
    "markdown",
    "report",
    "verdict_lines",
    "verdict_texts",
    "verdicts",
]

PROG = "kinetrace diff"

#: Rows of the kernel table; the report's width.
TOP = 10
WIDTH = 100
#: The most lines ``--markdown`` prints (a pull-request comment to take in at a glance).
MARKDOWN_LINES = 60


def _p_is(p: float | None) -> str:
    text = p_value(p)
    return f"p{text}" if text.startswith("<") else f"p={text}"


def _said(v: StepComparison) -> str:
    if v.verdict == "same":
        return f"same (within ±{v.margin_pct:g}%)"
    if v.verdict == "unknown":
        return "unknown (these samples cannot tell)"
    return f"NEW is {v.verdict}"


def verdict_lines(v: StepComparison, what: str = "step time") -> tuple[str, list[str]]:
    """The verdict (change, interval, p) and, apart, what it is about: the medians, and for
    an ``"unknown"`` the samples that would likely decide it."""
    if v.verdict == "too few steps":
        return (
            f"{what}: no verdict, too few steps ({v.base_steps} in BASE, {v.new_steps} in NEW)",
            [f"at least {MIN_STEPS} per side are needed"],
        )
    assert v.base_median_us is not None and v.new_median_us is not None
    details = [
        f"{ESTIMATOR_FIGURES[v.estimator]} {duration(v.base_median_us)} -> "
        f"{duration(v.new_median_us)} ({v.base_steps} vs {v.new_steps} steps)"
    ]
    if v.needed is not None:
        details.append(f"about {v.needed:,} {v.needed_unit} a side would likely decide it")
    return (
        f"{what}: {_said(v)}, {change_pct(v.change_pct)} "
        f"[{change_pct(v.ci_low_pct)}, {change_pct(v.ci_high_pct)}] "
        f"{_p_is(v.p_value)}",
        details,
    )


#: What each time verdict is about, as its line names it.
GPU_WHAT = "job GPU time per step"
CPU_WHAT = "job step time"


def verdicts(result: DiffResult) -> list[tuple[str, list[str]]]:
    """The three verdicts, each a line and its details, the one that gates first (named
    so)."""
    if result.gpu is not None:
        line, details = verdict_lines(result.gpu, GPU_WHAT)
        gpu = (line, [*details, "per step, the largest rank's GPU busy time"])
    else:
        gpu = (f"{GPU_WHAT}: none (a side has no GPU activity in its steps)", [])
    line, details = verdict_lines(result.verdict, CPU_WHAT)
    cpu = (line, [*details, "the job's step is its slowest rank's"])
    times = [gpu, cpu] if result.gate == "gpu" else [cpu, gpu]
    (first, details), other = times
    what, rest = first.split(": ", 1)
    return [(f"{what} (gates): {rest}", details), other, (counts_line(result), [])]


def counts_line(result: DiffResult) -> str:
    """The counts' verdict: what changed per step (exact), or that nothing did."""
    changed = [(r, c) for r in result.counts for c in r.changes]
    if not result.counts or not any(r.base_steps and r.new_steps for r in result.counts):
        return "counts per step: none (no step on a side)"
    if not changed:
        return "counts per step: unchanged (GPU launches by name, memcpy bytes, FLOPs; exact)"
    ranks = len({r.rank for r, _ in changed})
    more = " (more work per step in NEW)" if result.count_regression() else ""
    first = ", ".join(_count_text(c) for _, c in changed[:3])
    extra = f", ... ({len(changed) - 3} more)" if len(changed) > 3 else ""
    return (
        f"counts per step: {len(changed)} changed on {ranks} rank{'s' if ranks > 1 else ''}"
        f"{more}: {first}{extra}"
    )


def _fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def _count_text(c: CountChange) -> str:
    name = row_label(c.status, c.name, c.new_name)
    if len(name) > 60:
        name = name[:57] + "..."
    label = c.measure or name
    return f"{label} {c.figure(c.base_per_step)}{c.unit} -> {c.figure(c.new_per_step)}{c.unit}"


def _rank_rows(result: DiffResult, gpu: bool = False) -> list[str]:
    lines = [
        f"{'rank':>5}  {'BASE':>11}  {'NEW':>11}  {'change':>7}  {'95% CI':>17}  {'p':>7}  verdict"
    ]
    for r in result.ranks:
        v = r.gpu if gpu else r.steps
        if v is None:
            continue
        label = str(r.rank) if r.rank == r.new_rank else f"{r.rank}/{r.new_rank}"
        ci = (
            f"[{change_pct(v.ci_low_pct)}, {change_pct(v.ci_high_pct)}]"
            if v.ci_low_pct is not None
            else "-"
        )
        b = "-" if v.base_median_us is None else duration(v.base_median_us)
        n = "-" if v.new_median_us is None else duration(v.new_median_us)
        lines.append(
            f"{label:>5}  {b:>11}  {n:>11}  {change_pct(v.change_pct):>7}  {ci:>17}  "
            f"{p_value(v.p_value):>7}  {v.verdict}"
        )
    return lines


def _count_rows(result: DiffResult) -> list[str]:
    lines = [f"{'rank':>5}  {'BASE/step':>14}  {'NEW/step':>14}  what"]
    for r in result.counts:
        for c in r.changes[:TOP]:
            name = c.measure or row_label(c.status, c.name, c.new_name)
            b, n = c.figure(c.base_per_step), c.figure(c.new_per_step)
            row = f"{r.rank:>5}  {b:>12}{c.unit:2}  {n:>12}{c.unit:2}  "
            room = WIDTH - len(row)
            lines.append(row + (name if len(name) <= room else name[: room - 3] + "..."))
    return lines


def _breakdown_rows(result: DiffResult) -> list[str]:
    lines = [f"{'rank':>5}  {'per step':<12}  {'BASE':>11}  {'NEW':>11}  {'change':>12}"]
    for r in result.ranks:
        for c in r.breakdown:
            lines.append(
                f"{r.rank:>5}  {c.name:<12}  {duration(c.base_us):>11}  "
                f"{duration(c.new_us):>11}  {signed_duration(c.change_us):>12}"
            )
    return lines


def _kernel_rows(result: DiffResult) -> list[str]:
    lines = [f"{'change/step':>12}  {'BASE/step':>11}  {'NEW/step':>11}  {'count/step':>15}  name"]
    for k in result.kernels[:TOP]:
        counts = f"{k.base_count:.3g}->{k.new_count:.3g}"
        name = row_label(k.status, k.name, k.new_name)
        row = (
            f"{signed_duration(k.change_us):>12}  {duration(k.base_us):>11}  "
            f"{duration(k.new_us):>11}  "
            f"{counts:>15}  "
        )
        room = WIDTH - len(row)
        lines.append(row + (name if len(name) <= room else name[: room - 3] + "..."))
    return lines


def _operator_rows(result: DiffResult) -> list[str]:
    lines = [
        f"{'change/step':>12}  {'self CPU':>11}  {'own GPU':>11}  {'count/step':>15}  operator"
    ]
    for o in result.operators[:TOP]:
        counts = f"{o.base_count:.3g}->{o.new_count:.3g}"
        cpu = signed_duration(o.new_self_us - o.base_self_us)
        gpu = signed_duration(o.new_gpu_us - o.base_gpu_us)
        name = row_label(o.status, o.name, o.new_name)
        name += f" {o.input_dims}" if o.input_dims and o.input_dims != "[]" else ""
        row = f"{signed_duration(o.change_us):>12}  {cpu:>11}  {gpu:>11}  {counts:>15}  "
        room = WIDTH - len(row)
        lines.append(row + (name if len(name) <= room else name[: room - 3] + "..."))
    return lines


def _unmatched(result: DiffResult) -> list[str]:
    lines = []
    if result.base_only_ranks:
        lines.append(f"ranks only in BASE: {', '.join(map(str, result.base_only_ranks))}")
    if result.new_only_ranks:
        lines.append(f"ranks only in NEW: {', '.join(map(str, result.new_only_ranks))}")
    return lines


def report(result: DiffResult) -> str:
    """The terminal report: the three verdicts (the one that gates first), then per rank,
    the counts that changed, the breakdown, kernels, operators."""
    lines: list[str] = []
    for line, details in verdicts(result):
        lines += [_fit(line), *(_fit(f"  {d}") for d in details)]
    lines += _unmatched(result)
    if result.ranks:
        lines += ["", "Step time per rank (medians):", *_rank_rows(result)]
    if any(r.gpu is not None for r in result.ranks):
        lines += ["", "GPU busy time per step, per rank (medians):", *_rank_rows(result, gpu=True)]
    if any(r.changes for r in result.counts):
        lines += ["", "Counts per step that changed (exact):", *_count_rows(result)]
    if result.ranks and result.kernels:
        lines += ["", "GPU time per step, per rank:", *_breakdown_rows(result)]
    if result.kernels:
        lines += ["", f"GPU activities, largest change first (top {TOP}):", *_kernel_rows(result)]
    if result.operators:
        title = f"Operators per step, self CPU + own GPU time, largest change first (top {TOP}):"
        lines += ["", title, *_operator_rows(result)]
    return "\n".join(lines)


def _markdown_ranks(result: DiffResult, gpu: bool = False) -> list[str]:
    lines = [
        "| rank | BASE | NEW | change | 95% CI | p | verdict |",
        "|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in result.ranks:
        v = r.gpu if gpu else r.steps
        if v is None:
            continue
        b = "-" if v.base_median_us is None else duration(v.base_median_us)
        n = "-" if v.new_median_us is None else duration(v.new_median_us)
        ci = (
            f"[{change_pct(v.ci_low_pct)}, {change_pct(v.ci_high_pct)}]"
            if v.ci_low_pct is not None
            else "-"
        )
        label = str(r.rank) if r.rank == r.new_rank else f"{r.rank}/{r.new_rank}"
        cells = [label, b, n, change_pct(v.change_pct), ci, p_value(v.p_value), v.verdict]
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def _markdown_kernels(result: DiffResult) -> list[str]:
    lines = ["| change/step | BASE/step | NEW/step | GPU activity |", "|---:|---:|---:|---|"]
    for k in result.kernels[:TOP]:
        lines.append(
            f"| {signed_duration(k.change_us)} | {duration(k.base_us)} | {duration(k.new_us)} | "
            f"{_md_name(k.status, k.name, k.new_name)} |"
        )
    return lines


def _md_name(status: str, name: str, new_name: str) -> str:
    def code(text: str) -> str:
        return "`" + text.replace("|", "\\|").replace("`", "'")[:120] + "`"

    if status == "renamed":
        return f"(renamed) {code(name)} => {code(new_name)}"
    return f"({status}) {code(name)}" if status else code(name)


def _markdown_operators(result: DiffResult) -> list[str]:
    lines = [
        "| change/step | self CPU | own GPU | operator | Input Dims |",
        "|---:|---:|---:|---|---|",
    ]
    for o in result.operators[:TOP]:
        cpu = signed_duration(o.new_self_us - o.base_self_us)
        gpu = signed_duration(o.new_gpu_us - o.base_gpu_us)
        dims = o.input_dims.replace("|", "\\|")[:80]
        lines.append(
            f"| {signed_duration(o.change_us)} | {cpu} | {gpu} | "
            f"{_md_name(o.status, o.name, o.new_name)} | {dims} |"
        )
    return lines


def _markdown_counts(result: DiffResult) -> list[str]:
    lines = ["| rank | BASE/step | NEW/step | what |", "|---:|---:|---:|---|"]
    for r in result.counts:
        for c in r.changes[:TOP]:
            what = c.measure or _md_name(c.status, c.name, c.new_name)
            b, n = c.figure(c.base_per_step), c.figure(c.new_per_step)
            lines.append(f"| {r.rank} | {b} | {n} | {what} |")
    return lines


def verdict_texts(result: DiffResult) -> list[str]:
    """The three verdicts, each in one line with its medians, the one that gates first
    (``--markdown``'s and ``--html``'s)."""
    return ["; ".join([line, *details]) for line, details in verdicts(result)]


def headline(result: DiffResult) -> str:
    """The verdict that gates and its medians in one line (``--markdown``'s first,
    ``--html``'s)."""
    return verdict_texts(result)[0]


def markdown(result: DiffResult) -> str:
    """A pull-request comment: the verdict that gates in the first line, the other two
    next, at most :data:`MARKDOWN_LINES`."""
    first, *others = verdict_texts(result)
    lines = [f"**kinetrace diff**: {first}", "", *(f"- {line}" for line in others)]
    if result.ranks:
        lines += ["", "Step time per rank (medians):", "", *_markdown_ranks(result)]
    if any(r.gpu is not None for r in result.ranks):
        lines += [
            "",
            "GPU busy time per step, per rank (medians):",
            "",
            *_markdown_ranks(result, gpu=True),
        ]
    if any(r.changes for r in result.counts):
        lines += ["", "Counts per step that changed (exact):", "", *_markdown_counts(result)]
    if result.kernels:
        lines += [
            "",
            "GPU activities per step, largest change first:",
            "",
            *_markdown_kernels(result),
        ]
    if result.operators:
        lines += [
            "",
            "Operators per step (self CPU + own GPU), largest change first:",
            "",
            *_markdown_operators(result),
        ]
    if len(lines) > MARKDOWN_LINES:
        cut = len(lines) - MARKDOWN_LINES + 1
        lines = [*lines[: MARKDOWN_LINES - 1], f"... ({cut} more lines: --json has them all)"]
    return "\n".join(lines)


def cmd_diff(args: argparse.Namespace) -> int:
    """Prints the report (or ``--json`` / ``--markdown``), warnings on stderr; writes
    ``--html``.

    Returns:
        0 done, 3 with ``--fail-above`` when NEW is significantly slower by more than it,
        1 failed, 2 an unreadable input (:mod:`kinetrace._cli.status`).
    """
    return run_tool(PROG, [args.base, args.new], lambda: _diff(args), directories=True)


def _diff(args: argparse.Namespace) -> int:
    if args.rules == "hta":
        return _diff_hta(args)
    if args.rank is not None or args.step is not None:
        raise ValueError("--rank and --step need --rules hta")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SummaryWarning)
        result = diff(
            args.base,
            args.new,
            runs=args.runs,
            skip_first=args.skip_first,
            threads=args.threads,
            gate=args.gate,
            same_within=args.same_within,
            cpu_estimator=args.cpu_estimator,
        )
    if args.html:
        write_html(result, args.html, verdict_texts(result))
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    elif args.markdown:
        print(markdown(result))
    else:
        print(report(result))
    if args.fail_above is not None and result.regression(args.fail_above):
        return REGRESSION
    if args.fail_on_counts and result.count_regression():
        return REGRESSION
    return DONE


def _diff_hta(args: argparse.Namespace) -> int:
    if args.runs or args.skip_first or args.fail_above is not None or args.fail_on_counts:
        raise ValueError(
            "--rules hta compares one rank and one step: no --runs, --skip-first, "
            "--fail-above or --fail-on-counts"
        )
    if (
        args.gate is not None
        or args.same_within != SAME_WITHIN_PCT
        or args.cpu_estimator != CPU_ESTIMATOR
    ):
        raise ValueError(
            "--rules hta gives no verdict: no --gate, --same-within or --cpu-estimator"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SummaryWarning)
        result = diff_hta(args.base, args.new, rank=args.rank, step=args.step, threads=args.threads)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(result.markdown() if args.markdown else result.report(WIDTH))
    return DONE


def _pick(text: str) -> Pick:
    """``N`` for both sides, or ``B:N`` (BASE's and NEW's)."""
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise argparse.ArgumentTypeError(f"must be N or BASE:NEW (integers), not {text}")


def _percent(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a percentage >= 0, not {text}")
    return value


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="what changed between two runs: the step time's verdict, then where it went",
        description=(
            "Compare two runs, each a trace file (.json or gzip) or a folder of ranks. Three "
            "verdicts for the job and per rank: the GPU busy time of each step (on the GPU's "
            "clock, each step's window from its first launched activity to the next step's), "
            "the CPU step time (each ProfilerStep a sample), each with medians, change, 95%% "
            "bootstrap interval, Mann-Whitney p (the bootstrap's with --runs) and a verdict: "
            "slower, faster, same (the interval within --same-within) or unknown (with about "
            "how many runs or steps a side would decide it); and the counts per step (GPU "
            "activities launched by name, memcpy bytes by direction, FLOPs of the operators "
            "ops models), exact. Then the GPU "
            "time breakdown, GPU activities and operators with the largest change. The first "
            "line is the verdict that gates. "
            "Exit status: 0 done, 1 failed (a file is not a trace, two files of one rank), "
            f"2 an unreadable input or a usage error, {REGRESSION} with --fail-above when the "
            "gating verdict is slower by more than PCT, or with --fail-on-counts when NEW does "
            "more per step (kinetrace --help has the table)."
        ),
    )
    parser.add_argument("base", metavar="BASE", help="the run compared against")
    parser.add_argument("new", metavar="NEW", help="the run compared")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--markdown", action="store_true", help="print a pull-request comment")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained HTML page (a waterfall of the change, the step times)",
    )
    _add_verdict_options(parser)
    parser.add_argument(
        "--runs",
        action="store_true",
        help="BASE and NEW are each a folder of runs (trace files or folders of ranks), "
        "their steps pooled",
    )
    parser.add_argument(
        "--skip-first",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="leave out each rank's first N steps",
    )
    parser.add_argument(
        "--rules",
        choices=("exact", "hta"),
        default="exact",
        help="exact (the above) or hta: HolisticTraceAnalysis 0.5's compare_traces, per "
        "event name the count and total time of one rank and one step on each side",
    )
    parser.add_argument("--rank", type=_pick, metavar="R", help="hta: the rank (R or BASE:NEW)")
    parser.add_argument(
        "--step", type=_pick, metavar="N", help="hta: ProfilerStep#N (N or BASE:NEW)"
    )
    add_threads_option(parser, 1024, "threads reading the files, two a file")
    parser.set_defaults(func=cmd_diff)


def _add_verdict_options(parser: argparse.ArgumentParser) -> None:
    """The options that pick the verdict that gates and fail the job on it."""
    parser.add_argument(
        "--fail-above",
        type=_percent,
        metavar="PCT",
        help=f"exit {REGRESSION} when the gating verdict is slower (significantly) by more "
        "than PCT %%",
    )
    parser.add_argument(
        "--gate",
        choices=GATES,
        help="the time verdict that gates (first line, --fail-above): the GPU busy time per "
        "step or the CPU step time (default: gpu where both sides have GPU activities in "
        "their steps, else cpu)",
    )
    parser.add_argument(
        "--fail-on-counts",
        action="store_true",
        help=f"exit {REGRESSION} when NEW does more per step on a rank: a new GPU activity, "
        "more launches of one, more bytes copied between host and device, more FLOPs",
    )
    parser.add_argument(
        "--same-within",
        type=_percent,
        default=SAME_WITHIN_PCT,
        metavar="PCT",
        help="the equivalence margin: a time is 'same' when its whole 95%% interval lies "
        "within +-PCT %% (default %(default)g)",
    )
    parser.add_argument(
        "--cpu-estimator",
        choices=CPU_ESTIMATORS,
        default=CPU_ESTIMATOR,
        help="a side's CPU step time: the pooled steps' median (median), or with --runs, 4 "
        "or more a side, the median over its runs of each run's fastest step (fastest: "
        "steadier on a busy machine) or lower quartile of steps (quartile), runs tested "
        "against runs (default %(default)s)",
    )
