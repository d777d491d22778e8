"""Test helpers: fake profiler activities and the differential ``compare`` against torch.

``FakeActivity`` mimics ``torch._C._autograd._ITraceActivity`` (the objects that
``_ProfilerResult.trace_activities()`` returns) and counts how often each accessor is called,
so tests can check what kinetrace reads. ``FakeResult`` mimics the ``_ProfilerResult``.

The builders produce activity sets in the shapes a CUDA / distributed run records (kernels,
runtime launches with ``ac2g`` flows, memcpy/memset, comms kernels, ...), which cannot be
recorded on a CPU-only machine.

``compare`` runs torch's own Python exporter and kinetrace on the same result and asserts the
two files are byte-identical.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch.profiler._chrome_trace_export as torch_export

import kinetrace
from kinetrace._kinetrace import trimonth_base_ns

#: The exporting process: both exporters label ``device_id == os.getpid()`` as the CPU.
PID = os.getpid()

#: The accessors of ``_ITraceActivity``.
FIELDS = (
    "name",
    "type",
    "device_id",
    "resource_id",
    "timestamp",
    "duration",
    "correlation_id",
    "linked_correlation_id",
    "flow_id",
    "flow_type",
    "flow_start",
    "metadata_json",
    "linked_activity",
)

#: Categories whose own correlation id is not written as "External id" (torch's list).
EXCLUDED_CATEGORIES = frozenset(
    {
        "gpu_memcpy",
        "gpu_memset",
        "kernel",
        "cuda_runtime",
        "cuda_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
    }
)

TRIMONTH_NS = 7_889_238 * 1_000_000_000

#: A realistic epoch time (late 2026) well inside a trimonth interval, and that interval's base.
T0 = 1_796_028_311_502_385_758
BASE = trimonth_base_ns(T0)
assert BASE < T0 < BASE + TRIMONTH_NS


class Raise:
    """A field value that makes the accessor raise ``exc`` instead of returning."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class FakeActivity:
    """An ``_ITraceActivity`` look-alike that counts calls per accessor in ``calls``."""

    def __init__(
        self,
        *,
        name: Any = "aten::add",
        type: Any = "cpu_op",
        device_id: Any = PID,
        resource_id: Any = PID,
        timestamp: Any = T0,
        duration: Any = 1000,
        correlation_id: Any = 0,
        linked_correlation_id: Any = 0,
        flow_id: Any = 0,
        flow_type: Any = 0,
        flow_start: Any = False,
        metadata_json: Any = "",
        linked_activity: Any = None,
    ) -> None:
        self.values: dict[str, Any] = {
            "name": name,
            "type": type,
            "device_id": device_id,
            "resource_id": resource_id,
            "timestamp": timestamp,
            "duration": duration,
            "correlation_id": correlation_id,
            "linked_correlation_id": linked_correlation_id,
            "flow_id": flow_id,
            "flow_type": flow_type,
            "flow_start": flow_start,
            "metadata_json": metadata_json,
            "linked_activity": linked_activity,
        }
        self.calls: Counter[str] = Counter()

    def peek(self, field: str) -> Any:
        """The value of ``field`` without counting a call."""
        return self.values[field]

    def _get(self, field: str) -> Any:
        self.calls[field] += 1
        value = self.values[field]
        if isinstance(value, Raise):
            raise value.exc
        return value

    def name(self) -> Any:
        return self._get("name")

    def type(self) -> Any:
        return self._get("type")

    def device_id(self) -> Any:
        return self._get("device_id")

    def resource_id(self) -> Any:
        return self._get("resource_id")

    def timestamp(self) -> Any:
        return self._get("timestamp")

    def duration(self) -> Any:
        return self._get("duration")

    def correlation_id(self) -> Any:
        return self._get("correlation_id")

    def linked_correlation_id(self) -> Any:
        return self._get("linked_correlation_id")

    def flow_id(self) -> Any:
        return self._get("flow_id")

    def flow_type(self) -> Any:
        return self._get("flow_type")

    def flow_start(self) -> Any:
        return self._get("flow_start")

    def metadata_json(self) -> Any:
        return self._get("metadata_json")

    def linked_activity(self) -> Any:
        return self._get("linked_activity")

    def __repr__(self) -> str:
        v = self.values
        name = v["name"] if not isinstance(v["name"], str) or len(v["name"]) < 60 else "<long>"
        return f"FakeActivity({v['type']!r}, {name!r}, did={v['device_id']}, ts={v['timestamp']})"


