"""Byte fidelity on real CPU profiles recorded with torch.profiler.

Both exporters run on the SAME ``prof.profiler.kineto_results``, with their own default time
bases (torch: the wall clock at export; kinetrace: the trace's own start): in the normal
case (no trimonth boundary in between) they must agree byte for byte.
"""

from __future__ import annotations

import gzip
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.profiler._chrome_trace_export as torch_export
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import kinetrace
from support.oracle import compare, torch_bytes
from support.traces import activity_events, read_trace, single_member_text, strict_loads


def workload(n: int = 6) -> torch.Tensor:
    x = torch.ones(4, 4)
    for _ in range(n):
        x = torch.relu(x @ x * 0.5 + 1)
    return x.sum()


def record(body: Callable[[Any], Any] = lambda prof: workload(), **kwargs: Any) -> profile:
    with profile(activities=[ProfilerActivity.CPU], **kwargs) as prof:
        body(prof)
    return prof


def result_of(prof: Any) -> Any:
    return prof.profiler.kineto_results


def categories(result: Any) -> set[str]:
    return {a.type() for a in result.trace_activities()}


def test_plain(tmp_path):
    prof = record()
    result = result_of(prof)
    assert len(result.trace_activities()) >= 20
    compare(result, tmp_path, base=None)


def test_record_shapes(tmp_path):
    prof = record(record_shapes=True)
    result = result_of(prof)
    assert any('"Input Dims"' in a.metadata_json() for a in result.trace_activities())
    compare(result, tmp_path, base=None)


def test_with_stack(tmp_path):
    prof = record(with_stack=True)
    result = result_of(prof)
    assert "python_function" in categories(result)
    compare(result, tmp_path, base=None)


def test_profile_memory(tmp_path):
    prof = record(profile_memory=True, record_shapes=True)
    result = result_of(prof)
    instants = [a for a in result.trace_activities() if a.type() == "cpu_instant_event"]
    assert instants and all(a.name() == "[memory]" for a in instants)
    out = compare(result, tmp_path, base=None)
    assert b'{"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]"' in out


def test_with_modules(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="with_modules is deprecated", category=FutureWarning
        )
        prof = record(
            lambda p: model(torch.ones(3, 8)).sum().backward(), with_modules=True, with_stack=True
        )
    compare(result_of(prof), tmp_path, base=None)


def test_backward_pass(tmp_path):
    w = torch.ones(4, 4, requires_grad=True)

    def body(prof):
        loss = (w @ w).relu().sum()
        loss.backward()

    prof = record(body, record_shapes=True)
    compare(result_of(prof), tmp_path, base=None)


def test_all_options_with_backward_flows(tmp_path):
    """Every CPU option at once; the backward pass gives real fwdbwd flows."""
    config = torch._C._profiler._ExperimentalConfig(
        verbose=True, profile_all_threads=True, capture_overload_names=True
    )
    w = torch.ones(8, 8, requires_grad=True)

    def body(prof):
        for _ in range(3):
            (w @ w).relu().sum().backward()
        torch.nn.functional.conv2d(torch.ones(1, 1, 5, 5), torch.ones(1, 1, 3, 3))

    prof = record(
        body,
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        with_flops=True,
        experimental_config=config,
    )
    result = result_of(prof)
    flows = [a for a in result.trace_activities() if a.flow_id() > 0]
    assert flows and {a.flow_type() for a in flows} == {1}
    out = compare(result, tmp_path, prof._trace_metadata, source=prof, base=None)
    assert b'"cat":"fwdbwd"' in out
    compare(result, tmp_path, prof._trace_metadata, source=prof, base=None, name="t.json.gz")


ANNOTATIONS = [
    "plain",
    "unicode é ü 漢字 😀",
    "back\\slash C:\\dir\\x",
    'q"uote',
    "tab\tnew\nline",
    "ctl \x01\x1f\x7f",
    "sep \u2028\u2029",
    "",
]


def test_record_function_annotations(tmp_path):
    def body(prof):
        for label in ANNOTATIONS:
            with record_function(label):
                workload(1)

    prof = record(body)
    result = result_of(prof)
    names = {a.name() for a in result.trace_activities()}
    assert "unicode é ü 漢字 😀" in names and "back\\slash C:\\dir\\x" in names
    out = compare(result, tmp_path, base=None)
    trace = strict_loads(out)
    written = {e["name"] for e in activity_events(trace)}
    assert names <= written


