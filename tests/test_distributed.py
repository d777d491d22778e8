"""Two gloo ranks on this machine, each exporting through kinetrace.tensorboard_trace_handler;
then the traces are loaded by HolisticTraceAnalysis and by torch-tb-profiler's parser when
those are installed.

gloo does not emit ``record_param_comms`` (torch records it in the NCCL and XCCL backends
only), so the CPU test checks the collective ops gloo does record; the NCCL test, which needs
a CUDA device, checks ``record_param_comms``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity
from torch.profiler._chrome_trace_export import export_chrome_trace as torch_python_export

import kinetrace
from kinetrace._export import profiler as _profiler
from support import catapult
from support.consumers import consumer
from support.merged import check_merge

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")

WORLD_SIZE = 2
STEPS = 4  # schedule: warmup at step 0, steps 1 and 2 recorded, then nothing
RECORDED_STEPS = 2


def _rank_main(
    rank: int, world_size: int, port: int, trace_dir: str, reference_dir: str, backend: str
) -> None:
    """One rank: profile an all_reduce per step; on each trace, write torch's Python export
    (the reference) and then the trace through kinetrace's handler."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    activities = [ProfilerActivity.CPU]
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        activities.append(ProfilerActivity.CUDA)
    dist.init_process_group(
        backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=60)
    )
    handler = _profiler.tensorboard_trace_handler(trace_dir, worker_name=f"rank{rank}")

    def on_ready(prof: Any) -> None:
        reference = os.path.join(reference_dir, f"rank{rank}.json")
        torch_python_export(prof.profiler.kineto_results, reference, prof._trace_metadata)
        handler(prof)

    try:
        with _profiler.profile(
            activities=activities,
            schedule=_profiler.schedule(wait=0, warmup=1, active=RECORDED_STEPS, repeat=1),
            on_trace_ready=on_ready,
        ) as prof:
            for _ in range(STEPS):
                tensor = torch.full((16,), float(rank + 1), device=device)
                dist.all_reduce(tensor)
                if tensor[0].item() != sum(range(1, world_size + 1)):
                    raise AssertionError(f"all_reduce gave {tensor[0].item()}")
                prof.step()
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: with torch 2.15, a process that profiled
    # with Kineto and used gloo sometimes aborts at exit ("terminate called without an
    # active exception", SIGABRT) -- also with torch's own profiler and exporter and no
    # kinetrace at all. Everything this rank writes is complete and closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(base: Path, backend: str, world_size: int, timeout_s: float = 120) -> Path:
    """Run ``world_size`` ranks; return the trace directory (references in ``base/ref``)."""
    trace_dir, reference_dir = base / "traces", base / "ref"
    trace_dir.mkdir()
    reference_dir.mkdir()
    context = mp.start_processes(
        _rank_main,
        args=(world_size, _free_port(), str(trace_dir), str(reference_dir), backend),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ranks did not finish in {timeout_s} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return trace_dir


def rank_files(trace_dir: Path) -> dict[int, Path]:
    files = {}
    for path in trace_dir.iterdir():
        worker, _, rest = path.name.partition(".")
        assert rest.endswith(".pt.trace.json") and worker.startswith("rank"), path.name
        files[int(worker[len("rank") :])] = path
    return files


@pytest.fixture(scope="module")
def gloo_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_ranks(tmp_path_factory.mktemp("gloo"), "gloo", WORLD_SIZE)


def verified_rank_traces(trace_dir: Path, backend: str, world_size: int) -> dict[int, Any]:
    """Each rank's trace, parsed, once asserted equal to torch's Python export of that rank
    and labelled with its rank, world size and backend."""
    files = rank_files(trace_dir)
    assert sorted(files) == list(range(world_size)), "one file per rank"
    traces = {}
    for rank, path in files.items():
        raw = path.read_bytes()
        reference = trace_dir.parent / "ref" / f"rank{rank}.json"
        expected = reference.read_bytes().replace(str(reference).encode(), str(path).encode())
        assert raw == expected, f"rank {rank}: kinetrace differs from torch's Python export"
        trace = json.loads(raw)
        info = trace["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, world_size, backend)
        traces[rank] = trace
    return traces


def test_gloo_ranks(gloo_traces: Path) -> None:
    traces = verified_rank_traces(gloo_traces, "gloo", WORLD_SIZE)
    for trace in traces.values():
        names = Counter(event["name"] for event in trace["traceEvents"])
        assert names["c10d::allreduce_"] == RECORDED_STEPS
        assert names["gloo:all_reduce"] == RECORDED_STEPS
        assert names["ProfilerStep#1"] == names["ProfilerStep#2"] == 1
        # gloo records no record_param_comms on CPU (and no kernel links to one there: the
        # linked-activity path is tested on CUDA, scripts/gpu-check.sh). A torch that starts
        # recording them fails here, and the path can then be tested on CPU.
        assert names["record_param_comms"] == 0


@pytest.mark.skipif(
    not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs CUDA and NCCL"
)
def test_nccl_record_param_comms(tmp_path: Path) -> None:
    world_size = min(WORLD_SIZE, torch.cuda.device_count())
    trace_dir = run_ranks(tmp_path, "nccl", world_size)
    traces = verified_rank_traces(trace_dir, "nccl", world_size)
    for trace in traces.values():
        comms = [e for e in trace["traceEvents"] if e["name"] == "record_param_comms"]
        assert comms, "no record_param_comms events"
        assert {e["args"]["Collective name"] for e in comms} >= {"allreduce"}


# HTA 0.5.0 calls pandas methods with inplace=True, which pandas 3.1 deprecates
# (pandas.errors.Pandas4Warning, named here by its base class so that the filter does not
# need pandas to be importable).
@pytest.mark.filterwarnings(
    r"ignore:The inplace keyword in DataFrame\.\w+ is deprecated:DeprecationWarning"
)
def test_holistic_trace_analysis_loads_the_ranks(gloo_traces: Path) -> None:
    trace_analysis = consumer("hta.trace_analysis")
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(gloo_traces))
    assert sorted(analysis.t.get_ranks()) == [0, 1]
    symbols = set(analysis.t.symbol_table.get_sym_table())
    assert {"c10d::allreduce_", "gloo:all_reduce", "ProfilerStep#1"} <= symbols
    for rank in (0, 1):
        assert len(analysis.t.get_trace(rank)) > 0


def test_tensorboard_plugin_parses_the_ranks(gloo_traces: Path, tmp_path: Path) -> None:
    data_module = consumer("torch_tb_profiler.profiler.data")
    generator_module = consumer("torch_tb_profiler.profiler.run_generator")
    for rank, path in sorted(rank_files(gloo_traces).items()):
        worker = f"rank{rank}"
        data = data_module.RunProfileData.parse(worker, None, str(path), str(tmp_path))
        assert data.distributed_info["rank"] == rank
        assert data.has_communication
        names = {agg.name for agg in data.op_list_groupby_name}
        assert {"c10d::allreduce_", "aten::full"} <= names
        profile = generator_module.RunGenerator(worker, None, data).generate_run_profile()
        assert "operator" in {view.name for view in profile.views}
        comm = data_module.DistributedRunProfileData(data).comm_node_list
        assert len(comm) == RECORDED_STEPS


def test_merged_gloo_ranks(gloo_traces: Path, tmp_path: Path) -> None:
    """The handler's log dir merged: both ranks on one clock, each event once (mapped),
    processes rank by rank, accepted by check and loaded by Catapult process by process."""
    merged = tmp_path / "merged.json"
    result = kinetrace.merge_traces([gloo_traces], merged)
    sources = sorted(gloo_traces.iterdir())
    assert [(r.rank, r.rank_from) for r in result.ranks] == [
        (0, "distributedInfo"),
        (1, "distributedInfo"),
    ]
    check_merge(merged, sources)
    report = kinetrace.check_trace(merged)
    assert report.valid, report.errors
    names = [p.name for r in result.ranks for p in r.processes]
    print("merged gloo processes, in order:", names)
    for rank in (0, 1):
        ours = [n for n in names if n.startswith(f"rank {rank} · ")]
        assert ours[0].startswith(f"rank {rank} · pid "), ours
    assert [n.split(" · ")[0] for n in names] == sorted(n.split(" · ")[0] for n in names)
    trace = json.loads(merged.read_text())
    steps = [e for e in trace["traceEvents"] if e["name"] == "ProfilerStep#1"]
    assert len({e["pid"] for e in steps}) == 2
    if catapult.missing() is None:
        catapult.assert_merge_loads(merged, sources, tmp_path)
    # Aligned on their first common step: both ranks' ProfilerStep#1 start together.
    aligned = kinetrace.merge_traces([gloo_traces], tmp_path / "aligned.json", align="step")
    assert aligned.aligned_step == 1
    check_merge(tmp_path / "aligned.json", sources)
    starts = {
        e["ts"]
        for e in json.loads((tmp_path / "aligned.json").read_text())["traceEvents"]
        if e["name"] == "ProfilerStep#1" and e.get("cat") == "user_annotation"
    }
    assert len(starts) == 1, starts