class FakeResult:
    """A ``_ProfilerResult`` look-alike: ``trace_activities()`` returns the same list object
    on every call, ``trace_start_ns()`` a fixed start."""

    def __init__(self, activities: Sequence[Any], trace_start_ns: int | None = None) -> None:
        self.activities = list(activities)
        if trace_start_ns is None:
            stamps = [a.peek("timestamp") for a in self.activities if isinstance(a, FakeActivity)]
            stamps = [t for t in stamps if isinstance(t, int)]
            trace_start_ns = min(stamps) if stamps else T0
        self.start_ns = trace_start_ns
        self.trace_activities_calls = 0

    def trace_activities(self) -> list[Any]:
        self.trace_activities_calls += 1
        return self.activities

    def trace_start_ns(self) -> int:
        return self.start_ns

    def all_activities(self) -> list[FakeActivity]:
        """The listed activities and every activity linked from them (each object once)."""
        seen: dict[int, FakeActivity] = {}
        for act in self.activities:
            seen.setdefault(id(act), act)
            linked = act.peek("linked_activity")
            if isinstance(linked, FakeActivity):
                seen.setdefault(id(linked), linked)
        return list(seen.values())

    def reset_counts(self) -> None:
        for act in self.all_activities():
            act.calls.clear()
        self.trace_activities_calls = 0


# --------------------------------------------------------------------------------------------
# Builders of GPU-shaped activity sets
# --------------------------------------------------------------------------------------------


class Clock:
    """Hands out increasing timestamps starting at ``start``."""

    def __init__(self, start: int = T0 + 1_234_567) -> None:
        self.now = start

    def __call__(self, step: int = 1_537) -> int:
        self.now += step
        return self.now


def kernel_metadata(stream: int, correlation: int, device: int = 0) -> str:
    return (
        f'"queued": 0, "device": {device}, "context": 1, "stream": {stream}, '
        f'"correlation": {correlation}, "registers per thread": 32, "shared memory": 0, '
        f'"blocks per SM": 0.5, "warps per SM": 2, "grid": [1, 1, 1], "block": [64, 1, 1], '
        f'"est. achieved occupancy %": 3'
    )


def launch_set(
    n: int = 6, *, device: int = 0, stream: int = 7, tid: int = PID
) -> list[FakeActivity]:
    """cpu_op -> cuda_runtime launch -> kernel, joined by ``ac2g`` flows (type 2, start on the
    runtime side, finish on the kernel) and linked correlation ids."""
    clock = Clock()
    acts: list[FakeActivity] = []
    kernels: list[FakeActivity] = []
    for i in range(n):
        corr = 100 + i
        op = FakeActivity(
            name="aten::mm",
            type="cpu_op",
            device_id=PID,
            resource_id=tid,
            timestamp=clock(),
            duration=9_000,
            correlation_id=corr - 90,
            metadata_json=f'"Record function id": 0, "Ev Idx": {i}',
        )
        runtime = FakeActivity(
            name="cudaLaunchKernel",
            type="cuda_runtime",
            device_id=PID,
            resource_id=tid,
            timestamp=clock(211),
            duration=4_321,
            correlation_id=corr,
            linked_correlation_id=corr - 90,
            flow_id=corr,
            flow_type=2,
            flow_start=True,
            metadata_json=f'"cbid": 211, "correlation": {corr}',
        )
        kernel = FakeActivity(
            name="void gemm<float, 64>(float const*, float*)",
            type="kernel",
            device_id=device,
            resource_id=stream,
            timestamp=clock(7_000),
            duration=2_048,
            correlation_id=corr,
            linked_correlation_id=corr - 90,
            flow_id=corr,
            flow_type=2,
            flow_start=False,
            metadata_json=kernel_metadata(stream, corr, device),
            linked_activity=op,
        )
        acts += [op, runtime]
        kernels.append(kernel)
    # Kineto lists device activities after the host ones.
    return acts + kernels


