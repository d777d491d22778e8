"""Training-loop benchmark: how much periodic profiling with a gzip handler costs the loop.

    python benches/bench_training.py            # ~300k activities per profiled cycle
    python benches/bench_training.py --quick    # the short CI run (~30k activities)

A small MLP trains on CPU (forward, backward, SGD: ~240 activities a step; one intra-op
thread, so the loop takes one core and leaves the rest to the export). For each
``on_trace_ready`` handler -- torch's ``tensorboard_trace_handler(use_gzip=True)``,
kinetrace's in the foreground, kinetrace's with ``background=True`` -- the loop runs:

1. unprofiled for ``--baseline`` seconds: the reference steps/s;
2. under ``torch.profiler.profile`` with ``schedule(wait=1, warmup=1, active=N, repeat=1)``
   and the handler, until the step that triggers ``on_trace_ready``; then on, until the
   export has finished.

Columns: ``blocked ms``, how long the ``on_trace_ready`` call itself held the step (torch's
``stop()`` in the same ``prof.step()`` is not counted: it costs the same for every handler,
shown as ``stop s``); ``export s``, from the call to the file being complete; ``loop %``,
the steps the loop made from the call until the file was complete, as a fraction of what
it makes unprofiled in that time (the better of the rates measured before and after; 0% for
a handler that blocks); ``same``, whether the
background file's text equals a foreground kinetrace export of the same result; ``child
MB``, the background process's peak private memory, from a separate, untimed export of the
same result (sampled every 0.1 s).
Prints a table and writes it as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import benchlib  # noqa: F401  (puts tests/ on sys.path for support)

from support.measure import proc_kib

HANDLERS = ("torch", "kinetrace", "kinetrace background")


class Model:
    """The training step: a 4-layer MLP on a batch of 16, forward, backward, SGD."""

    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        layers: list[Any] = []
        for _ in range(4):
            layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.x = torch.randn(16, 64)

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.net(self.x).square().mean().backward()
        self.opt.step()


def steps_per_second(model: Model, seconds: float) -> float:
    started = time.perf_counter()
    n = 0
    while (elapsed := time.perf_counter() - started) < seconds:
        model.step()
        n += 1
    return n / elapsed


def private_mb(pid: int | str | None, *fields: str) -> float:
    """Megabytes of ``fields`` (default: the private ones, i.e. the pages a forked child
    no longer shares with its parent) in /proc/PID/smaps_rollup; 0 where unreadable."""
    kib = proc_kib(str(pid), "smaps_rollup", *(fields or ("Private_Clean", "Private_Dirty")))
    return (kib or 0) / 1024


def make_handler(who: str, directory: str) -> Callable[[Any], Any]:
    import torch.profiler

    import kinetrace

    if who == "torch":
        return torch.profiler.tensorboard_trace_handler(directory, use_gzip=True)
    return kinetrace.tensorboard_trace_handler(
        directory, use_gzip=True, background=who == "kinetrace background"
    )


def trace_text(path: str) -> bytes:
    with open(path, "rb") as f:
        return gzip.decompress(f.read()).replace(path.encode(), b"<path>")


def run_one(
    who: str, model: Model, active: int, baseline_s: float, out_dir: str, memory: bool
) -> dict:
    import torch.profiler

    import kinetrace

    base_rate = steps_per_second(model, baseline_s)
    directory = os.path.join(out_dir, who.replace(" ", "-"))
    handler = make_handler(who, directory)
    seen: dict[str, Any] = {}

    def on_trace_ready(prof: Any) -> None:
        seen["stopped"] = time.perf_counter()
        seen["result"] = prof.profiler.kineto_results
        started = time.perf_counter()
        seen["outcome"] = handler(prof)
        seen["called"] = started
        seen["returned"] = time.perf_counter()

    schedule = torch.profiler.schedule(wait=1, warmup=1, active=active, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=on_trace_ready,
    ) as prof:
        step_started = 0.0
        while "returned" not in seen:
            step_started = time.perf_counter()
            model.step()
            prof.step()
        # The export is in flight (a background one) or done (any other): train on.
        outcome = seen["outcome"]
        steps = 0
        while outcome is not None and hasattr(outcome, "done") and not outcome.done():
            model.step()
            prof.step()
            steps += 1
        finished = time.perf_counter()
    base_rate = max(base_rate, steps_per_second(model, baseline_s))
    if hasattr(outcome, "result"):
        outcome.result()
    (name,) = os.listdir(directory)
    path = os.path.join(directory, name)
    activities = len(seen["result"].trace_activities())
    row = {
        "handler": who,
        "activities": activities,
        "baseline_steps_per_s": base_rate,
        "stop_s": seen["called"] - step_started,
        "blocked_s": seen["returned"] - seen["called"],
        "export_s": finished - seen["called"],
        "loop_fraction": steps / max(1e-9, (finished - seen["called"]) * base_rate),
        "file_bytes": os.path.getsize(path),
        "parent_rss_mb": private_mb("self", "Rss"),
        "child_private_mb": 0.0,
        "same_as_foreground": None,
    }
    if who == "kinetrace background":
        reference = os.path.join(out_dir, "reference", name)
        os.makedirs(os.path.dirname(reference))
        kinetrace.export_chrome_trace(seen["result"], reference)
        row["same_as_foreground"] = trace_text(path) == trace_text(reference)
        if memory:
            row["child_private_mb"] = child_memory(model, seen["result"], out_dir)
    return row


def child_memory(model: Model, result: Any, out_dir: str) -> float:
    """Peak private memory of the background process of one more export of ``result``,
    sampled every 0.1 s while the loop trains (a separate run: reading smaps_rollup of a
    large process takes the loop's time, so it stays out of the timed one)."""
    import kinetrace

    handle = kinetrace.export_chrome_trace(
        result, os.path.join(out_dir, "memory.json.gz"), background=True
    )
    peak = 0.0
    next_sample = 0.0
    while not handle.done():
        model.step()
        if time.perf_counter() >= next_sample:
            peak = max(peak, private_mb(getattr(handle._exporter, "pid", None)))
            next_sample = time.perf_counter() + 0.1
    handle.result()
    return peak


def format_table(rows: list[dict]) -> str:
    lines = [
        f"on_trace_ready with a .json.gz handler, {rows[0]['activities']:,} activities a cycle",
        f"{'handler':<22} {'stop s':>7} {'blocked ms':>10} {'export s':>8} {'loop %':>7} "
        f"{'MB':>6} {'same':>5} {'child MB':>8}",
    ]
    for r in rows:
        same = {None: "-", True: "yes", False: "NO"}[r["same_as_foreground"]]
        lines.append(
            f"{r['handler']:<22} {r['stop_s']:7.2f} {1e3 * r['blocked_s']:10.1f} "
            f"{r['export_s']:8.2f} "
            f"{100 * r['loop_fraction']:6.0f}% {r['file_bytes'] / 1e6:6.1f} {same:>5} "
            f"{r['child_private_mb']:8.0f}"
        )
    lines.append(f"(parent RSS {rows[-1]['parent_rss_mb']:.0f} MB; child MB: the background")
    lines.append(" process's peak private memory: copied-on-write pages and its own buffers)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short CI run")
    parser.add_argument("--active", type=int, default=None, help="profiled steps a cycle")
    parser.add_argument("--baseline", type=float, default=None, help="unprofiled seconds")
    parser.add_argument("--handlers", default=",".join(HANDLERS), help="comma-separated")
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the background process's memory run"
    )
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)
    active = args.active or (125 if args.quick else 1250)
    baseline = args.baseline or (1.0 if args.quick else 3.0)
    handlers = args.handlers.split(",")
    unknown = set(handlers) - set(HANDLERS)
    if unknown:
        parser.error(f"unknown handlers: {sorted(unknown)}; choose from {HANDLERS}")

    import torch

    # One intra-op thread: small ops gain nothing from more, and on a loaded machine
    # OpenMP's spinning threads make step times erratic (measured: 2-400 steps/s).
    torch.set_num_threads(1)
    model = Model()
    steps_per_second(model, 0.5)  # warm up
    rows = []
    with tempfile.TemporaryDirectory(prefix="kinetrace-bench-training-") as out_dir:
        for who in handlers:
            rows.append(run_one(who, model, active, baseline, out_dir, not args.no_memory))
            print(f"  {who}: done", file=sys.stderr, flush=True)
    print(format_table(rows))
    if args.json:
        payload = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "torch": torch.__version__,
            },
            "active_steps": active,
            "rows": rows,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
    bad = [r["handler"] for r in rows if r["same_as_foreground"] is False]
    if bad:
        print(f"the background trace differs from the foreground one: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
