"""Profiles of one CPU workload, each recorded in a process of its own, one after another.

Starting torch and Kineto takes a process 10-30 s on a busy 2-core machine, mostly waiting
(measured: 35 s wall for 11 s of CPU: importing torch 4.7 s, Kineto's first start
6.7 s); the recording itself takes about a second. So each
process starts (a batch at a time, their start-ups overlapping), pays Kineto's start-up with
a throwaway profile, says ``ready``, and records only when told to: the recordings run one
after another, each alone, seconds apart, as separate runs of one job would.
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from support.aftermath import subprocess_env

#: The recording process: argv is SIZE MMS STEPS; a line on stdin is the trace's path.
_RECORDER = r"""
import sys
import torch
import kinetrace

size, mms, steps = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(1)  # one core: the machine is shared, steps stay comparable
x = torch.rand(size, size)
cpu = [torch.profiler.ProfilerActivity.CPU]
with torch.profiler.profile(activities=cpu):  # Kineto's start-up, paid before the signal
    torch.mm(x, x)
print("ready", flush=True)
path = sys.stdin.readline().strip()
sched = kinetrace.schedule(wait=0, warmup=1, active=steps, repeat=1)
with kinetrace.profile(activities=cpu, record_shapes=True, schedule=sched) as prof:
    for _ in range(steps + 1):
        for _ in range(mms):
            torch.mm(x, x)
        prof.step()
prof.export_chrome_trace(path)
print("done", flush=True)
"""

#: Seconds a process may take to start or to record (a busy machine: ~10x the idle figures).
_START_S = 300
_RECORD_S = 120


def _line(proc: subprocess.Popen[str], expected: str, log: Path, timeout: float) -> None:
    """Waits up to ``timeout`` s for the process's next line, which must be ``expected``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().strip() if ready else f"nothing within {timeout} s"
    if line != expected:
        proc.kill()
        proc.wait()
        raise AssertionError(f"recorder said {line!r}, not {expected!r}: {log.read_text()[-2000:]}")


def record_in_processes(
    paths: Sequence[Path], *, size: int, mms: int, steps: int, at_once: int = 10
) -> None:
    """Records one profile into each of ``paths``, in that order, each in a new process:
    ``steps`` steps of ``mms`` SIZE x SIZE matrix products on one thread."""
    for first in range(0, len(paths), at_once):
        batch = paths[first : first + at_once]
        logs = [path.with_suffix(".log") for path in batch]
        procs = []
        try:
            for log in logs:
                with log.open("w") as err:  # Kineto's own logging, read on a failure
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-c", _RECORDER, str(size), str(mms), str(steps)],
                            stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=err,
                            text=True,
                            env=subprocess_env(),
                        )
                    )
            for proc, log in zip(procs, logs, strict=True):
                _line(proc, "ready", log, _START_S)
            for proc, path, log in zip(procs, batch, logs, strict=True):
                assert proc.stdin is not None
                proc.stdin.write(f"{path}\n")
                proc.stdin.flush()
                _line(proc, "done", log, _RECORD_S)
                assert proc.wait(timeout=_RECORD_S) == 0, log.read_text()[-2000:]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        stream.close()
