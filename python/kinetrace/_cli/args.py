"""What the subcommands share: argument types (a wrong text is a usage error, exit status
2), the gzip and ``Keep`` options. Exit statuses and how a failure is printed:
``kinetrace._cli.status``."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kinetrace._env import DEFAULT_COMPRESSLEVEL
from kinetrace._tools.split import Keep

__all__ = [
    "add_gzip_options",
    "add_keep_options",
    "add_level_option",
    "add_threads_option",
    "int_in_range",
    "integer",
    "keep_from",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "window",
]


# --------------------------------------------------------------------------------------
# argument types
# --------------------------------------------------------------------------------------


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def non_negative_int(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def int_in_range(low: int, high: int) -> Callable[[str], int]:
    """An integer from ``low`` to ``high``: anything else is a usage error (exit status 2),
    before a tool starts."""

    def parse(text: str) -> int:
        value = integer(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def positive_float(text: str) -> float:
    value = _float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def window(text: str) -> tuple[float, float]:
    """``START_US:END_US``, START < END."""
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        span = (float(start), float(end))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START_US:END_US, got {text!r}") from None
    if not span[0] < span[1]:
        raise argparse.ArgumentTypeError(f"START must be less than END, got {text!r}")
    return span


def add_threads_option(parser: argparse.ArgumentParser, most: int, what: str) -> None:
    """``-j/--threads``, 1 to ``most`` (default: the cores available), the one spelling every
    tool gives the number of its threads; ``what`` says what they do."""
    parser.add_argument(
        "-j",
        "--threads",
        type=int_in_range(1, most),
        default=None,
        help=f"{what}, 1-{most} (default: the cores available)",
    )


def add_level_option(
    parser: argparse.ArgumentParser,
    codec: str,
    levels: tuple[int, int],
    default: int | None,
    what: str,
) -> None:
    """``-l/--level``, ``codec``'s level in the range ``levels``, the one spelling every tool
    gives its compression level (``default`` None: the library's,
    :data:`DEFAULT_COMPRESSLEVEL`); ``what`` names the output."""
    low, high = levels
    parser.add_argument(
        "-l",
        "--level",
        type=int_in_range(low, high),
        default=default,
        help=f"{codec} level {low}-{high} for {what} "
        f"(default: {DEFAULT_COMPRESSLEVEL if default is None else default})",
    )


def add_gzip_options(parser: argparse.ArgumentParser, what: str = "gzip output") -> None:
    """``-l/--level`` (0-9) and ``-j/--threads`` (1-256): the parallel encoder's settings."""
    add_level_option(parser, "gzip", (0, 9), None, what)
    add_threads_option(parser, 256, "compression threads")


def add_keep_options(parser: argparse.ArgumentParser, *, merged: bool = False) -> None:
    """The criteria of :class:`kinetrace.Keep` (``filter``, and ``merge`` where ``merged``:
    the window is on the merged timeline, a pid is a source's pid in every rank);
    :func:`keep_from` reads them back."""
    parser.add_argument(
        "--include-cat", action="append", metavar="CAT", help="keep only this category (repeatable)"
    )
    parser.add_argument(
        "--exclude-cat", action="append", metavar="CAT", help="drop this category (repeatable)"
    )
    parser.add_argument(
        "--min-dur-us", type=non_negative_float, metavar="X", help="drop events shorter than X us"
    )
    parser.add_argument(
        "--window",
        type=window,
        metavar="START_US:END_US",
        help="keep events overlapping this window of the " + ("merged ts" if merged else "ts"),
    )
    parser.add_argument(
        "--pid",
        action="append",
        metavar="P",
        help="keep only this process "
        + ("of the sources, in every rank (repeatable)" if merged else "(repeatable)"),
    )


def keep_from(args: argparse.Namespace) -> Keep:
    """The :class:`kinetrace.Keep` of the options :func:`add_keep_options` added.

    Raises:
        TypeError, ValueError: a criterion out of range.
    """
    return Keep(
        include_cats=tuple(args.include_cat or ()),
        exclude_cats=tuple(args.exclude_cat or ()),
        min_dur_us=args.min_dur_us,
        window_us=args.window,
        pids=tuple(_pid(p) for p in (args.pid or ())),
    )


def _pid(text: str) -> int | str:
    """A ``--pid`` as written in traces: a number, or a string such as ``Spans``."""
    try:
        return int(text)
    except ValueError:
        return text
