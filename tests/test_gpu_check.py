"""scripts/gpu-check.sh, the checks kept ready for a machine with CUDA: without a device it
fails and says so; its dry run collects every CUDA test it names (so the list stays true)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_a_device_it_fails_and_says_why() -> None:
    done = run()
    assert done.returncode == 1
    assert "gpu-check: no CUDA device" in done.stderr


def test_the_dry_run_collects_every_cuda_test() -> None:
    done = run("--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 tests collected" in done.stdout
    assert done.stdout.rstrip().endswith("gpu-check: dry run: 3 CUDA tests collected, nothing run")
