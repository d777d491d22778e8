"""``kinetrace record``: a workload run N times, each run a fresh process writing its
profile, into a folder of runs that ``kinetrace diff --runs`` reads; given two commands
(BASE and NEW: two checkouts, two environments, one script and a variable), they run in
turns, BASE, NEW, BASE, NEW, ..., into ``OUT/base`` and ``OUT/new``, so a drift of the
machine falls on both sides alike (docs/ci.md).

Each run gets an empty folder of its own, named by ``KINETRACE_RECORD_DIR`` in its
environment and by ``{dir}`` in its command; what trace files it leaves there become the
run: one file is moved to ``SIDE/run-NNNN.json[.gz]``, several (one per rank) make the
folder ``SIDE/run-NNNN``. A run is kept only once its process exited with status 0 and
left a trace; runs already in a side folder are kept and numbered after, so recording again
adds runs. A failed run stops the recording (the runs done stay) with the command's exit
status and the end of its output; Ctrl-C stops the running process and removes its
folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kinetrace._env import require_in_range
from kinetrace._tools.sources import TRACE_SUFFIXES

__all__ = ["RecordError", "RecordedRun", "record"]

#: The variable naming a run's folder, and the placeholder of its path in a command.
DIR_VARIABLE = "KINETRACE_RECORD_DIR"
DIR_PLACEHOLDER = "{dir}"
#: The last characters of a failed run's output an error quotes.
OUTPUT_TAIL = 2000


class RecordError(RuntimeError):
    """A run failed (its command's exit status, or no trace left in its folder)."""


@dataclass(frozen=True)
class RecordedRun:
    """One run kept: its side (``"base"``, ``"new"``, or ``""`` with one command), where
    it is, how many trace files it wrote, how long its process took."""

    side: str
    path: str
    traces: int
    seconds: float


def _next_number(folder: Path) -> int:
    numbers = [
        int(name[4:8])
        for name in os.listdir(folder)
        if name.startswith("run-") and name[4:8].isdigit()
    ]
    return max(numbers, default=0) + 1


def _traces(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def _keep(scratch: Path, side_folder: Path, number: int) -> tuple[Path, int]:
    """Moves what a run wrote into ``side_folder`` as run ``number``."""
    found = _traces(scratch)
    name = f"run-{number:04d}"
    if len(found) == 1:
        (trace,) = found
        suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
        target = side_folder / (name + suffix)
        os.replace(trace, target)
    else:
        target = side_folder / name
        os.replace(scratch, target)
    return target, len(found)


def _run_once(
    command: Sequence[str], cwd: str | None, scratch: Path, timeout: float | None
) -> None:
    argv = [arg.replace(DIR_PLACEHOLDER, str(scratch)) for arg in command]
    env = {**os.environ, DIR_VARIABLE: str(scratch)}
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stdout[-OUTPUT_TAIL:].rstrip()
        raise RecordError(
            f"{' '.join(argv)} exited with status {done.returncode}"
            + (f"; the end of its output:\n{tail}" if tail else "")
        )
    if not _traces(scratch):
        raise RecordError(
            f"{' '.join(argv)} wrote no trace file ({', '.join(TRACE_SUFFIXES)}) into its "
            f"folder (${DIR_VARIABLE}, or {DIR_PLACEHOLDER} in the command)"
        )


def record(
    out: str | os.PathLike[str],
    commands: Mapping[str, Sequence[str]],
    runs: int,
    *,
    cwds: Mapping[str, str] | None = None,
    timeout: float | None = None,
    progress: Callable[[int, int, RecordedRun], None] | None = None,
) -> list[RecordedRun]:
    """Runs each of ``commands`` (side name -> argv; ``{"": argv}`` for one) ``runs``
    times, in turns, each run a fresh process, and keeps each run's traces in ``out`` (one
    command) or ``out/SIDE``.

    Args:
        out: the folder of runs (made where missing).
        commands: per side its command, as argv; ``{dir}`` in an argument is the run's
            folder, also in ``$KINETRACE_RECORD_DIR``.
        runs: runs per side.
        cwds: per side the folder its command runs in (default: this process's).
        timeout: seconds a run may take (default: no limit).
        progress: called after each run kept, with its turn, the number of turns and it.

    Raises:
        RecordError: a run's command failed, timed out or left no trace (the runs done are
            kept); ValueError: ``runs`` below 1, no command, an empty one.
        OSError: a folder cannot be made or written.
    """
    require_in_range("runs", runs, 1, 100_000)
    if not commands or any(not argv for argv in commands.values()):
        raise ValueError("record needs a command for each side")
    out = Path(out)
    folders = {side: out / side if side else out for side in commands}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    kept: list[RecordedRun] = []
    turns = runs * len(commands)
    for turn in range(turns):
        side = list(commands)[turn % len(commands)]
        scratch = Path(tempfile.mkdtemp(prefix=".record-", dir=out.resolve()))
        try:
            start = time.perf_counter()
            try:
                _run_once(commands[side], (cwds or {}).get(side), scratch, timeout)
            except subprocess.TimeoutExpired as exc:
                raise RecordError(f"{' '.join(commands[side])} ran over {timeout:g} s") from exc
            seconds = time.perf_counter() - start
            target, traces = _keep(scratch, folders[side], _next_number(folders[side]))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        run = RecordedRun(side, str(target), traces, seconds)
        kept.append(run)
        if progress is not None:
            progress(turn + 1, turns, run)
    return kept