def memcpy_memset_set() -> list[FakeActivity]:
    clock = Clock()
    acts = []
    for i, (cat, name, rt) in enumerate(
        [
            ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", "cudaMemcpyAsync"),
            ("gpu_memset", "Memset (Device)", "cudaMemsetAsync"),
            ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", "cudaMemcpyAsync"),
            ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "cudaMemcpyAsync"),
        ]
    ):
        corr = 500 + i
        acts.append(
            FakeActivity(
                name=rt,
                type="cuda_runtime",
                timestamp=clock(),
                duration=800,
                correlation_id=corr,
                flow_id=corr,
                flow_type=2,
                flow_start=True,
                metadata_json=f'"cbid": 41, "correlation": {corr}',
            )
        )
        acts.append(
            FakeActivity(
                name=name,
                type=cat,
                device_id=0,
                resource_id=7 + (i % 2) * 6,
                timestamp=clock(3_000),
                duration=1_999,
                correlation_id=corr,
                flow_id=corr,
                flow_type=2,
                flow_start=False,
                metadata_json=(
                    f'"device": 0, "context": 1, "stream": {7 + (i % 2) * 6}, '
                    f'"correlation": {corr}, "bytes": 4096, "memory bandwidth (GB/s)": 1.3653'
                ),
            )
        )
    acts.append(
        FakeActivity(
            name="cuda_driver_call",
            type="cuda_driver",
            timestamp=clock(),
            correlation_id=777,
            metadata_json='"cbid": 7',
        )
    )
    acts.append(
        FakeActivity(
            name="prv_rt", type="privateuse1_runtime", timestamp=clock(), correlation_id=778
        )
    )
    acts.append(
        FakeActivity(
            name="prv_drv", type="privateuse1_driver", timestamp=clock(), correlation_id=779
        )
    )
    return acts


def fwdbwd_set() -> list[FakeActivity]:
    """Forward ops start a ``fwdbwd`` flow (type 1), the autograd thread's backward ops end it."""
    clock = Clock()
    fwd, bwd = [], []
    for i in range(4):
        seq = 40 + i
        fwd.append(
            FakeActivity(
                name="aten::linear",
                timestamp=clock(),
                duration=5_000,
                correlation_id=10 + i,
                flow_id=seq,
                flow_type=1,
                flow_start=True,
                metadata_json=f'"Sequence number": {seq}, "Fwd thread id": 0',
            )
        )
    for i in reversed(range(4)):
        seq = 40 + i
        bwd.append(
            FakeActivity(
                name="autograd::engine::evaluate_function: AddmmBackward0",
                resource_id=PID + 3,
                timestamp=clock(),
                duration=6_000,
                correlation_id=30 + i,
                flow_id=seq,
                flow_type=1,
                flow_start=False,
                metadata_json=f'"Sequence number": {seq}, "Fwd thread id": 1',
            )
        )
    return fwd + bwd


COMMS_METADATA = (
    '"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024, '
    '"Out msg nelems": 1024, "Group size": 2, "In split size": "[]", "Out split size": "[]", '
    '"Process Group Name": "0", "Process Group Description": "default_pg", '
    '"Process Group Ranks": "[0, 1]", "Rank": 0'
)


def comms_set() -> tuple[list[FakeActivity], list[FakeActivity]]:
    """Kernels linked to a ``record_param_comms`` cpu_op (whose metadata they carry), to a
    non-comms cpu_op, to None; plus a comms op with empty / whitespace metadata.

    Returns (activities, the linked cpu_ops that are in the list)."""
    clock = Clock()
    comms = FakeActivity(
        name="record_param_comms",
        timestamp=clock(),
        duration=30_000,
        correlation_id=900,
        metadata_json=COMMS_METADATA,
    )
    comms_empty = FakeActivity(
        name="record_param_comms", timestamp=clock(), correlation_id=901, metadata_json=""
    )
    # Whitespace-only metadata is valid for torch only as the sole args part.
    comms_blank = FakeActivity(
        name="record_param_comms", timestamp=clock(), correlation_id=0, metadata_json="  "
    )
    other = FakeActivity(
        name="aten::mm", timestamp=clock(), correlation_id=903, metadata_json='"x": 1'
    )
    # A linked activity that is not itself in the list (Kineto may link outside the window).
    outside = FakeActivity(
        name="record_param_comms",
        timestamp=clock(),
        metadata_json='"Collective name": "broadcast", "Rank": 1',
    )

    def nccl(name: str, linked: Any, corr: int, md: str | None = None) -> FakeActivity:
        return FakeActivity(
            name=name,
            type="kernel",
            device_id=0,
            resource_id=20,
            timestamp=clock(5_000),
            duration=12_345,
            correlation_id=corr,
            linked_correlation_id=corr - 1 if corr % 2 else 0,
            metadata_json=kernel_metadata(20, corr) if md is None else md,
            linked_activity=linked,
        )

    kernels = [
        nccl(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", comms, 1001
        ),
        nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", comms, 1002, md=""),
        nccl("ncclDevKernel_Broadcast", outside, 1003),
        nccl("nccl_empty_linked_md", comms_empty, 1004),
        nccl("nccl_blank_linked_md_alone", comms_blank, 1010, md=""),
        nccl("gemm_linked_to_mm", other, 1006),
        nccl("kernel_linked_to_none", None, 1007),
        nccl("kernel_no_md_linked_none", None, 1008, md=""),
    ]
    return [comms, comms_empty, comms_blank, other, *kernels], [
        comms,
        comms_empty,
        comms_blank,
        other,
    ]


