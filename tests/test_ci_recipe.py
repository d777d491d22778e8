"""docs/ci.md as written: its files (the workload, the recipe, the workflow) are those
``scripts/doc-files.py`` writes out, the workflow runs the recipe, and the recipe, run with
the installed kinetrace on the page's own workload, exits 0 for a run of the same code and
3 (REGRESSION) for one with an operator added to every step. (``nox -s workflows`` checks the
workflow against GitHub's schema and zizmor.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kinetrace._cli import status
from support.aftermath import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
FILES = ("perf/profile_step.py", "perf/kinetrace-ci.sh", ".github/workflows/perf.yml")

#: Runs per side, recorded in turns (baseline, same, slower, ...): each a process that
#: starts torch and Kineto, 15-30 s on these 2 cores (load 2 to 13).
RUNS = 2
#: The same code's threshold. The workload's step is ~0.7-1.4 ms when the machine is calm,
#: and at load 13 single steps stall to ~10 ms, so two processes' medians can differ by
#: tens of %: 50% keeps the check to what it is for, the recipe's status.
SAME_PCT = 50
#: The regression: a 768 x 768 product (0.9 GFLOP, one thread) added to every step costs
#: ~20-50 ms here, over 10x a step: far over SAME_PCT.
STEP_LINE = "        loss.backward()\n"
EXTRA = "        torch.mm(torch.ones(768, 768), torch.ones(768, 768))\n"


def _doc_files(out: Path) -> dict[str, Path]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "doc-files.py"), str(ROOT / "docs" / "ci.md"), out],
        capture_output=True,
        text=True,
        check=True,
    )
    written = {str(Path(p).relative_to(out.resolve())): Path(p) for p in done.stdout.split()}
    assert set(written) == set(FILES), written
    return written


def test_the_workflow_runs_the_recipe(tmp_path):
    files = _doc_files(tmp_path)
    workflow = yaml.safe_load(files[".github/workflows/perf.yml"].read_text())
    (job,) = workflow["jobs"].values()
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "sh perf/kinetrace-ci.sh turns base runs" in runs
    assert "sh perf/kinetrace-ci.sh compare runs/base runs/new > diff.md" in runs
    assert 'cat diff.md >> "$GITHUB_STEP_SUMMARY"' in runs
    assert 'exit "$status"' in runs
    # Both sides checked out in the job: the pull request's, and its base at base/.
    checkouts = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")]
    assert [c["with"].get("path") for c in checkouts] == [None, "base"]
    assert checkouts[1]["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert all(c["with"]["persist-credentials"] is False for c in checkouts)
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload")]
    assert uploads[0]["with"]["name"] == "kinetrace-diff"
    assert set(workflow[True]) == {"pull_request"}  # YAML 1.1 reads `on:` as True


def _recipe(work: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``sh perf/kinetrace-ci.sh ARGS`` in ``work`` with this interpreter's ``python`` and
    ``kinetrace`` first on PATH."""
    full = subprocess_env()
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    full.update(env)
    assert shutil.which("kinetrace", path=full["PATH"]), "no kinetrace command installed"
    return subprocess.run(
        ["sh", "perf/kinetrace-ci.sh", *args],
        cwd=work,
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_the_recipe_passes_the_same_code_and_fails_a_regression(tmp_path):
    """Two recordings in turns against one base checkout, RUNS a side: eight processes of
    the workload (~30 s each at load ~12 on 2 cores: slow set)."""
    files = _doc_files(tmp_path)
    base = tmp_path / "base"
    shutil.copytree(tmp_path / "perf", base / "perf")
    slower = tmp_path / "slower"
    shutil.copytree(tmp_path / "perf", slower / "perf")
    workload = slower / "perf" / "profile_step.py"
    text = files["perf/profile_step.py"].read_text()
    assert text.count(STEP_LINE) == 1
    workload.write_text(text.replace(STEP_LINE, STEP_LINE + EXTRA))
    start = time.monotonic()
    for work, out in ((tmp_path, "same"), (slower, "slower")):
        done = _recipe(work, "turns", str(base), str(tmp_path / out), RUNS=str(RUNS))
        assert done.returncode == 0, done.stderr
        for side in ("base", "new"):
            names = sorted(p.name for p in (tmp_path / out / side).iterdir())
            assert names == [f"run-{i:04d}.json.gz" for i in range(1, RUNS + 1)], names
    same = _recipe(tmp_path, "compare", "same/base", "same/new", PCT=str(SAME_PCT))
    assert same.returncode == status.DONE, same.stdout + same.stderr
    assert same.stdout.startswith("**kinetrace diff**: job step time (gates):")
    assert (tmp_path / "kinetrace-diff.html").read_text().startswith("<!DOCTYPE html>")
    slow = _recipe(tmp_path, "compare", "slower/base", "slower/new", PCT=str(SAME_PCT))
    assert slow.returncode == status.REGRESSION == 3, slow.stdout + slow.stderr
    assert slow.stdout.startswith("**kinetrace diff**: job step time (gates): NEW is slower")
    # `record` adds runs to a folder, numbered after those there.
    done = _recipe(tmp_path, "record", "same/base", RUNS="1")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "same" / "base" / f"run-{RUNS + 1:04d}.json.gz").is_file()
    # A usage error is no regression.
    assert _recipe(tmp_path, "nothing").returncode == 2
    print(f"recipe: {time.monotonic() - start:.0f} s")
