"""A program that forks while a background export is pending: the child starts with none of
the parent's exports (``os.register_at_fork`` in ``kinetrace._export.handles``), so it neither waits
for them at exit nor in :func:`kinetrace.wait`; a handle it inherited raises instead of
waiting; the parent's export still completes; the child's own exports work.

Each case runs in a fresh interpreter with a timeout: a hang fails the test, never the suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kinetrace._export import background as _background
from support.aftermath import subprocess_env

pytestmark = pytest.mark.skipif(not _background.available(), reason="needs os.fork")

# Module level: what the children need (a forkserver child imports this file again as
# ``__mp_main__``, so nothing here starts an export).
HELPERS = textwrap.dedent(
    """
    import json, multiprocessing, os, sys, time
    import torch  # as in a real program (the export's host identity reads CUDA through it)
    import kinetrace
    from support.synthetic import SyntheticResult

    class Slow:
        def __init__(self, inner, delay):
            self.inner, self.delay = inner, delay
        def trace_activities(self):
            time.sleep(self.delay)
            return self.inner.trace_activities()
        def trace_start_ns(self):
            return self.inner.trace_start_ns()

    def child_exports(out, tag):
        # The child's own background export: waited for by its own wait().
        own = kinetrace.export_chrome_trace(
            SyntheticResult(500), os.path.join(out, f"child-{tag}.json"), background=True
        )
        stats = kinetrace.wait(timeout=60)
        assert [s.path for s in stats] == [own.path], stats

    def wait_then_export(out, tag):
        assert kinetrace.wait(timeout=60) == []
        child_exports(out, tag)
    """
)

# The parent starts a background export that runs for seconds (trace_activities() sleeps
# first), so it is pending when the child is forked; the case's code runs next, then the
# parent checks its own export.
MAIN = """
out = sys.argv[1]
handle = kinetrace.export_chrome_trace(
    Slow(SyntheticResult(2000), 2.0), os.path.join(out, "parent.json"), background=True
)
assert not handle.done()
"""

EPILOGUE = """
stats = handle.result(timeout=120)
assert stats.events > 2000, stats
print("parent-export-ok", flush=True)
"""

CASES = {
    # The child ends with sys.exit(0): interpreter exit runs atexit handlers, kinetrace's
    # among them.
    "fork-sys-exit": """
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        """,
    "fork-wait": """
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                wait_then_export(out, "wait")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        """,
    # An inherited handle raises at once instead of waiting for the parent's job.
    "fork-inherited-handle": """
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    handle.result(timeout=60)
                except RuntimeError as exc:
                    assert "belongs to process" in str(exc), exc
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        """,
    # The child's own export, pending when it exits normally: waited for there.
    "fork-child-exports-at-exit": """
        pid = os.fork()
        if pid == 0:
            kinetrace.export_chrome_trace(
                SyntheticResult(500), os.path.join(out, "child-exit.json"), background=True
            )
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        """,
    "multiprocessing-fork": """
        p = multiprocessing.get_context("fork").Process(
            target=wait_then_export, args=(out, "mp-fork")
        )
        p.start()
        p.join(120)
        assert p.exitcode == 0, p.exitcode
        """,
    "multiprocessing-forkserver": """
        p = multiprocessing.get_context("forkserver").Process(
            target=wait_then_export, args=(out, "mp-forkserver")
        )
        p.start()
        p.join(120)
        assert p.exitcode == 0, p.exitcode
        """,
}

# What each case's child writes besides the parent's trace.
CHILD_FILES = {
    "fork-wait": ["child-wait.json"],
    "fork-child-exports-at-exit": ["child-exit.json"],
    "multiprocessing-fork": ["child-mp-fork.json"],
    "multiprocessing-forkserver": ["child-mp-forkserver.json"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_forked_child_does_not_wait_for_the_parents_exports(tmp_path: Path, case: str) -> None:
    """Before the fix the fork cases hung in the child (it waited for the parent's job at
    exit or in ``wait()``); the timeout turns a hang into a failure."""
    main_block = MAIN + textwrap.dedent(CASES[case]) + EPILOGUE
    script = HELPERS + "\nif __name__ == '__main__':\n" + textwrap.indent(main_block, "    ")
    main = tmp_path / "main.py"
    main.write_text(script)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(main), str(out)],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the hung child too (same group)
        proc.communicate()
        pytest.fail(f"{case}: hung (no exit within 120 s)")
    assert proc.returncode == 0, stderr
    assert "parent-export-ok" in stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["parent.json", *CHILD_FILES.get(case, [])])
    for name in names:
        assert json.loads((out / name).read_bytes())["traceEvents"]