def annotation_instant_overhead_set() -> list[FakeActivity]:
    clock = Clock()
    return [
        FakeActivity(
            name="ProfilerStep#3",
            type="user_annotation",
            timestamp=clock(),
            duration=90_000,
            correlation_id=1,
        ),
        FakeActivity(
            name="ProfilerStep#3",
            type="gpu_user_annotation",
            device_id=0,
            resource_id=7,
            timestamp=clock(),
            duration=80_000,
            correlation_id=1,
            linked_correlation_id=0,
        ),
        FakeActivity(
            name="[memory]",
            type="cpu_instant_event",
            timestamp=clock(),
            duration=0,
            metadata_json=(
                '"Total Reserved": 0, "Total Allocated": 36, "Bytes": 36, "Device Id": -1, '
                '"Device Type": 0, "Addr": 94916738649408, "finished": false, "Ev Idx": 23'
            ),
        ),
        FakeActivity(
            name="[memory]",
            type="cpu_instant_event",
            timestamp=clock(),
            duration=-1,
            correlation_id=12,
        ),
        FakeActivity(
            name="Buffer Flush",
            type="overhead",
            device_id=-1,
            resource_id=0,
            timestamp=clock(),
            duration=3_000,
        ),
        FakeActivity(
            name="Resource Overhead",
            type="overhead",
            device_id=-3,
            resource_id=-7,
            timestamp=clock(),
            duration=1,
        ),
        FakeActivity(
            name="CUDA profiling range",
            type="cuda_profiler_range",
            device_id=0,
            resource_id=0,
            timestamp=clock(),
            duration=10,
        ),
        FakeActivity(
            name="cudaStreamSynchronize",
            type="cuda_sync",
            device_id=0,
            resource_id=7,
            timestamp=clock(),
            duration=500,
            correlation_id=3,
            metadata_json='"cuda_sync_kind": "stream_sync", "stream": 7',
        ),
        FakeActivity(
            name="python_function_x.py(12): f",
            type="python_function",
            timestamp=clock(),
            duration=77,
            metadata_json='"Python parent id": 3, "Python id": 4, "Python thread": 0',
        ),
    ]


def odd_ids_set() -> list[FakeActivity]:
    """Resource ids at the int64 extremes, above 2**32, negative; odd device ids."""
    clock = Clock()
    specs = [
        (PID, -(2**63)),
        (PID, 2**63 - 1),
        (PID, 2**32 + 5),
        (PID, -5),
        (PID, 5),  # same sanitised tid as -5
        (PID, 0),
        (0, -(2**63)),
        (0, 2**40),
        (3, -9),
        (2**31, 1),
        (2**63 - 1, 2),
        (-1, -(2**63)),
        (-(2**63), 4),
        (PID + 1, 6),  # some other process: labelled a GPU, as torch does
    ]
    return [
        FakeActivity(
            name=f"op{i}", device_id=did, resource_id=rid, timestamp=clock(), correlation_id=i
        )
        for i, (did, rid) in enumerate(specs)
    ]


