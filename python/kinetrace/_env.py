"""Helpers every part of the package shares: the default gzip level, the cores available,
integer arguments' ranges (``require_in_range``, ``gzip_settings``), torch's version, and
waiting (interruptibly) for a FIFO's reader."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from typing import Any

#: Default gzip level for ``.gz`` paths: the fastest level whose output stays within 1.10x
#: of stock torch's (level 9) size on the benchmark profile. Measured on 300k record_shapes
#: activities: level 6 gives 1.11x the size, level 7 0.995x in the same time.
DEFAULT_COMPRESSLEVEL = 7


def available_cpus() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except ImportError:
        return "not installed"


@contextlib.contextmanager
def fifo_reader_ready(path: str) -> Iterator[None]:
    """Opening a FIFO that has no reader blocks, out of Ctrl-C's reach (the native open
    runs with the GIL released): wait for a reader here instead, where Ctrl-C works. The
    probe stays open as a writer until the block ends, so a reader that opens the FIFO for
    one writer does not see end-of-file between our probe and the real open."""
    probe = None
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False  # the real open reports it
    while is_fifo and probe is None:
        try:
            probe = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                break
            time.sleep(0.05)
    try:
        yield
    finally:
        if probe is not None:
            os.close(probe)


def require_in_range(name: str, value: Any, low: int, high: int) -> None:
    """Raises ``TypeError`` unless ``value`` is an int (a bool is not), ``ValueError`` unless
    ``low <= value <= high``; the message names the argument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


def gzip_settings(compresslevel: int | None, threads: int | None) -> tuple[int, int]:
    """The encoder's level and threads: the defaults where None (:data:`DEFAULT_COMPRESSLEVEL`,
    the cores available), each checked (0-9, 1-256) by :func:`require_in_range`."""
    level = DEFAULT_COMPRESSLEVEL if compresslevel is None else compresslevel
    n_threads = available_cpus() if threads is None else threads
    require_in_range("compresslevel", level, 0, 9)
    require_in_range("threads", n_threads, 1, 256)
    return level, n_threads
