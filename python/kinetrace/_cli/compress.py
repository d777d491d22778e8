"""``kinetrace compress SRC [DST]``: rewrite a trace as one gzip member."""

from __future__ import annotations

import argparse
import errno
import os
from typing import Any

from kinetrace._cli.args import add_gzip_options
from kinetrace._cli.status import DONE, exit_statuses, run_tool
from kinetrace._text import size
from kinetrace._tools.compress import compress_trace, is_gzip

__all__ = ["add_parser", "cmd_compress"]


def cmd_compress(args: argparse.Namespace) -> int:
    """DST defaults to ``SRC.gz`` for plain JSON and to SRC itself (replaced atomically) for
    gzip input. An existing DST other than a gzip SRC itself is replaced only with
    ``--force``.

    Returns:
        0 on success; 1 when it failed (a bad trace, a write error) or refused to overwrite
        DST; 2 for an unreadable SRC (:mod:`kinetrace._cli.status`).
    """
    return run_tool("kinetrace compress", [args.src], lambda: _compress(args))


def _compress(args: argparse.Namespace) -> int:
    src: str = os.fsdecode(args.src)
    gzip_in = is_gzip(src)
    dst: str = os.fsdecode(args.dst) if args.dst is not None else (src if gzip_in else src + ".gz")
    in_place = _same_file(src, dst)
    if os.path.exists(dst) and not args.force and not (in_place and gzip_in):
        raise FileExistsError(errno.EEXIST, f"{dst} exists (use -f/--force to overwrite it)")
    result = compress_trace(src, dst, compresslevel=args.level, threads=args.threads)
    kind = "gzip" if gzip_in else "JSON"
    target = f"{dst} (in place)" if in_place else dst
    mb_s = result.json_bytes / 1e6 / max(result.seconds, 1e-9)
    print(
        f"{src} ({size(result.source_bytes)} {kind}) -> {target}: {size(result.file_bytes)}, "
        f"one gzip member; {size(result.json_bytes)} of JSON in {result.seconds:.2f} s "
        f"({mb_s:.0f} MB/s, level {result.level}, "
        f"{result.threads} thread{'s' if result.threads != 1 else ''})"
    )
    return DONE


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compress",
        help="rewrite a trace as one gzip member with parallel compression",
        description=(
            "Stream a trace (.json, or gzip with any number of members) into a single-member "
            "gzip file with the parallel encoder. Some viewers (chrome://tracing, TensorBoard "
            "in a browser, zlib.decompress(data, 31)) read only the first member of a gzip "
            "file. SRC is checked strictly as it streams (as split and filter read it): "
            "anything that is not a trace fails at the offset of its first fault, and a "
            "top-level member or event over 64 MiB is refused. The output appears "
            "atomically; on error, Ctrl-C, SIGTERM or SIGHUP nothing is left behind. "
            + exit_statuses(
                failed="failed (SRC not a trace, a write error) or refused to overwrite"
            )
        ),
    )
    parser.add_argument("src", metavar="SRC", help="the trace to compress (.json or gzip)")
    parser.add_argument(
        "dst",
        metavar="DST",
        nargs="?",
        help="output (default: SRC.gz for JSON, SRC itself, rewritten, for gzip)",
    )
    add_gzip_options(parser, "the output")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite DST if it exists")
    parser.set_defaults(func=cmd_compress)