def durations_set() -> list[FakeActivity]:
    clock = Clock()
    return [
        FakeActivity(name="zero", timestamp=clock(), duration=0),
        FakeActivity(name="negative", timestamp=clock(), duration=-1),
        FakeActivity(name="very negative", timestamp=clock(), duration=-(2**63)),
        FakeActivity(name="sub-us", timestamp=clock(), duration=999),
        FakeActivity(name="one-us", timestamp=clock(), duration=1000),
        FakeActivity(name="huge", timestamp=clock(), duration=2**62),
        FakeActivity(
            name="kernel neg",
            type="kernel",
            device_id=0,
            resource_id=7,
            timestamp=clock(),
            duration=-5,
        ),
    ]


#: Names that need escaping, in every way json.dumps escapes.
TRICKY_NAMES = [
    "",
    " ",
    'q"uote',
    "back\\slash",
    "C:\\dir\\x",
    "tab\there",
    "new\nline",
    "cr\rlf\n",
    "\x00\x01\x1f\x7f",
    "\b\f",
    "é à ü ß",
    "€ 漢字",
    "emoji 😀 🧪",
    "line sep \u2028 para sep \u2029",
    "lone high \ud800",
    "lone low \udfff",
    "pair as two surrogates \ud83d\ude00",
    "reversed pair \ude00\ud83d",
    "\ufeff bom \ufffd replacement \uffff",
    "</script>",
    '{"json": [1, 2]}',
    "\\u0041 not an escape",
    "NaN",
]


def names_set(names: Iterable[str] = TRICKY_NAMES) -> list[FakeActivity]:
    clock = Clock()
    acts = []
    for i, name in enumerate(names):
        acts.append(FakeActivity(name=name, timestamp=clock(), correlation_id=i + 1))
        acts.append(
            FakeActivity(
                name=name,
                type="kernel",
                device_id=0,
                resource_id=7,
                timestamp=clock(),
                linked_correlation_id=i + 1,
            )
        )
    return acts


def flow_types_set() -> list[FakeActivity]:
    clock = Clock()
    acts = []
    for i, (ftype, fstart) in enumerate(
        [(0, True), (1, False), (2, True), (3, False), (-1, True), (99, False), (2**40, True)]
    ):
        acts.append(
            FakeActivity(
                name=f"flow{ftype}",
                timestamp=clock(),
                flow_id=1000 + i,
                flow_type=ftype,
                flow_start=fstart,
            )
        )
    # Non-positive flow ids write no flow event, whatever their type.
    acts.append(
        FakeActivity(name="flow0", timestamp=clock(), flow_id=0, flow_type=1, flow_start=True)
    )
    acts.append(FakeActivity(name="flowneg", timestamp=clock(), flow_id=-4, flow_type=2))
    acts.append(
        FakeActivity(
            name="flowbig", timestamp=clock(), flow_id=2**63 - 1, flow_type=2, flow_start=True
        )
    )
    return acts


def metadata_set() -> list[FakeActivity]:
    """Valid fragments in many spellings; whitespace-only ones only where they are alone."""
    clock = Clock()
    frags = [
        "",
        "   ",  # alone (no External id): torch writes "args":{   }
        "\n\t ",
        '"a": 1',
        '"a":1,"b":[1,2,{"c":null}]',
        '  "padded" : true  ',
        '"nested": {"x": {"y": {"z": [[], {}]}}}',
        '"num": -0.5e-10, "big": 123456789012345678901234567890, "e": 1E+2',
        '"esc": "\\u00e9\\n\\t\\"\\\\\\/"',
        '"raw unicode": "é😀\u2028"',
        '"dup": 1, "dup": 2',
        '"newline between": 1,\n"members": 2',
        json.dumps({"k": "v", "list": [1.5, True, None]})[1:-1],
    ]
    return [
        FakeActivity(name=f"md{i}", timestamp=clock(), metadata_json=frag)
        for i, frag in enumerate(frags)
    ]


def chain(*sets: Iterable[FakeActivity]) -> list[FakeActivity]:
    """Concatenates sets, renumbering nothing (timestamps may interleave)."""
    out: list[FakeActivity] = []
    for s in sets:
        out.extend(s)
    return out


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------


def earliest_time(result: Any) -> int:
    """min(trace_start_ns, every timestamp), reading FakeActivity fields without counting."""
    stamps = []
    for act in result.trace_activities():
        stamps.append(act.peek("timestamp") if isinstance(act, FakeActivity) else act.timestamp())
    start = result.trace_start_ns()
    return min([start, *stamps]) if stamps else start


