"""kinetrace.profile and kinetrace.tensorboard_trace_handler against torch's own classes."""

from __future__ import annotations

import errno
import gzip
import inspect
import json
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.profiler
import torch.profiler.profiler as torch_profiler_module
from torch.autograd.profiler import KinetoStepTracker
from torch.profiler import ExecutionTraceObserver, ProfilerActivity
from torch.profiler._chrome_trace_export import export_chrome_trace as torch_python_export

import kinetrace
from kinetrace._export import export as _export
from kinetrace._export import profiler as _profiler
from kinetrace._export.profiler import ProfilerAction, profile, schedule, tensorboard_trace_handler
from support.traces import read_trace

CPU = [ProfilerActivity.CPU]
TORCH_EXPORT_PARAMETERS = inspect.signature(torch.profiler.profile.export_chrome_trace).parameters
TORCH_INIT_PARAMETERS = inspect.signature(torch.profiler.profile.__init__).parameters
needs_graph_lanes = pytest.mark.skipif(
    "graph_lanes" not in TORCH_EXPORT_PARAMETERS, reason="this torch has no graph_lanes"
)
CLEARS_EVENTS = "Profiler clears events at the end of each cycle"
TRACE_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ns>\d+)\.pt\.trace\.json(?P<gz>\.gz)?$")
N, W, R, S = (
    ProfilerAction.NONE,
    ProfilerAction.WARMUP,
    ProfilerAction.RECORD,
    ProfilerAction.RECORD_AND_SAVE,
)


def work() -> None:
    """A few ops to profile."""
    x = torch.ones(8)
    (x + x).sum()


@pytest.fixture(autouse=True)
def fresh_warn_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch warns some things once per process: make every test see them afresh."""
    monkeypatch.setattr(torch_profiler_module, "_WARNINGS_SHOWN", set(), raising=False)


def python_export_bytes(prof: Any, path: Path) -> bytes:
    """What torch's Python exporter writes for ``prof`` at ``path`` (the file is removed)."""
    torch_python_export(prof.profiler.kineto_results, str(path), prof._trace_metadata)
    data = path.read_bytes()
    path.unlink()
    return data


def reset_warn_once() -> None:
    getattr(torch_profiler_module, "_WARNINGS_SHOWN", set()).clear()


class Run:
    """One profiled loop: what on_trace_ready saw, the warnings, and the profiler."""

    def __init__(
        self,
        cls: type,
        sched: Callable[[int], ProfilerAction] | None,
        steps: int,
        scratch: Path,
        **kwargs: Any,
    ) -> None:
        self.scratch = scratch
        self.calls: list[tuple[int, ProfilerAction, list[str]]] = []
        self.step_tracked: list[bool] = []
        reset_warn_once()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with cls(
                activities=CPU, schedule=sched, on_trace_ready=self.on_ready, **kwargs
            ) as prof:
                for _ in range(steps):
                    work()
                    self.step_tracked.append("ProfilerStep" in KinetoStepTracker._step_dict)
                    prof.step()
        self.warnings = [(w.category, str(w.message)) for w in caught]
        self.prof = prof
        self.tracked_after = "ProfilerStep" in KinetoStepTracker._step_dict

    def on_ready(self, prof: Any) -> None:
        """Record the step, the action and the step annotations of the cycle's trace (as
        torch's Python exporter writes it) and its ``events()``."""
        trace = json.loads(python_export_bytes(prof, self.scratch / "cycle.json"))
        steps = sorted(
            e["name"] for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")
        )
        assert len(steps) == sum(e.name == "ProfilerStep*" for e in prof.events())
        self.calls.append((prof.step_num, prof.current_action, steps))


def custom_schedule(actions: list[ProfilerAction]) -> Callable[[int], ProfilerAction]:
    return lambda step: actions[step] if step < len(actions) else N


SCHEDULES: dict[str, tuple[Callable[[], Any], int]] = {
    "default": (lambda: None, 3),
    "cycles": (lambda: schedule(wait=1, warmup=1, active=2, repeat=2), 10),
    "skip_first": (lambda: schedule(wait=0, warmup=1, active=1, skip_first=2), 7),
    "torch_schedule": (lambda: torch.profiler.schedule(wait=1, warmup=1, active=1), 6),
    "incorrect": (lambda: custom_schedule([N, W, N, R, W, W, R, N, R, S, S, N]), 12),
}


