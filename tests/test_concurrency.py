"""Concurrent exports: two threads at once (with workers, each forks while the other thread
is mid-export), and four processes writing the same destinations: every final file is one
complete output, never a mix."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from support import BASE
from support.aftermath import (
    all_children,
    assert_untouched,
    subprocess_env,
)
from support.synthetic import SyntheticResult
from support.traces import assert_valid_trace

SYNTHETIC = Path(__file__).resolve().parent / "synthetic.py"
#: A process id no real process has (pid_max is at most 2**22): the same bytes whichever
#: process exports.
FOREIGN_PID = 2**31 + 5


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers-each"])
def test_two_threads_export_at_once(tmp_path, workers):
    """Two exports from two threads; with workers, each forks while the other thread is in
    the middle of its export (holding kinetrace's and Python's locks)."""
    children_before = set(all_children())
    jobs = [
        (SyntheticResult(20_000, seed=1), tmp_path / "a.json"),
        (SyntheticResult(20_000, seed=2, gpu=True), tmp_path / "b.json.gz"),
    ]
    expected = {}
    for result, path in jobs:
        kinetrace.export_chrome_trace(result, path, base_time_ns=BASE, workers=workers)
        expected[path.name] = path.read_bytes()
        path.unlink()

    barrier = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(result: Any, path: Path) -> None:
        try:
            barrier.wait()
            for _ in range(2 if workers > 1 else 1):  # forks while the other thread works
                kinetrace.export_chrome_trace(
                    result, path, base_time_ns=BASE, threads=2, workers=workers
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "an export hung"
    assert not errors, errors
    assert_untouched(tmp_path, expected)
    for _, path in jobs:
        assert_valid_trace(path)
    assert set(all_children()) <= children_before, "a worker was not reaped"


def test_processes_export_into_one_directory(tmp_path):
    """Four processes export at once: each to the same ``same.json`` and ``same.json.gz``
    and to a name of its own. Every final file is one complete output, never a mix."""
    workers = 4
    n = 5_000
    shared = ["same.json", "same.json.gz"]

    def args(seed: int) -> list[str]:
        return ["--seed", str(seed), "--pid", str(FOREIGN_PID), "--base-time-ns", str(BASE)]

    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SYNTHETIC),
                "export",
                str(n),
                *(str(tmp_path / name) for name in shared),
                str(tmp_path / f"own{k}.json"),
                *args(k),
            ],
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(workers)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert len(out.splitlines()) == 3

    names = [*shared, *(f"own{k}.json" for k in range(workers))]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no temp files
    final = {}
    for name in names:
        assert_valid_trace(tmp_path / name)
        final[name] = (tmp_path / name).read_bytes()
        (tmp_path / name).unlink()
    # What each worker wrote, recomputed here: same source, path, pid and time base.
    for k in range(workers):
        result = SyntheticResult(n, seed=k, pid=FOREIGN_PID)
        outputs = {}
        for name in [*shared, f"own{k}.json"]:
            kinetrace.export_chrome_trace(result, tmp_path / name, base_time_ns=BASE)
            outputs[name] = (tmp_path / name).read_bytes()
            (tmp_path / name).unlink()
        assert final[f"own{k}.json"] == outputs[f"own{k}.json"]
        for name in shared:
            if final[name] == outputs[name]:
                final[name] = k  # identified: written entirely by worker k
    for name in shared:
        assert isinstance(final[name], int), f"{name} is no single worker's complete output"
