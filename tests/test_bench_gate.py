"""The benchmark gate (``benches/gate.py``, CI's ``bench`` session) turns red when kinetrace is
slower: a build with the test hooks (``support.hooks``) and ``KINETRACE_TEST_SLOWDOWN=F``
makes every export and summary take F times as long, and the gate must name each ratio that
fell below its floor and exit 1. (That it stays green on an unchanged build is shown by the
``bench`` session of every CI run.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.aftermath import subprocess_env
from support.hooks import require_test_hooks
from support.real import real_path

require_test_hooks()

GATE = Path(__file__).resolve().parent.parent / "benches" / "gate.py"


def gate(*args: str, slowdown: float) -> subprocess.CompletedProcess[str]:
    env = subprocess_env()
    env["KINETRACE_TEST_SLOWDOWN"] = str(slowdown)
    return subprocess.run(
        [sys.executable, str(GATE), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


@pytest.mark.timeout(600)
def test_a_slower_export_turns_the_gate_red() -> None:
    # 20x: every export ratio lands far under its floor (measured ~1-9x unslowed).
    done = gate("--only", "export", "--iterations", "2000", "--rounds", "1", slowdown=20)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "benchmark gate: RED" in done.stderr
    # Red only after a second measurement, with more rounds, was below too.
    assert "measuring export again (3 rounds)" in done.stdout, done.stdout
    for ratio in ("export .json.gz vs stock C++", "export .json vs torch Python"):
        assert f"{ratio}: " in done.stderr and "below its floor" in done.stderr, done.stderr


@pytest.mark.timeout(600)
def test_a_slower_summary_turns_the_gate_red() -> None:
    trace = real_path("TraceLens/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz")
    # 40x: kinetrace's ~1 s becomes ~40 s against HTA's ~20 s: a ratio near 0.5x, floor 10x.
    done = gate(
        "--only",
        "summary",
        "--rounds",
        "1",
        "--no-confirm",
        "--summary-trace",
        str(trace),
        slowdown=40,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "summary vs HTA 0.5.0 (xDiT SD3.5, 62 MB): " in done.stderr, done.stderr
