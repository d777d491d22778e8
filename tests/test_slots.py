"""Two test runs at once on one machine never share a venv: ``claim_slot`` (scripts/env.sh)
gives each run the first slot of cached venvs no other run holds, and a later run the first
one again."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

ENV_SH = Path(__file__).resolve().parent.parent / "scripts" / "env.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("flock") is None, reason="needs bash and flock"
)


def _claim(cache: Path, then: str = "") -> subprocess.Popen[str]:
    script = f'source "{ENV_SH}"; claim_slot; echo "$KINETRACE_SLOT $(slot_dir nox)"; {then}'
    return subprocess.Popen(
        ["bash", "-c", script],
        env={"PATH": "/usr/bin:/bin", "KINETRACE_CACHE": str(cache), "HOME": str(cache)},
        stdout=subprocess.PIPE,
        text=True,
    )


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def _claim_once(cache: Path) -> str:
    with _claim(cache) as run:
        line = _first_line(run)
        assert run.wait(timeout=30) == 0
    return line


def test_concurrent_runs_get_slots_of_their_own(tmp_path: Path) -> None:
    # The first run holds slot 0 for as long as it lives (bash becomes the sleep: killed below).
    with _claim(tmp_path, "exec sleep 60") as first:
        try:
            assert _first_line(first) == f"0 {tmp_path}/nox"
            assert _claim_once(tmp_path) == f"1 {tmp_path}/nox.1"
        finally:
            first.kill()
            first.wait(timeout=30)
    # The lock went with the process that held it: the next run reuses slot 0's venvs (the
    # kernel may take a moment to release it).
    deadline = time.monotonic() + 10
    line = _claim_once(tmp_path)
    while not line.startswith("0 ") and time.monotonic() < deadline:
        time.sleep(0.1)
        line = _claim_once(tmp_path)
    assert line == f"0 {tmp_path}/nox"


def test_a_given_slot_is_kept(tmp_path: Path) -> None:
    """A run's scripts (nox's sessions, test-install.sh) inherit the slot test.sh claimed."""
    script = f'source "{ENV_SH}"; KINETRACE_SLOT=3; claim_slot; slot_dir install-test'
    done = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": "/usr/bin:/bin", "KINETRACE_CACHE": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == f"{tmp_path}/install-test.3"