def test_only_export_and_add_metadata_are_overridden() -> None:
    assert issubclass(profile, torch.profiler.profile)
    own = {name for name in vars(profile) if not name.startswith("__")}
    # add_metadata: the same text where torch's is valid JSON, escaped where it is not.
    assert own == {"export_chrome_trace", "add_metadata"}
    assert set(vars(profile)) - own <= {
        "__init__",
        "__doc__",
        "__module__",
        "__qualname__",
        "__firstlineno__",
        "__static_attributes__",
    }


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_lifecycle_matches_torch(name: str, tmp_path: Path) -> None:
    make, steps = SCHEDULES[name]
    theirs = Run(torch.profiler.profile, make(), steps, tmp_path)
    ours = Run(profile, make(), steps, tmp_path)
    assert ours.calls == theirs.calls
    assert ours.calls, "on_trace_ready never ran"
    assert ours.warnings == theirs.warnings
    assert ours.step_tracked == theirs.step_tracked == [True] * steps
    assert not ours.tracked_after and not theirs.tracked_after
    assert ours.prof.step_num == theirs.prof.step_num == steps
    ours_table = ours.prof.key_averages().table(row_limit=-1).splitlines()
    theirs_table = theirs.prof.key_averages().table(row_limit=-1).splitlines()
    assert len(ours_table) == len(theirs_table)
    assert ours_table[:3] == theirs_table[:3]  # the header
    assert sorted(e.key for e in ours.prof.key_averages()) == sorted(
        e.key for e in theirs.prof.key_averages()
    )


def test_lifecycle_expected_values(tmp_path: Path) -> None:
    """What the differential test compares, checked against known values."""
    run = Run(profile, SCHEDULES["cycles"][0](), 10, tmp_path)
    assert run.calls == [
        (4, N, ["ProfilerStep#2", "ProfilerStep#3"]),
        (8, N, ["ProfilerStep#6", "ProfilerStep#7"]),
    ]
    assert run.warnings == [
        (
            UserWarning,
            "Warning: " + CLEARS_EVENTS + ". Only events from "
            "the current cycle will be reported. To keep events across "
            "cycles, set acc_events=True.",
        )
    ]
    bad = Run(profile, SCHEDULES["incorrect"][0](), 12, tmp_path)
    assert [m for _, m in bad.warnings if m.startswith("Incorrect")] == [
        "Incorrect schedule: WARMUP followed by NONE",
        "Incorrect schedule: RECORD followed by WARMUP",
        "Incorrect schedule: RECORD followed by NONE",
    ]
    assert [step for step, _, _ in bad.calls] == [10, 11]


def test_trace_equals_torch_python_export(tmp_path: Path) -> None:
    prof = profile(
        activities=CPU, record_shapes=True, schedule=schedule(wait=0, warmup=1, active=2)
    )
    prof.preset_metadata_json("preset", '{"a": [1, 2]}')
    with prof:
        for _ in range(2):  # steps 0 (warmup), 1 and 2 (recorded; saved on exit)
            work()
            prof.step()
        prof.add_metadata("user", 'say "hi"')
        prof.add_metadata_json("user_json", '{"k": 1}')
    path = tmp_path / "trace.json"
    expected = python_export_bytes(prof, path)
    stats = prof.export_chrome_trace(str(path))
    assert path.read_bytes() == expected
    assert stats.path == str(path)
    trace = json.loads(expected)
    assert trace["preset"] == {"a": [1, 2]} and trace["user"] == 'say "hi"'
    assert trace["user_json"] == {"k": 1} and trace["record_shapes"] == 1
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"ProfilerStep#1", "ProfilerStep#2", "aten::add"} <= names


def test_gzip_trace_equals_torch_python_export(tmp_path: Path) -> None:
    with profile(activities=CPU) as prof:
        work()
    path = tmp_path / "trace.json.gz"
    expected = gzip.decompress(python_export_bytes(prof, path))
    prof.export_chrome_trace(path)  # a PathLike works too
    assert gzip.decompress(path.read_bytes()) == expected


def test_every_cycle_equals_torch_python_export(tmp_path: Path) -> None:
    results: list[tuple[bytes, bytes]] = []

    def on_ready(prof: Any) -> None:
        path = tmp_path / f"cycle{prof.step_num}.json"
        expected = python_export_bytes(prof, path)
        prof.export_chrome_trace(str(path))
        results.append((path.read_bytes(), expected))

    with pytest.warns(UserWarning, match=CLEARS_EVENTS):
        with profile(
            activities=CPU,
            schedule=schedule(wait=1, warmup=1, active=1, repeat=3),
            on_trace_ready=on_ready,
        ) as prof:
            for _ in range(9):
                work()
                prof.step()
    assert len(results) == 3
    for got, expected in results:
        assert got == expected


