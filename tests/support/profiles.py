"""Real CPU profiles of a small workload, made in the test: a few matrix products per
recorded step, and one more product where a run is to be slower (``kinetrace diff``'s
tests)."""

from __future__ import annotations

from pathlib import Path

import torch

import kinetrace


def mm_profile(path: Path, *, steps: int, mms: int, size: int, extra: int | None) -> Path:
    """A CPU profile of ``steps`` recorded steps of ``mms`` products of ``size`` x ``size``
    matrices (and one of ``extra`` x ``extra`` in each step where given), written at ``path``."""
    x = torch.rand(size, size)
    y = torch.rand(extra, extra) if extra else None
    sched = kinetrace.schedule(wait=0, warmup=1, active=steps, repeat=1)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with kinetrace.profile(activities=cpu, record_shapes=True, schedule=sched) as prof:
        for _ in range(steps + 1):
            for _ in range(mms):
                torch.mm(x, x)
            if y is not None:
                torch.mm(y, y)
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def sides_in_turns(
    folder: Path, *, runs: int, steps: int, mms: int, size: int, extra: int
) -> tuple[Path, Path]:
    """BASE and NEW, the folders ``folder/base`` and ``folder/new`` of ``runs`` profiles
    each (``run{i}.json``), NEW's with the ``extra`` product: made in turns (base, new,
    base, ...), so a drift of the shared machine falls on both sides alike, on one thread
    (steps stay comparable however busy the other core is)."""
    base, new = folder / "base", folder / "new"
    base.mkdir()
    new.mkdir()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(runs):
            mm_profile(base / f"run{i}.json", steps=steps, mms=mms, size=size, extra=None)
            mm_profile(new / f"run{i}.json", steps=steps, mms=mms, size=size, extra=extra)
    finally:
        torch.set_num_threads(threads)
    return base, new