def expected_base(result: Any) -> int:
    return trimonth_base_ns(earliest_time(result))


def read_trace(path: str | os.PathLike[str]) -> bytes:
    """The JSON bytes of a trace file; a ``.gz`` one is decompressed (and must be one member)."""
    data = Path(path).read_bytes()
    if os.fspath(path).endswith(".gz"):
        return gzip.decompress(data)
    return data


def single_member_text(data: bytes) -> bytes:
    """Decompresses ``data`` as exactly one gzip member (what viewers read)."""
    d = zlib.decompressobj(31)
    text = d.decompress(data) + d.flush()
    assert d.eof, "gzip stream is truncated"
    assert d.unused_data == b"", f"{len(d.unused_data)} bytes after the first gzip member"
    return text


def first_difference(expected: bytes, actual: bytes) -> str:
    """A short description of where two outputs first differ (line and column)."""
    exp_lines = expected.split(b"\n")
    act_lines = actual.split(b"\n")
    for lineno, (e, a) in enumerate(zip(exp_lines, act_lines, strict=False), start=1):
        if e != a:
            col = next(
                (i for i, (x, y) in enumerate(zip(e, a, strict=False)) if x != y),
                min(len(e), len(a)),
            )
            lo = max(0, col - 150)
            return (
                f"first difference at line {lineno}, column {col + 1}:\n"
                f"  torch    : {e[lo : col + 150]!r}{' ...' if len(e) > col + 150 else ''}\n"
                f"  kinetrace: {a[lo : col + 150]!r}{' ...' if len(a) > col + 150 else ''}"
            )
    return (
        f"one output is a prefix of the other: torch {len(exp_lines)} lines / {len(expected)} "
        f"bytes, kinetrace {len(act_lines)} lines / {len(actual)} bytes"
    )


def assert_same_bytes(expected: bytes, actual: bytes) -> None:
    if expected != actual:
        pytest.fail(first_difference(expected, actual), pytrace=False)


def torch_bytes(
    result: Any,
    path: str,
    metadata: dict[str, str] | None = None,
    *,
    base: int | None,
) -> bytes:
    """Runs torch's Python exporter (with its wall-clock base replaced by ``base`` unless it
    is None), returns the JSON bytes and removes the file."""
    with pytest.MonkeyPatch.context() as mp:
        if base is not None:
            mp.setattr(torch_export, "_trimester_base_ns", lambda: base)
        torch_export.export_chrome_trace(result, path, metadata)
    try:
        return read_trace(path)
    finally:
        os.remove(path)


#: Worker counts every fidelity comparison also runs with (forked extraction, POSIX only).
WORKER_COUNTS = (2, 3) if hasattr(os, "fork") else ()


