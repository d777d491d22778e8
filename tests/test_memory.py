"""The memory bound on big exports: the export's peak growth stays within 64 MiB + 32 bytes
an activity (one process, and the default worker count on a 16-core host), measured in a
fresh subprocess (``tests/synthetic.py``); ``workers=2``'s known excess is documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.aftermath import (
    subprocess_env,
)
from support.measure import memory_budget

SYNTHETIC = Path(__file__).resolve().parent / "synthetic.py"


def measure_in_subprocess(n: int, path: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SYNTHETIC), "export", str(n), str(path), *extra],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def report_memory(n: int, report: dict[str, Any]) -> None:
    print(
        f"\n{n} events: {report['uncompressed_bytes'] / 1e6:.0f} MB in {report['seconds']:.2f} s; "
        f"peak growth: this process {report['rss_growth'] / 2**20:.1f} MiB, with workers "
        f"{report['total_growth'] / 2**20:.1f} MiB ({report['workers_seen']} seen); "
        f"budget {memory_budget(n) / 2**20:.1f} MiB"
    )


@pytest.mark.parametrize("n", [200_000, 1_000_000])
def test_peak_memory_is_bounded(tmp_path, n, record_property):
    """One process, a lazy source: the export's own memory is the first pass (32 bytes an
    activity) plus a fixed amount (queued batches, buffers, gzip blocks)."""
    path = tmp_path / "t.json"
    report = measure_in_subprocess(n, path, "--workers", "1")
    record_property("memory", report)
    report_memory(n, report)
    assert report["events"] > n
    assert report["rss_growth"] <= memory_budget(n), report
    assert report["total_growth"] <= memory_budget(n), report
    assert path.stat().st_size == report["file_bytes"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_default_workers_keep_the_memory_budget(tmp_path, record_property):
    """On a 16-core host the default forks workers for a mid-sized listed trace (as torch
    lists it), and the whole export (every process) stays within the budget."""
    n = 150_000
    path = tmp_path / "t.json"
    report = measure_in_subprocess(n, path, "--list", "--gpu", "--cpus", "16")
    record_property("memory", report)
    report_memory(n, report)
    assert report["workers_seen"] == 1  # two processes
    assert report["total_growth"] <= memory_budget(n), report
    assert path.stat().st_size == report["file_bytes"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.xfail(
    strict=True,
    reason="KNOWN LIMIT: forked extraction (workers=2, opt-in on 2 cores) exceeds the "
    "64 MiB + 32 B/activity budget: the worker's copy-on-write copies of every activity "
    "object it touches plus a second pipeline (~200 MiB for 1M listed activities, 2 "
    "processes, vs 94.5 MiB). Inherent to fork; documented on the workers argument.",
)
def test_peak_memory_with_two_workers(tmp_path, record_property):
    n = 500_000
    path = tmp_path / "t.json"
    report = measure_in_subprocess(n, path, "--workers", "2", "--list")
    record_property("memory", report)
    report_memory(n, report)
    assert report["workers_seen"] == 1
    assert report["total_growth"] <= memory_budget(n), report
