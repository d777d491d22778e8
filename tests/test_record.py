"""``kinetrace record`` (docs/ci.md): each run a fresh process writing its trace into a folder
of its own, kept as a numbered run; two commands in turns; a failed run stops the recording
with its status and output, the runs done kept, nothing half-written left."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

import kinetrace
from kinetrace._cli import status
from kinetrace._tools.record import RecordError, record
from support.cli import run

#: A run: appends its side and process id to LOG, then writes a small GPU trace of 6 steps
#: (NEW's with a kernel 10% longer) to ``$KINETRACE_RECORD_DIR/trace.json``, or to the
#: paths given.
WORKLOAD = """
import os, sys
sys.path.insert(0, {support!r})
from pathlib import Path
from gpu_traces import gpu_run
side, log = sys.argv[1], sys.argv[2]
with open(log, "a") as f:
    f.write(f"{{side}} {{os.getpid()}}\\n")
targets = sys.argv[3:] or [os.path.join(os.environ["KINETRACE_RECORD_DIR"], "trace.json")]
for i, target in enumerate(targets):
    gpu_run(Path(target), steps=6, seed=os.getpid() + i,
            longer={{"k_b": 1.1}} if side == "new" else None)
"""


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    script = tmp_path / "workload.py"
    support = Path(__file__).resolve().parent / "support"
    script.write_text(WORKLOAD.format(support=str(support)))
    return script


def _cmd(workload: Path, side: str, log: Path, *targets: str) -> str:
    return shlex.join([sys.executable, str(workload), side, str(log), *targets])


def test_two_commands_run_in_turns_into_two_folders_diff_reads(tmp_path, workload, capsys):
    out, log = tmp_path / "runs", tmp_path / "log"
    code = run(
        "record", out, "--runs", "3",
        "--base", _cmd(workload, "base", log), "--new", _cmd(workload, "new", log),
    )  # fmt: skip
    assert code == status.DONE
    # BASE, NEW, BASE, NEW, ...: each run a process of its own.
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [side for side, _ in lines] == ["base", "new"] * 3
    assert len({pid for _, pid in lines}) == 6
    for side in ("base", "new"):
        assert sorted(p.name for p in (out / side).iterdir()) == [
            "run-0001.json", "run-0002.json", "run-0003.json"
        ]  # fmt: skip
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no run folder left
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("kinetrace record: run 1/6 BASE: ") and len(err) == 6
    result = kinetrace.diff(out / "base", out / "new", runs=True)
    assert (result.base_runs, result.new_runs) == (3, 3)
    assert result.gpu is not None and result.gpu.verdict == "slower"
    # Recording again adds runs, numbered after those there.
    assert record(out, {"base": shlex.split(_cmd(workload, "base", log))}, 1)[0].path.endswith(
        "run-0004.json"
    )


def test_one_command_the_dir_placeholder_and_ranks(tmp_path, workload, capsys):
    out, log = tmp_path / "runs", tmp_path / "log"
    argv = shlex.split(_cmd(workload, "base", log, "{dir}/rank0.json", "{dir}/rank1.json"))
    assert run("record", out, "--runs", "2", "--", *argv) == status.DONE
    # Two trace files a run: each run a folder of ranks.
    runs = sorted(p.name for p in out.iterdir())
    assert runs == ["run-0001", "run-0002"]
    assert sorted(p.name for p in (out / "run-0001").iterdir()) == ["rank0.json", "rank1.json"]
    assert kinetrace.diff(out, out, runs=True).base_runs == 2
    assert "2 trace files" in capsys.readouterr().err


def test_a_failed_run_stops_with_its_status_and_keeps_the_runs_done(tmp_path, capsys):
    out = tmp_path / "runs"
    counter = tmp_path / "n"
    script = (
        "import os, sys, pathlib\n"
        f"p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1))\n"
        "if n == 1: print('out of memory, say'); sys.exit(7)\n"
        "d = pathlib.Path(os.environ['KINETRACE_RECORD_DIR'])\n"
        "(d / 'partial.json').write_text('{')\n"
        "(d / 't.json').write_text('{\"traceEvents\": []}')\n"
    )  # fmt: skip
    # The first run writes two files (kept as a folder); the second fails.
    assert run("record", out, "--runs", "3", "--", sys.executable, "-c", script) == status.FAILED
    err = capsys.readouterr().err
    assert "exited with status 7" in err and "out of memory, say" in err
    assert sorted(p.name for p in out.iterdir()) == ["run-0001"]  # the failed run's folder gone


def test_a_run_that_writes_no_trace_is_an_error(tmp_path, capsys):
    out = tmp_path / "runs"
    assert run("record", out, "--runs", "1", "--", sys.executable, "-c", "pass") == status.FAILED
    assert "wrote no trace file" in capsys.readouterr().err
    with pytest.raises(RecordError, match="ran over"):
        record(out, {"": [sys.executable, "-c", "import time; time.sleep(30)"]}, 1, timeout=0.5)
    assert list(out.iterdir()) == []


def test_options_that_do_not_fit(tmp_path, capsys):
    out = tmp_path / "runs"
    assert run("record", out, "--base", "true") == status.FAILED
    assert "--base and --new go together" in capsys.readouterr().err
    assert run("record", out) == status.FAILED
    assert "no command" in capsys.readouterr().err
    assert run("record", out, "--base", "a", "--new", "b", "--", "c") == status.FAILED
    assert run("record", out, "--runs", "0", "--", "true") == status.USAGE
    capsys.readouterr()
    with pytest.raises(ValueError, match="runs"):
        record(out, {"": ["true"]}, 0)