def test_export_uses_kinetrace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    real = _export.export_chrome_trace

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(_export, "export_chrome_trace", spy)
    with profile(activities=CPU) as prof:
        work()
    path = tmp_path / "t.json.gz"
    prof.export_chrome_trace(str(path), use_python_export=True, compresslevel=1, threads=1)
    # The caller's settings, and kinetrace's defaults for the rest.
    assert calls == [
        (
            (prof, str(path), None),
            {
                "annotations": None,
                "graph_lanes": "none",
                "default_stream": 7,
                "compresslevel": 1,
                "threads": 1,
                "background": False,
            },
        )
    ]
    assert json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


class TorchExportRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, prof: Any, path: Any, **kwargs: Any) -> str:
        self.calls.append((prof, path, kwargs))
        return "torch"


@needs_graph_lanes
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"use_python_export": True},
        {"cuda_graph_annotations": {}},  # empty: no annotations, as in torch
        {"cuda_graph_annotations": {7: {"name": "x"}}},
        {"graph_lanes": "all", "cuda_graph_annotations": {7: {}}, "default_stream": 3},
    ],
)
def test_graph_annotations_stay_in_kinetrace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any]
) -> None:
    recorder = TorchExportRecorder()
    monkeypatch.setattr(_profiler._KINETO_OWNER, "export_chrome_trace", recorder)
    with profile(activities=CPU) as prof:
        work()
    path = tmp_path / "t.json"
    annotations = kwargs.get("cuda_graph_annotations")
    graph_lanes = kwargs.get("graph_lanes", "none")
    torch_python_export(
        prof.profiler.kineto_results,
        str(path),
        prof._trace_metadata,
        annotations,
        graph_lanes,
        kwargs.get("default_stream", 7),
    )
    expected = path.read_bytes()
    path.unlink()
    outcome = prof.export_chrome_trace(str(path), **kwargs)
    assert recorder.calls == []
    assert isinstance(outcome, _export.ExportStats)
    assert path.read_bytes() == expected


@needs_graph_lanes
def test_invalid_graph_lanes_raise_torchs_error(tmp_path: Path) -> None:
    with profile(activities=CPU) as prof:
        work()
    with pytest.raises(ValueError, match="graph_lanes must be 'all' or 'none'"):
        prof.export_chrome_trace(str(tmp_path / "t.json"), graph_lanes="sideways")


def test_export_before_start_raises_like_torch(tmp_path: Path) -> None:
    path = str(tmp_path / "t.json")
    with pytest.raises(AssertionError) as theirs:
        torch.profiler.profile(activities=CPU).export_chrome_trace(path)
    with pytest.raises(AssertionError) as ours:
        profile(activities=CPU).export_chrome_trace(path)
    assert str(ours.value) == str(theirs.value)
    assert not os.path.exists(path)


