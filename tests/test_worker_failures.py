"""Forked workers (``workers=``) failing, beyond ``test_workers.py``: an exception raised in
a worker reaches the caller with its type and message (``kinetrace.WorkerError`` when it
cannot be rebuilt), a terminal's Ctrl-C (the whole process group) reaches parent and
workers, and a worker never runs the caller's code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kinetrace
from support.aftermath import (
    OLD,
    assert_no_kinetrace_threads,
    assert_untouched,
    subprocess_env,
)
from support.probes import BATCH, N_LATE, AccessorError, failing, probed
from support.synthetic import SyntheticResult


class FieldError(Exception):
    """An exception whose constructor does not take its message: pickling it works,
    unpickling it (``FieldError(message)``) does not."""

    def __init__(self, field: str, index: int) -> None:
        super().__init__(f"{field}() failed at {index}")
        self.field = field
        self.index = index


#: Two workers split N_LATE activities: the second half is read in the forked worker.
IN_WORKER = N_LATE // 2 + 2 * BATCH + 7


@pytest.mark.parametrize("field", ["timestamp", "metadata_json"])
def test_exception_from_a_worker_keeps_its_type_and_message(tmp_path, field):
    path = tmp_path / "t.json.gz"
    path.write_bytes(OLD)
    exc = AccessorError(f"{field} in a worker")
    result = probed(SyntheticResult(N_LATE), replace={IN_WORKER: failing(field, exc)})
    with pytest.raises(AccessorError) as info:
        kinetrace.export_chrome_trace(result, path, workers=2)
    assert info.value.args == exc.args  # a copy: it crossed a process boundary
    assert_untouched(tmp_path, {path.name: OLD})
    assert_no_kinetrace_threads()


def test_exception_that_cannot_be_rebuilt_from_its_args(tmp_path):
    path = tmp_path / "t.json"
    result = probed(
        SyntheticResult(N_LATE), replace={IN_WORKER: failing("name", FieldError("name", 7))}
    )
    with pytest.raises(Exception) as info:
        kinetrace.export_chrome_trace(result, path, workers=2)
    assert isinstance(info.value, (FieldError, kinetrace.WorkerError)), repr(info.value)
    assert "name() failed at 7" in str(info.value)
    assert_untouched(tmp_path, {})


FORKED_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    from collections.abc import Sequence
    import kinetrace
    from kinetrace._export import workers as _workers
    from support.measure import warm_up
    from support.synthetic import SyntheticActivity, SyntheticResult

    mode, directory = sys.argv[1], sys.argv[2]
    warm_up()
    PARENT = os.getpid()
    N = 100_000
    WORKER_START = _workers.slice_bounds(N, 2)[1]  # two workers: the forked one reads the rest

    def who():
        return "parent" if os.getpid() == PARENT else "CHILD"

    class CtrlCInWorker(SyntheticActivity):
        __slots__ = ()

        def name(self):  # read in the second pass
            if os.getpid() != PARENT:
                os.killpg(0, signal.SIGINT)  # Ctrl-C in a terminal: the whole group
                time.sleep(1)
            return super().name()

    class Source(Sequence):
        def __init__(self, inner):
            self.inner = inner

        def __len__(self):
            return len(self.inner)

        def fix(self, act):
            if mode == "ctrl-c-in-worker" and act._i == 75_000:
                return CtrlCInWorker(act._c, act._i)
            return act

        def __getitem__(self, index):
            if isinstance(index, slice):
                start = index.indices(N)[0]
                if start == WORKER_START and os.getpid() != PARENT:  # the worker's slice
                    if mode == "slice-raises":
                        raise ValueError("the worker's slice failed")
                    if mode == "sigint-at-worker-start":
                        os.kill(os.getpid(), signal.SIGINT)
                        time.sleep(1)
                return [self.fix(a) for a in self.inner[index]]
            return self.fix(self.inner[index])

    class Result:
        def __init__(self):
            self.base = SyntheticResult(N)

        def trace_activities(self):
            return Source(self.base.trace_activities())

        def trace_start_ns(self):
            return self.base.trace_start_ns()

    path = os.path.join(directory, "t.json")
    with open(path, "w") as f:
        f.write("old")
    try:
        kinetrace.export_chrome_trace(Result(), path, workers=2)
        print(who(), "finished", flush=True)
    except BaseException as exc:
        print(who(), "caught", type(exc).__name__, flush=True)
    """
)


def run_forked_script(mode: str, directory: Path) -> list[str]:
    """Runs FORKED_SCRIPT in a new session (its SIGINTs go to its own process group only)
    and returns its output lines; every line comes from the parent unless a worker ran the
    caller's code."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_SCRIPT, mode, str(directory)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        check=False,
    )
    return done.stdout.splitlines()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_terminal_ctrl_c_reaches_parent_and_workers(tmp_path):
    """Ctrl-C in a terminal signals the whole process group: the workers die, the parent
    raises KeyboardInterrupt and cleans up."""
    assert run_forked_script("ctrl-c-in-worker", tmp_path) == ["parent caught KeyboardInterrupt"]
    assert_untouched(tmp_path, {"t.json": b"old"})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize(
    "mode, errors",
    [
        ("slice-raises", ["ValueError"]),
        # The part of a terminal Ctrl-C that reaches a worker before it set SIG_DFL.
        ("sigint-at-worker-start", ["KeyboardInterrupt", "WorkerError"]),
    ],
)
def test_forked_worker_never_runs_the_callers_code(tmp_path, mode, errors):
    lines = run_forked_script(mode, tmp_path)
    assert [line for line in lines if line.startswith("CHILD")] == [], lines
    assert lines in [[f"parent caught {error}"] for error in errors]
    assert_untouched(tmp_path, {"t.json": b"old"})
