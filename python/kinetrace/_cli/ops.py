"""``kinetrace ops PATH... [--rules exact|tracelens] [--gpu NAME] [--top N] [--json] [--html
FILE]``: how close each operator's GPU time came to the GPU's roofline, the groups that
could save the most time first."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any, TextIO

from kinetrace._cli.args import add_threads_option, int_in_range
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import duration
from kinetrace._tools.ops import OpGroup, OpsReport, gpu_keys, known_gpu, ops
from kinetrace._tools.ops_html import coverage_line, gpu_line, shapes_text, write_ops_html

__all__ = ["WIDTH", "add_parser", "cmd_ops", "report", "write_json"]

PROG = "kinetrace ops"

#: The terminal table's width at most.
WIDTH = 100

#: (header, width) of the table's columns after the name, one space apart.
COLUMNS = (("dims", 22), ("count", 6), ("time", 10), ("save", 10), ("TFLOP/s", 7))
RATES = (("TB/s", 5), ("roof", 5), ("bound", 7))
NAME = WIDTH - sum(w + 1 for _, w in COLUMNS + RATES)


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` columns, its end replaced by an ellipsis where longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _group_line(g: OpGroup) -> str:
    name = g.name + (" (bwd)" if g.bwd else "")
    cells = [
        _cut(name, NAME).ljust(NAME),
        _cut(shapes_text(g.input_dims), 22).ljust(22),
        f"{g.count:>6,}",
        f"{duration(g.time_us):>10}",
        f"{'-' if g.saveable_us is None else duration(g.saveable_us):>10}",
        f"{_num(g.tflops_s, '.1f'):>7}",
        f"{_num(g.tbs, '.2f'):>5}",
        f"{_num(g.roof_pct, '.0f') + ('%' if g.roof_pct is not None else ''):>5}",
        f"{g.bound or '-':<7}",
    ]
    return " ".join(cells).rstrip()


def report(found: OpsReport, top: int) -> str:
    """The terminal report: the GPU, the totals, the ``top`` groups furthest from their roof
    by the time they could save."""
    time_us = sum(g.time_us for g in found.groups)
    save = sum(g.saveable_us or 0.0 for g in found.groups)
    saveable = "no roofline" if found.gpu is None else f"{duration(save)} saveable at the roofline"
    lines = [
        _cut(found.label, WIDTH),
        f"{len(found.rows):,} operator rows in {len(found.groups):,} groups "
        f"({found.rules} rules, read in {found.seconds:.2f} s)",
        f"GPU time {duration(time_us)}, {saveable}",
        *textwrap.wrap(gpu_line(found), WIDTH, subsequent_indent="  "),
    ]
    if found.note:
        lines += textwrap.wrap(f"note: {found.note}", WIDTH, subsequent_indent="  ")
    covered = coverage_line(found)
    if covered is not None:
        lines += textwrap.wrap(covered, WIDTH, subsequent_indent="  ")
    header = [
        "operator".ljust(NAME),
        *(h.ljust(w) if h == "dims" else h.rjust(w) for h, w in COLUMNS),
        *(h.rjust(w) if h != "bound" else h for h, w in RATES),
    ]
    lines += ["", f"Top {top} groups by GPU time saveable at the roofline:", " ".join(header)]
    lines += [_group_line(g) for g in found.groups[:top]]
    return "\n".join(lines)


def cmd_ops(args: argparse.Namespace) -> int:
    """Prints the report (or ``--json``); writes ``--html``.

    Returns:
        0 on success, 1 when the file is not a trace, 2 when it cannot be read
        (:mod:`kinetrace._cli.status`).
    """
    return run_tool(PROG, args.paths, lambda: _ops(args), directories=True)


def _ops(args: argparse.Namespace) -> int:
    found = ops(args.paths, rules=args.rules, gpu=args.gpu, threads=args.threads)
    if args.html:
        write_ops_html(found, args.html)
    if args.json:
        write_json(found, sys.stdout)
    else:
        print(report(found, args.top))
    return DONE


def write_json(found: OpsReport, out: TextIO) -> None:
    """:meth:`OpsReport.to_json` as one JSON object, indented, its ``rows`` last and one a
    line (:meth:`OpsReport.rows_json`: ``indent`` would take Python's encoder, 10x slower),
    never the whole text at once (0.66M rows, ~0.5 GB of JSON, on a 1 GB trace)."""
    text = json.dumps(found.json_head(), indent=1)
    out.write(text[: text.rindex("}")].rstrip() + ',\n "rows": [')
    between = "\n  "
    for rows in found.rows_json():
        out.write(between + rows)
        between = ",\n  "
    out.write("\n ]\n}\n")


def _gpu_name(text: str) -> str:
    """A ``--gpu`` name the peaks table knows; else a usage error listing the keys."""
    if known_gpu(text) is None:
        raise argparse.ArgumentTypeError(f"unknown GPU {text!r}; known: {', '.join(gpu_keys())}")
    return text


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ops",
        help="how close each operator came to the GPU's roofline",
        description=(
            "For trace files (.json or gzip, recorded with record_shapes=True; one rank "
            "each, or folders of ranks): each CPU operator's FLOPs and bytes from its "
            "recorded shapes, the busy time of the GPU work it launched, its TFLOPS/s, TB/s "
            "and share of the GPU's roofline; the operators grouped by name and inputs over "
            "every rank, the groups that could save the most GPU time at their roofline "
            "first. The GPU comes from the trace's deviceProperties, or --gpu. --rules "
            "tracelens gives TraceLens's figures. "
            + exit_statuses(failed="failed (the file is not a trace)")
        ),
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="trace files or directories (one rank each)"
    )
    parser.add_argument("--rules", choices=("exact", "tracelens"), default="exact")
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        type=_gpu_name,
        help="the GPU of the roofline: a key such as h100-sxm, a device name, or a family "
        "(default: the trace's deviceProperties)",
    )
    parser.add_argument(
        "--top",
        type=int_in_range(1, 10_000),
        default=10,
        help="groups the table lists, 1-10000 (default 10)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_threads_option(parser, 1024, "files read at once")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained HTML page: the roofline chart and the groups",
    )
    parser.set_defaults(func=cmd_ops)
