"""Real consumers load kinetrace's files the way they load torch's.

HolisticTraceAnalysis and TensorBoard's torch-tb-profiler plugin (installed from the package
index by scripts/env.sh) read a kinetrace export and torch's Python export of the SAME
result, and must see the same events and operator names; a GPU-shaped constructed trace
(kernels, memcpy, runtime launches with flows) loads too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.profiler._chrome_trace_export import export_chrome_trace as torch_python_export

import kinetrace
from support import catapult
from support.consumers import consumer
from support.fakes import FakeResult
from support.scenarios import chain, launch_set, memcpy_memset_set
from support.synthetic import SyntheticResult, distributed_info

# HTA 0.5.0 and torch-tb-profiler call pandas methods with inplace= and copy=, which
# pandas 3 deprecates (Pandas4Warning, named by its base class so the filter does not need
# pandas imported).
HTA_INPLACE = r"ignore:The inplace keyword in DataFrame\.\w+ is deprecated:DeprecationWarning"
HTA_COPY = r"ignore:The copy keyword is deprecated:DeprecationWarning"


def PANDAS3_WARNINGS(test):
    return pytest.mark.filterwarnings(HTA_COPY)(pytest.mark.filterwarnings(HTA_INPLACE)(test))


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """One profile exported by torch's Python exporter and by kinetrace, each in its own
    directory (HTA reads a directory of rank files)."""
    from torch.profiler import profile, record_function

    x = torch.randn(16, 16, requires_grad=True)
    with profile(record_shapes=True) as prof:
        for _ in range(5):
            with record_function("train_step"):
                (x @ x).relu().sum().backward()
    result = prof.profiler.kineto_results
    root = tmp_path_factory.mktemp("consumers")
    out = {}
    for who in ("torch", "kinetrace"):
        directory = root / who
        directory.mkdir()
        path = directory / "worker0.1.pt.trace.json"
        if who == "torch":
            torch_python_export(result, str(path), prof._trace_metadata)
        else:
            kinetrace.export_chrome_trace(prof, path)
        out[who] = path
    return out


def _names(path: Path) -> list[str]:
    return sorted(e["name"] for e in json.loads(path.read_text())["traceEvents"])


def test_same_events_as_torch(exports):
    assert _names(exports["kinetrace"]) == _names(exports["torch"])


@PANDAS3_WARNINGS
def test_holistic_trace_analysis(exports):
    trace_analysis = consumer("hta.trace_analysis")
    seen = {}
    for who, path in exports.items():
        analysis = trace_analysis.TraceAnalysis(trace_dir=str(path.parent))
        rank = analysis.t.get_ranks()[0]
        frame = analysis.t.get_trace(rank)
        symbols = analysis.t.symbol_table.get_sym_table()
        names = sorted(symbols[i] for i in frame["name"])
        seen[who] = (len(frame), names)
    assert seen["kinetrace"] == seen["torch"]
    assert "aten::mm" in seen["kinetrace"][1]


def _tb_profile(path: Path, tmp_path: Path):
    data_module = consumer("torch_tb_profiler.profiler.data")
    return data_module.RunProfileData.parse("worker0", None, str(path), str(tmp_path))


@PANDAS3_WARNINGS
def test_tensorboard_plugin(exports, tmp_path):
    seen = {}
    for who, path in exports.items():
        data = _tb_profile(path, tmp_path)
        ops = sorted((agg.name, agg.calls) for agg in data.op_list_groupby_name)
        seen[who] = ops
    assert seen["kinetrace"] == seen["torch"]
    assert any(name == "aten::mm" for name, _ in seen["kinetrace"])


def _gpu_trace(tmp_path: Path) -> Path:
    result = FakeResult(chain(launch_set(), memcpy_memset_set()))
    directory = tmp_path / "gpu"
    directory.mkdir()
    path = directory / "worker0.1.pt.trace.json"
    kinetrace.export_chrome_trace(result, path)
    return path


@PANDAS3_WARNINGS
def test_gpu_shaped_trace_loads_in_hta(tmp_path):
    trace_analysis = consumer("hta.trace_analysis")
    path = _gpu_trace(tmp_path)
    analysis = trace_analysis.TraceAnalysis(trace_dir=str(path.parent))
    frame = analysis.t.get_trace(analysis.t.get_ranks()[0])
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels
    symbols = analysis.t.symbol_table.get_sym_table()
    loaded = {symbols[i] for i in frame["name"]}
    assert {e["name"] for e in kernels} <= loaded


@PANDAS3_WARNINGS
def test_gpu_shaped_trace_loads_in_tensorboard_plugin(tmp_path):
    path = _gpu_trace(tmp_path)
    data = _tb_profile(path, tmp_path)
    assert data.has_kernel


@pytest.mark.skipif(catapult.missing() is not None, reason=str(catapult.missing()))
def test_merged_ranks_load_in_catapult(tmp_path):
    """Catapult (chrome://tracing's viewer) in headless Chromium: a merge of three ranks with
    colliding pids and flow ids has, per process, the events each source had."""
    sources = []
    for rank in range(3):
        path = tmp_path / f"rank{rank}.json"
        kinetrace.export_chrome_trace(
            SyntheticResult(800, seed=rank % 2, gpu=True),
            path,
            base_time_ns=1_790_857_026_000_000_000 + rank * 1000,
            metadata=distributed_info(rank, 3),
        )
        sources.append(path)
    merged = tmp_path / "merged.json"
    kinetrace.merge_traces(sources, merged)
    model = catapult.assert_merge_loads(merged, sources, tmp_path)
    assert len(model["processes"]) == 3 * 5  # CPU, GPU 0, Spans, Traces, "" per rank
    assert model["flows"] > 0
