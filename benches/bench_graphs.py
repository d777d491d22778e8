"""CUDA-graph annotation benchmark: kinetrace annotated vs unannotated vs torch's annotated.

    python benches/bench_graphs.py                    # 300k activities, best of 3
    python benches/bench_graphs.py --activities 30000 --repeat 1    # a quick run

The profile is constructed (no GPU needed) in the shape of a ``torch.compile(mode=
"reduce-overhead")`` run: record_shapes CPU ops, eager launches (cuda_runtime -> kernel
with ``ac2g`` flows), and graph replays whose kernels are 10% of all activities and carry a
``"graph node id"``; annotations cover half of the graph's nodes, the way
``mark_kernels`` leaves them. Every exporter runs on the same activity list, in one
process; torch's exporter is ``torch.profiler._chrome_trace_export.export_chrome_trace``
(what ``export_chrome_trace(..., cuda_graph_annotations=...)`` runs). Prints a table and
the ratios the issue asks for; ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

#: Distinct graph nodes; each replay runs them in order.
GRAPH_NODES = 1000
_T0 = 1_796_028_311_502_385_758
_SHAPES = (
    '"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, '
    '"Concrete Inputs": ["", "", "1"], "Input type": ["float", "float", "Scalar"], '
    '"Input Strides": [[{b}, 1], [{b}, 1], []], "Input Dims": [[{a}, {b}], [{a}, {b}], []], '
    '"Ev Idx": {i}'
)
_KERNEL_MD = (
    '"queued": 0, "device": 0, "context": 1, "stream": {stream}, "correlation": {corr}, '
    '"registers per thread": 32, "shared memory": 0, "blocks per SM": 4.5, '
    '"warps per SM": 18, "grid": [{a}, 1, 1], "block": [128, 1, 1], '
    '"est. achieved occupancy %": 100'
)


class Activity:
    """An ``_ITraceActivity`` look-alike holding its field values."""

    __slots__ = (
        "_cat",
        "_corr",
        "_did",
        "_dur",
        "_flow",
        "_flow_start",
        "_linked",
        "_md",
        "_name",
        "_rid",
        "_ts",
    )

    def __init__(
        self,
        cat: str,
        name: str,
        did: int,
        rid: int,
        ts: int,
        dur: int,
        md: str = "",
        corr: int = 0,
        linked: int = 0,
        flow: int = 0,
        flow_start: bool = False,
    ) -> None:
        self._cat, self._name, self._did, self._rid = cat, name, did, rid
        self._ts, self._dur, self._md, self._corr = ts, dur, md, corr
        self._linked, self._flow, self._flow_start = linked, flow, flow_start

    def type(self) -> str:
        return self._cat

    def name(self) -> str:
        return self._name

    def device_id(self) -> int:
        return self._did

    def resource_id(self) -> int:
        return self._rid

    def timestamp(self) -> int:
        return self._ts

    def duration(self) -> int:
        return self._dur

    def metadata_json(self) -> str:
        return self._md

    def correlation_id(self) -> int:
        return self._corr

    def linked_correlation_id(self) -> int:
        return self._linked

    def flow_id(self) -> int:
        return self._flow

    def flow_type(self) -> int:
        return 2 if self._flow else 0

    def flow_start(self) -> bool:
        return self._flow_start

    def linked_activity(self) -> Any:
        return None


class Result:
    """A ``_ProfilerResult`` look-alike over a list of activities."""

    def __init__(self, activities: list[Activity]) -> None:
        self.activities = activities

    def trace_activities(self) -> list[Activity]:
        return self.activities

    def trace_start_ns(self) -> int:
        return _T0


def build(n: int) -> tuple[Result, dict[int, Any]]:
    """``n`` activities, 10% of them graphed kernels; annotations for half the nodes."""
    pid = os.getpid()
    acts: list[Activity] = []
    ts = _T0
    i = 0
    node = 0
    replay = 0
    while len(acts) < n:
        i += 1
        ts += 1_500
        slot = i % 10
        if slot < 6:
            acts.append(
                Activity(
                    "cpu_op",
                    "aten::add",
                    pid,
                    pid,
                    ts,
                    900 + i % 700,
                    _SHAPES.format(seq=i, a=8 << (i % 5), b=64, i=i),
                    corr=i,
                )
            )
        elif slot == 6:
            acts.append(
                Activity(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    pid,
                    pid,
                    ts,
                    400,
                    f'"cbid": 211, "correlation": {i}',
                    corr=i,
                    linked=i - 1,
                    flow=i,
                    flow_start=True,
                )
            )
        elif slot == 7:
            acts.append(
                Activity(
                    "kernel",
                    "vectorized_elementwise_kernel",
                    0,
                    7,
                    ts + 3_000,
                    2_000,
                    _KERNEL_MD.format(stream=7, corr=i, a=i % 64),
                    corr=i,
                    linked=i - 1,
                    flow=i - 1,
                )
            )
        elif slot == 8:
            if i % 100 == 8:
                acts.append(Activity("gpu_user_annotation", f"step#{i}", 0, 7, ts, 90_000, corr=i))
            else:
                acts.append(Activity("user_annotation", "fwd", pid, pid, ts, 5_000, corr=i))
        else:
            node = node % GRAPH_NODES + 1
            replay += node == 1
            stream = 20 + replay % 4
            md = _KERNEL_MD.format(stream=stream, corr=i, a=node % 64)
            acts.append(
                Activity(
                    "kernel",
                    f"graphed_kernel_{node % 37}",
                    0,
                    stream,
                    ts + 3_000,
                    1_500,
                    f'{md}, "graph node id": {(1 << 32) | node}',
                    corr=i,
                    linked=i,
                )
            )
    annotations: dict[int, Any] = {
        (1 << 32) | k: {"name": f"layer{k // 50}.block", "phase": "decode", "dtype": "bf16"}
        for k in range(1, GRAPH_NODES + 1, 2)
    }
    return Result(acts[:n]), annotations


def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (0 where unknown)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one call: CPU time is what a shared, loaded machine
    disturbs least."""
    cpu, wall = _cpu_seconds(), time.perf_counter()
    fn()
    return time.perf_counter() - wall, _cpu_seconds() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N (torch runs once)")
    parser.add_argument("--formats", default="json,json.gz")
    parser.add_argument("--workers", type=int, default=1, help="kinetrace workers")
    parser.add_argument("--graph-lanes", default="none", choices=("none", "all"))
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)

    import torch
    import torch.profiler._chrome_trace_export as torch_export

    import kinetrace

    result, annotations = build(args.activities)
    base = kinetrace._kinetrace.trimonth_base_ns(_T0)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kinetrace-bench-graphs-") as out:
        for fmt in args.formats.split(","):
            path = os.path.join(out, f"trace.{fmt}")

            def ours(ann: Any, path: str = path) -> None:
                kinetrace.export_chrome_trace(
                    result,
                    path,
                    None,
                    ann,
                    args.graph_lanes if ann else "none",
                    base_time_ns=base,
                    workers=args.workers,
                )

            def theirs(path: str = path) -> None:
                torch_export.export_chrome_trace(result, path, None, annotations, args.graph_lanes)

            # Alternated, so a load change on a shared machine hits both alike.
            plain = annotated = plain_cpu = annotated_cpu = float("inf")
            for _ in range(args.repeat):
                wall, cpu = _timed(lambda: ours(None))
                plain, plain_cpu = min(plain, wall), min(plain_cpu, cpu)
                wall, cpu = _timed(lambda: ours(annotations))
                annotated, annotated_cpu = min(annotated, wall), min(annotated_cpu, cpu)
            size = os.path.getsize(path)
            torch_s = _best(theirs, 1)
            row = {
                "format": fmt,
                "kinetrace_unannotated_s": round(plain, 3),
                "kinetrace_annotated_s": round(annotated, 3),
                "torch_annotated_s": round(torch_s, 3),
                "annotated_over_unannotated": round(annotated / plain, 3),
                "annotated_over_unannotated_cpu": round(annotated_cpu / max(plain_cpu, 1e-9), 3),
                "torch_over_kinetrace_annotated": round(torch_s / annotated, 2),
                "kinetrace_annotated_bytes": size,
                "torch_annotated_bytes": os.path.getsize(path),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)

    print(
        f"\n{args.activities} activities, 10% graphed kernels, annotations for half of "
        f"the {GRAPH_NODES} nodes, graph_lanes={args.graph_lanes!r}, "
        f"kinetrace workers={args.workers}"
    )
    print(
        f"{'format':<9}{'kt plain':>10}{'kt annot':>10}{'torch annot':>13}{'annot/plain':>13}"
        f"{'(cpu)':>8}{'torch/kt':>10}"
    )
    for r in rows:
        print(
            f"{r['format']:<9}{r['kinetrace_unannotated_s']:>10.3f}"
            f"{r['kinetrace_annotated_s']:>10.3f}{r['torch_annotated_s']:>13.3f}"
            f"{r['annotated_over_unannotated']:>12.3f}x{r['annotated_over_unannotated_cpu']:>7.3f}x"
            f"{r['torch_over_kinetrace_annotated']:>9.2f}x"
        )
    if args.json:
        payload = {
            "activities": args.activities,
            "graph_lanes": args.graph_lanes,
            "workers": args.workers,
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "torch": torch.__version__,
            },
            "rows": rows,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