def test_threads(tmp_path):
    def body(prof):
        threads = [threading.Thread(target=workload, args=(3,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        workload(2)

    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    prof = record(body, experimental_config=config)
    result = result_of(prof)
    assert len({a.resource_id() for a in result.trace_activities()}) >= 2
    compare(result, tmp_path, base=None)


def test_schedule_cycles(tmp_path):
    seen: list[int] = []

    def on_trace_ready(prof):
        result = result_of(prof)
        cycle = len(seen)
        compare(result, tmp_path, base=None, name=f"cycle{cycle}.json")
        # The profile object itself (with its trace metadata) against torch's own entry point.
        path = str(tmp_path / f"cycle{cycle}_prof.json")
        prof.export_chrome_trace(path, use_python_export=True)
        expected = Path(path).read_bytes()
        os.remove(path)
        kinetrace.export_chrome_trace(prof, path)
        assert Path(path).read_bytes() == expected
        seen.append(len(result.trace_activities()))

    with warnings.catch_warnings():
        # Expected with a repeating schedule: each cycle reports only its own events.
        warnings.filterwarnings(
            "ignore",
            message=".*Profiler clears events at the end of each cycle",
            category=UserWarning,
        )
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=2, repeat=3),
            on_trace_ready=on_trace_ready,
            record_shapes=True,
        ) as prof:
            for _ in range(4 * 3 + 1):
                workload(2)
                prof.step()
    assert len(seen) == 3
    assert all(n > 0 for n in seen)


def test_empty_profile(tmp_path):
    prof = record(lambda p: None)
    result = result_of(prof)
    assert result.trace_activities() == []
    out = compare(result, tmp_path, base=None)
    assert b'"Record Window End"' in out


def test_trace_metadata_from_profile(tmp_path):
    def body(prof):
        prof.add_metadata("run", "nightly é")
        prof.add_metadata("quoted", 'say "hi"')
        prof.add_metadata_json("config", '{"lr": 0.1, "layers": [1, 2], "name": "\\u00e9"}')
        prof.add_metadata_json("count", "42")
        workload(2)

    prof = record(body, record_shapes=True)
    result = result_of(prof)
    metadata = prof._trace_metadata
    assert {"run", "quoted", "config", "count"} <= set(metadata)
    out = compare(result, tmp_path, metadata, source=prof, base=None)
    trace = strict_loads(out)
    assert trace["run"] == "nightly é"
    assert trace["quoted"] == 'say "hi"'
    assert trace["config"] == {"lr": 0.1, "layers": [1, 2], "name": "é"}
    assert trace["count"] == 42


def test_torch_entry_point_with_metadata(tmp_path):
    """torch's own entry point (`prof.export_chrome_trace(p, use_python_export=True)`) and
    `kinetrace.export_chrome_trace(prof, p)` write the same bytes."""

    def body(prof):
        prof.add_metadata("k", "v")
        workload(3)

    prof = record(body)
    path = str(tmp_path / "t.json")
    prof.export_chrome_trace(path, use_python_export=True)
    expected = Path(path).read_bytes()
    os.remove(path)
    kinetrace.export_chrome_trace(prof, path)
    assert Path(path).read_bytes() == expected


def test_legacy_autograd_profiler(tmp_path):
    with torch.autograd.profiler.profile() as prof:
        workload(3)
    compare(prof.kineto_results, tmp_path, base=None, source=prof)


def test_same_result_exported_repeatedly(tmp_path):
    prof = record(record_shapes=True, with_stack=True)
    result = result_of(prof)
    first = compare(result, tmp_path, base=None, name="a.json")
    second = compare(result, tmp_path, base=None, name="a.json")
    assert first == second
    # kinetrace twice in a row on the same path: same bytes, the file replaced.
    path = tmp_path / "a.json"
    kinetrace.export_chrome_trace(result, path)
    assert path.read_bytes() == first


def test_gzip_matches_plain_json(tmp_path):
    prof = record(record_shapes=True, profile_memory=True, with_stack=True)
    result = result_of(prof)
    # torch's .gz and kinetrace's .gz decompress to the same text (same path string).
    compare(result, tmp_path, base=None, name="t.json.gz")
    # kinetrace's .gz is exactly its .json apart from traceName, and one gzip member.
    plain = tmp_path / "same.json"
    packed = tmp_path / "same.json.gz"
    kinetrace.export_chrome_trace(result, plain)
    kinetrace.export_chrome_trace(result, packed, threads=2)
    text = single_member_text(packed.read_bytes())
    assert text == gzip.decompress(packed.read_bytes())
    plain_bytes = plain.read_bytes()
    tail = b'"traceName": "' + str(plain).encode() + b'"\n}\n'
    gz_tail = b'"traceName": "' + str(packed).encode() + b'"\n}\n'
    assert plain_bytes.endswith(tail) and text.endswith(gz_tail)
    assert text[: -len(gz_tail)] == plain_bytes[: -len(tail)]


def test_gzip_plain_and_torch_json_agree(tmp_path):
    """torch's .json and kinetrace's .json.gz at the same path string decompress equal."""
    prof = record()
    result = result_of(prof)
    path = str(tmp_path / "x.json.gz")
    expected = torch_bytes(result, path, base=None)
    kinetrace.export_chrome_trace(result, path, compresslevel=9, threads=1)
    assert read_trace(path) == expected


#: Why the CUDA tests skip on CPU (scripts/gpu-check.sh runs them where there is a GPU).
NEEDS_CUDA = (
    "needs CUDA (scripts/gpu-check.sh): kernels, memcpys and the kernels linked to "
    "record_param_comms exist only on a GPU; gloo on CPU records no record_param_comms, and "
    "the reader reads a linked activity's comms metadata for kernels only "
    "(src/python/reader.rs comms_metadata)"
)


class _LookAlike:
    """A torch activity read through Python attribute access: the reader's second path
    (not torch's own type, so no direct call)."""

    def __init__(self, activity: Any) -> None:
        self._activity = activity

    def __getattr__(self, name: str) -> Any:
        return getattr(self._activity, name)


class _LookAlikeResult:
    def __init__(self, result: Any) -> None:
        self._result = result

    def trace_activities(self) -> list[_LookAlike]:
        return [_LookAlike(a) for a in self._result.trace_activities()]

    def trace_start_ns(self) -> int:
        return int(self._result.trace_start_ns())


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NEEDS_CUDA)
def test_cuda_profile(tmp_path):  # pragma: no cover - only where a GPU is present
    x = torch.ones(64, 64, device="cuda")
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True
    ) as prof:
        for _ in range(5):
            x = x @ x
        y = x.cpu()
        torch.cuda.synchronize()
    del y
    result = result_of(prof)
    assert "kernel" in categories(result)
    compare(result, tmp_path, base=None)
    compare(result, tmp_path, base=None, name="t.json.gz")


@pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.distributed.is_nccl_available()), reason=NEEDS_CUDA
)
def test_cuda_nccl_linked_activities(tmp_path):  # pragma: no cover - only on a GPU
    """A one-process NCCL group on one GPU: kernels, a memcpy and the all-reduce's kernel
    linked to its ``record_param_comms``; torch's bytes by both reading paths (torch's
    activities called directly, and look-alikes read through Python)."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    try:
        x = torch.ones(256, 256, device="cuda")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                dist.all_reduce(x)
                x = x @ x / 256
            y = x.cpu()
            torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()
    del y
    result = result_of(prof)
    assert {"kernel", "gpu_memcpy"} <= categories(result)
    actual = compare(result, tmp_path, base=None)
    kernels = [e for e in strict_loads(actual)["traceEvents"] if e.get("cat") == "kernel"]
    assert any("Collective name" in e.get("args", {}) for e in kernels), "no linked kernel"
    compare(result, tmp_path, base=None, source=_LookAlikeResult(result), name="py.json")


def test_torch_exporter_is_the_expected_one():
    """Guard: the installed torch has the Python exporter this suite compares against."""
    assert callable(torch_export.export_chrome_trace)
    assert callable(torch_export._trimester_base_ns)