def test_export_while_running_raises(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    with profile(activities=CPU) as prof:
        work()
        with pytest.raises(RuntimeError, match="has not stopped"):
            prof.export_chrome_trace(str(path))
    assert not path.exists()


def test_arguments_are_forwarded() -> None:
    with pytest.raises(TypeError, match="bogus") as theirs:
        torch.profiler.profile(bogus=1)
    with pytest.raises(TypeError, match="bogus") as ours:
        profile(bogus=1)
    assert type(ours.value) is type(theirs.value)
    prof = profile(
        activities=CPU,
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_flops=True,
        acc_events=True,
        custom_trace_id_callback=lambda: "ID7",
    )
    assert (
        prof.record_shapes,
        prof.profile_memory,
        prof.with_stack,
        prof.with_flops,
        prof.acc_events,
    ) == (True, True, True, True, True)
    if "post_processing_timeout_s" in TORCH_INIT_PARAMETERS:  # torch 2.15
        assert profile(post_processing_timeout_s=30.0).post_processing_timeout_s == 30.0
    with prof:
        work()
    assert prof.get_trace_id() == "ID7"


def test_positional_arguments_rejected_like_torch() -> None:
    with pytest.raises(TypeError):
        torch.profiler.profile(CPU)
    with pytest.raises(TypeError):
        profile(CPU)


def test_use_cuda_false_drops_cuda() -> None:
    with pytest.warns(FutureWarning, match="`use_cuda` is deprecated"):
        prof = profile(use_cuda=False, activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    assert prof.activities == {ProfilerActivity.CPU}
    with pytest.warns(FutureWarning, match="`use_cuda` is deprecated"):
        prof = profile(use_cuda=False)
    assert ProfilerActivity.CUDA not in prof.activities


def test_use_cuda_true_adds_cuda() -> None:
    assert _profiler._activities_for_use_cuda([ProfilerActivity.CPU], True) == [
        ProfilerActivity.CPU,
        ProfilerActivity.CUDA,
    ]
    assert _profiler._activities_for_use_cuda(
        [ProfilerActivity.CPU, {ProfilerActivity.CUDA: ["kernel"]}], True
    ) == [ProfilerActivity.CPU, {ProfilerActivity.CUDA: ["kernel"]}]
    assert _profiler._activities_for_use_cuda(
        [ProfilerActivity.CPU, {ProfilerActivity.CUDA: ["kernel"]}], False
    ) == [ProfilerActivity.CPU]


def test_execution_trace_observer(tmp_path: Path) -> None:
    def names(cls: type, path: Path) -> set[str]:
        observer = ExecutionTraceObserver().register_callback(str(path))
        with cls(activities=CPU, execution_trace_observer=observer):
            work()
        return {node["name"] for node in json.loads(path.read_text())["nodes"]}

    theirs = names(torch.profiler.profile, tmp_path / "torch_et.json")
    ours = names(profile, tmp_path / "et.json")
    assert ours == theirs
    assert "aten::add" in ours


def test_events_and_key_averages(tmp_path: Path) -> None:
    with profile(activities=CPU, record_shapes=True) as prof:
        work()
    assert "aten::add" in {e.name for e in prof.events()}
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert any(e.key == "aten::add" and e.input_shapes == [[8], [8], []] for e in by_shape)
    stacks = tmp_path / "stacks.txt"
    with profile(activities=CPU, with_stack=True) as prof:
        work()
    prof.export_stacks(str(stacks))
    assert stacks.exists()


def test_export_memory_timeline(tmp_path: Path) -> None:
    with profile(activities=CPU, record_shapes=True, profile_memory=True, with_stack=True) as prof:
        work()
    path = tmp_path / "memory.json"
    with pytest.warns(FutureWarning, match="export_memory_timeline"):
        prof.export_memory_timeline(str(path))
    times, sizes = json.loads(path.read_text())
    assert times and len(sizes) == len(times)


# ---------------------------------------------------------------------------------------
# tensorboard_trace_handler
# ---------------------------------------------------------------------------------------


def traces(directory: Path) -> list[Path]:
    return sorted(directory.iterdir(), key=lambda p: int(TRACE_NAME.match(p.name)["ns"]))


@pytest.mark.parametrize("cls", [profile, torch.profiler.profile], ids=["kinetrace", "torch"])
@pytest.mark.parametrize("use_gzip", [False, True])
def test_handler_files(tmp_path: Path, cls: type, use_gzip: bool) -> None:
    directory = tmp_path / "log" / "run1"
    expected: list[bytes] = []
    handler = tensorboard_trace_handler(str(directory), use_gzip=use_gzip)

    def on_ready(prof: Any) -> None:
        before = set(directory.iterdir()) if directory.exists() else set()
        assert handler(prof) is not None
        (new,) = set(directory.iterdir()) - before
        written = new.read_bytes()
        reference = python_export_bytes(prof, new)
        expected.append(reference if not use_gzip else gzip.decompress(reference))
        new.write_bytes(written)

    with pytest.warns(UserWarning, match=CLEARS_EVENTS):
        with cls(
            activities=CPU,
            schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
            on_trace_ready=on_ready,
        ) as prof:
            for _ in range(5):
                work()
                prof.step()
    files = traces(directory)
    assert len(files) == 2 == len(expected)
    worker = f"{socket.gethostname()}_{os.getpid()}"
    for path, reference in zip(files, expected, strict=True):
        match = TRACE_NAME.match(path.name)
        assert match["worker"] == worker
        assert bool(match["gz"]) == use_gzip
        if use_gzip:
            assert path.read_bytes()[:2] == b"\x1f\x8b"
        assert read_trace(path) == reference


def test_handler_worker_name(tmp_path: Path) -> None:
    handler = tensorboard_trace_handler(tmp_path, worker_name="rank3")
    with profile(activities=CPU, on_trace_ready=handler):
        work()
    (path,) = tmp_path.iterdir()
    assert TRACE_NAME.match(path.name)["worker"] == "rank3"
    assert json.loads(path.read_text())["traceEvents"]


def test_handler_directory_error_matches_torch(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = str(blocker / "sub")
    with profile(activities=CPU) as prof:
        work()
    with pytest.raises(RuntimeError) as theirs:
        torch.profiler.tensorboard_trace_handler(bad)(prof)
    with pytest.raises(RuntimeError) as ours:
        tensorboard_trace_handler(bad)(prof)
    assert str(ours.value) == str(theirs.value) == "Can't create directory: " + bad
    assert type(ours.value.__cause__) is type(theirs.value.__cause__)
    assert isinstance(ours.value.__cause__, OSError)


def test_handler_export_error_propagates(tmp_path: Path) -> None:
    with profile(activities=CPU) as prof:
        work()
    with pytest.raises(FileNotFoundError):
        tensorboard_trace_handler(tmp_path, worker_name="missing/w")(prof)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def no_pending_exports() -> Iterator[None]:
    yield
    kinetrace.wait()


@pytest.mark.usefixtures("no_pending_exports")
def test_background_handler(tmp_path: Path) -> None:
    handles: list[Any] = []
    expected: dict[int, bytes] = {}
    handler = tensorboard_trace_handler(tmp_path / "tb", worker_name="w", background=True)

    def on_ready(prof: Any) -> None:
        reference = tmp_path / "reference.json"
        expected[prof.step_num] = python_export_bytes(prof, reference)
        handles.append((prof.step_num, handler(prof)))

    with pytest.warns(UserWarning, match=CLEARS_EVENTS):
        with profile(
            activities=CPU,
            schedule=schedule(wait=0, warmup=1, active=1, repeat=3),
            on_trace_ready=on_ready,
        ) as prof:
            for _ in range(7):
                work()
                prof.step()
    kinetrace.wait()
    assert len(handles) == 3
    assert all(handle.done() for _, handle in handles)
    files = traces(tmp_path / "tb")
    assert len(files) == 3
    for (step, handle), path in zip(handles, files, strict=True):
        stats = handle.result(timeout=0)
        assert stats.path == str(path)
        # the same bytes as torch's Python exporter, bar the file name inside
        got = path.read_bytes().replace(str(path).encode(), b"<path>")
        want = expected[step].replace(str(tmp_path / "reference.json").encode(), b"<path>")
        assert got == want
    assert {p.name for p in (tmp_path / "tb").iterdir()} == {p.name for p in files}


@pytest.mark.usefixtures("no_pending_exports")
def test_background_handler_error_surfaces_from_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error while the file is written (here ENOSPC: the trace's name is a link to
    /dev/full) comes out of the handle the handler returned."""
    with profile(activities=CPU) as prof:
        work()
    (tmp_path / "w.1234.pt.trace.json").symlink_to("/dev/full")
    handler = tensorboard_trace_handler(tmp_path, worker_name="w", background=True)
    with monkeypatch.context() as patched:
        patched.setattr(time, "time_ns", lambda: 1234)
        handle = handler(prof)
    with pytest.raises(OSError) as info:
        handle.result(timeout=30)
    assert info.value.errno == errno.ENOSPC
    assert handle.done()
    # The error was raised by result(): wait() never raises it again (reported once).
    assert kinetrace.wait() == []


@pytest.mark.usefixtures("no_pending_exports")
def test_profile_export_background(tmp_path: Path) -> None:
    with profile(activities=CPU) as prof:
        work()
    path = tmp_path / "t.json"
    expected = python_export_bytes(prof, path)
    handle = prof.export_chrome_trace(str(path), background=True)
    assert handle.result(timeout=30).path == str(path)
    assert path.read_bytes() == expected


def test_add_metadata_is_escaped_as_json(tmp_path):
    """kinetrace.profile.add_metadata keeps a Windows path intact (torch's makes the file
    invalid) and writes plain text exactly as torch does."""
    with kinetrace.profile() as prof:
        torch.ones(2).add_(1)
    prof.add_metadata("path", "C:\\dir\\x\\")
    prof.add_metadata("note", 'plain "quoted" é text')
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert trace["path"] == "C:\\dir\\x\\"
    assert trace["note"] == 'plain "quoted" é text'
    assert prof._trace_metadata["note"] == '"' + 'plain "quoted" é text'.replace('"', '\\"') + '"'


def test_the_lazily_imported_names_are_the_profiler_modules_own() -> None:
    """``kinetrace`` names the profiler API without importing torch (``_PROFILER_NAMES``, for
    its lazy ``__getattr__``): a name added to the module but not there would be missing
    from ``kinetrace``, one left there after removal would raise AttributeError late."""
    assert kinetrace._PROFILER_NAMES == set(_profiler.__all__)
    for name in _profiler.__all__:
        assert getattr(kinetrace, name) is getattr(_profiler, name)
