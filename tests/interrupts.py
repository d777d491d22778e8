"""Ctrl-C in tests: a latency bound that follows the machine's load, and SIGINT handlers that
never raise inside a garbage-collector callback.

A test that interrupts an export asserts two things: that the interrupt ended it (the call
raised ``KeyboardInterrupt`` long before it would have finished), and that it did so soon
after the signal. "Soon" on an idle machine is well under half a second (every wait in
kinetrace checks for signals every 50 ms); on a machine whose cores are all busy (a CI host
running several builds) every step of the cleanup waits for a core, so the bound grows with
the load instead of being one absolute number.

Python runs a signal handler at the next bytecode of the main thread, which may be inside a
``gc.callbacks`` function (hypothesis registers one). An exception raised there is reported
as "Exception ignored" and lost: the interrupt would vanish. :func:`interrupt_handler`
instead sends the signal again a moment later, when the callback has returned.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["BASE_LATENCY", "in_gc_callback", "interrupt_handler", "latency_bound"]

#: The interrupt latency allowed on an idle machine (seconds).
BASE_LATENCY = 0.5
#: The most the load may stretch it: still far below the runtime of the exports the tests
#: interrupt (many seconds), so a missed interrupt still fails.
MAX_STRETCH = 6.0


def latency_bound() -> float:
    """Seconds allowed between SIGINT and the ``KeyboardInterrupt``: :data:`BASE_LATENCY`
    times the number of runnable tasks per core (the 1-minute load average), at least 1 and
    at most :data:`MAX_STRETCH`."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available here
        load = 0.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    stretch = min(MAX_STRETCH, max(1.0, load / (cores or 1)))
    return BASE_LATENCY * stretch


def in_gc_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` (the one a signal handler interrupted) runs in a ``gc.callbacks``
    function or below one."""
    codes = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    codes.discard(None)
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def interrupt_handler(
    should_raise: Callable[[], bool] = lambda: True,
) -> Callable[[int, FrameType | None], Any]:
    """A SIGINT handler that raises ``KeyboardInterrupt`` when ``should_raise()`` (called
    only outside gc callbacks) says so, and inside a gc callback re-sends the signal 1 ms
    later."""
    pid = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if in_gc_callback(frame):
            retry = threading.Timer(0.001, os.kill, (pid, signal.SIGINT))
            retry.daemon = True
            retry.start()
            return
        if should_raise():
            raise KeyboardInterrupt

    return handler
