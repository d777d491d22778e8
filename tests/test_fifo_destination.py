"""A FIFO destination is written in place (no temporary file beside it), and a reader that
goes away mid-trace is an ``EPIPE`` error, not a hang. (Ctrl-C while a FIFO stalls:
``test_interrupts.py``.)"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

import kinetrace
from support.aftermath import (
    assert_no_kinetrace_threads,
)
from support.synthetic import SyntheticResult
from support.traces import strict_loads


def read_fifo(path: Path, limit: int | None, into: bytearray) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            into += chunk
            if limit is not None and len(into) >= limit:
                return  # the reader goes away early


def test_fifo_destination_is_written_directly(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    received = bytearray()
    reader = threading.Thread(target=read_fifo, args=(fifo, None, received))
    reader.start()
    try:
        stats = kinetrace.export_chrome_trace(SyntheticResult(20_000), fifo)
    finally:
        reader.join(timeout=60)
    assert len(received) == stats.uncompressed_bytes
    assert len(strict_loads(received)["traceEvents"]) == stats.events
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.json"]


def test_fifo_reader_goes_away(tmp_path):
    """The reader closes the pipe mid-trace: EPIPE, not a hang (Python ignores SIGPIPE)."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    received = bytearray()
    reader = threading.Thread(target=read_fifo, args=(fifo, 100_000, received))
    reader.start()
    try:
        with pytest.raises(BrokenPipeError) as info:
            kinetrace.export_chrome_trace(SyntheticResult(20_000), fifo)
    finally:
        reader.join(timeout=60)
    assert info.value.errno == errno.EPIPE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.json"]
    assert_no_kinetrace_threads()