def compare(
    result: Any,
    tmp_path: Path,
    metadata: dict[str, str] | None = None,
    *,
    source: Any = None,
    base: int | str | None = "auto",
    name: str = "trace.json",
    **kinetrace_kwargs: Any,
) -> bytes:
    """Asserts torch's exporter and kinetrace write the same bytes for ``result``.

    ``base``: "auto" = the trimonth floor of the trace's earliest time, given to both
    exporters; an int = that base for both; None = each exporter's own default (torch: wall
    clock, kinetrace: the trace's own start) -- the normal case for real profiles.
    ``source``: what kinetrace exports (default ``result``; e.g. the profile object).
    Returns kinetrace's JSON bytes (decompressed for ``.gz``).
    """
    if base == "auto":
        base = expected_base(result)
    path = str(tmp_path / name)
    expected = torch_bytes(result, path, metadata, base=base)  # type: ignore[arg-type]
    kwargs = dict(kinetrace_kwargs)
    if base is not None:
        kwargs["base_time_ns"] = base
    if "workers" not in kwargs and not kwargs.get("background"):
        # Forked extraction must write the same text for any worker count. Run those first:
        # the read counts checked after compare() belong to the single-process export.
        for workers in WORKER_COUNTS:
            kinetrace.export_chrome_trace(
                result if source is None else source, path, metadata, workers=workers, **kwargs
            )
            data = Path(path).read_bytes()
            assert_same_bytes(expected, single_member_text(data) if name.endswith(".gz") else data)
        kwargs["workers"] = 1
    if isinstance(result, FakeResult):
        result.reset_counts()
    stats = kinetrace.export_chrome_trace(
        result if source is None else source, path, metadata, **kwargs
    )
    data = Path(path).read_bytes()
    actual = single_member_text(data) if name.endswith(".gz") else data
    assert_same_bytes(expected, actual)
    assert stats.uncompressed_bytes == len(actual)
    if is_strict_json(actual):
        assert stats.events == len(strict_loads(actual)["traceEvents"])
    assert stats.file_bytes == len(data)
    assert stats.path == path
    leftovers = [p.name for p in Path(path).parent.iterdir() if p.name.endswith(".kinetrace-tmp")]
    assert not leftovers, leftovers
    return actual


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` that rejects NaN / Infinity / -Infinity (what strict parsers do)."""

    def reject(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


def is_strict_json(text: str | bytes) -> bool:
    try:
        strict_loads(text)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return False
    return True


def activity_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The events written for activities (X and instant events on a numeric pid), in order."""
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") in ("X", "i") and isinstance(e.get("pid"), int) and "cat" in e
    ]


def json_string_identity(s: str) -> str:
    """What a JSON string round-trip can preserve of ``s``: a surrogate pair given as two
    lone surrogates reads back as the one character it encodes (``json.dumps`` writes both
    the same way)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def normalize_strings(value: Any) -> Any:
    """``value`` (parsed JSON) with every string, keys included, through
    :func:`json_string_identity`, so that strings holding lone surrogates compare by their
    UTF-16 code units, as JSON defines them."""
    if isinstance(value, str):
        return json_string_identity(value)
    if isinstance(value, list):
        return [normalize_strings(v) for v in value]
    if isinstance(value, dict):
        return {json_string_identity(k): normalize_strings(v) for k, v in value.items()}
    return value


def kinetrace_trace(
    result: Any, path: Path, metadata: Any = None, **kwargs: Any
) -> tuple[bytes, Any]:
    """Exports with kinetrace and returns (bytes, strictly parsed trace)."""
    kinetrace.export_chrome_trace(result, path, metadata, **kwargs)
    data = read_trace(path)
    return data, strict_loads(data)


def check_reads(result: FakeResult) -> None:
    """Asserts what kinetrace read of each activity: every field it needs exactly once, and
    the conditional fields only where the format needs them (``correlation_id`` when the
    linked id is 0 and the category is not excluded, ``flow_type``/``flow_start`` when
    ``flow_id > 0``, ``linked_activity`` for kernels).

    An activity that is also the linked activity of kernels has its ``name`` read once more
    per such kernel, and its ``metadata_json`` too when it is a ``record_param_comms`` (torch
    reads them the same way)."""
    listed = result.activities
    linked_reads: Counter[int] = Counter()
    for act in listed:
        if act.peek("type") == "kernel":
            linked = act.peek("linked_activity")
            if isinstance(linked, FakeActivity):
                linked_reads[id(linked)] += 1
    listed_ids = {id(a) for a in listed}
    for act in result.all_activities():
        v = act.values
        n_linked = linked_reads[id(act)]
        comms_reads = n_linked if v["name"] == "record_param_comms" else 0
        if id(act) in listed_ids:
            needs_corr = v["linked_correlation_id"] == 0 and v["type"] not in EXCLUDED_CATEGORIES
            needs_flow = v["flow_id"] > 0
            expected = {
                "device_id": 1,
                "resource_id": 1,
                "timestamp": 1,
                "duration": 1,
                "type": 1,
                "linked_correlation_id": 1,
                "flow_id": 1,
                "name": 1 + n_linked,
                "metadata_json": 1 + comms_reads,
                "correlation_id": int(needs_corr),
                "flow_type": int(needs_flow),
                "flow_start": int(needs_flow),
                "linked_activity": int(v["type"] == "kernel"),
            }
        else:  # only reachable as a kernel's linked activity
            expected = dict.fromkeys(FIELDS, 0)
            expected["name"] = n_linked
            expected["metadata_json"] = comms_reads
        got = {f: act.calls[f] for f in FIELDS}
        assert got == expected, f"{act!r}: reads {got}, expected {expected}"
    assert result.trace_activities_calls == 1, result.trace_activities_calls
