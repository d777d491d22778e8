"""``kinetrace parquet SRC... -o DIR [-f] [-j N] [-l L]``: trace files as one Parquet dataset."""

from __future__ import annotations

import argparse
from typing import Any

from kinetrace._cli.args import add_level_option, add_threads_option
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import size
from kinetrace._tools.parquet import DEFAULT_PARQUET_LEVEL, to_parquet

__all__ = ["add_parser", "cmd_parquet"]

PROG = "kinetrace parquet"


def cmd_parquet(args: argparse.Namespace) -> int:
    """Writes the dataset and prints a line per rank.

    Returns:
        0 on success, 1 when it failed (a source is not a valid trace, two sources of one
        rank, DIR exists), 2 when an input cannot be read (:mod:`kinetrace._cli.status`).
    """
    return run_tool(PROG, args.sources, lambda: _parquet(args), directories=True)


def _parquet(args: argparse.Namespace) -> int:
    result = to_parquet(
        args.sources, args.out, force=args.force, threads=args.threads, level=args.level
    )
    for r in result.ranks:
        print(
            f"rank {r.rank:>4} ({r.rank_from}): {r.events:,} events, {r.flows:,} flow ends, "
            f"{r.tracks:,} metadata events from {r.source}"
        )
    print(
        f"{result.path}: {len(result.ranks)} rank(s), {size(result.json_bytes)} of JSON in "
        f"{result.seconds:.2f} s"
    )
    return DONE


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "parquet",
        help="trace files as one Parquet dataset (DuckDB, Spark, pyarrow)",
        description=(
            "Write trace files (.json or gzip, one rank each) or directories of them as one "
            "Parquet dataset: DIR/events, flows, tracks and meta, each partitioned by rank "
            "(rank=R folders), read by DuckDB, Spark, pyarrow and pandas without conversion "
            "(docs/parquet.md). Ranks are found as merge finds them. The dataset appears only "
            "when complete. "
            + exit_statuses(
                failed="failed (a source is not a valid trace, two sources of one rank, DIR exists)"
            )
        ),
    )
    parser.add_argument("sources", nargs="+", metavar="SRC", help="trace files or directories")
    # The flags every tool spells the same way (-o/--output, -f/--force, -j/--threads,
    # -l/--level); --out, parquet's first spelling, is kept as an alias.
    parser.add_argument(
        "-o",
        "--output",
        "--out",
        dest="out",
        required=True,
        metavar="DIR",
        help="the dataset's folder",
    )
    parser.add_argument(
        "-f", "--force", action="store_true", help="replace an existing dataset at DIR"
    )
    add_threads_option(parser, 1024, "files converted at once")
    add_level_option(parser, "zstd", (1, 22), DEFAULT_PARQUET_LEVEL, "the dataset's pages")
    parser.set_defaults(func=cmd_parquet)
