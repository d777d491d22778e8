"""Builders of activity sets in the shapes a CUDA or distributed run records (kernels,
runtime launches with ``ac2g`` flows, memcpy/memset, comms kernels, ...), which cannot be
recorded on a CPU-only machine, and of sets that probe the format's edges (odd ids,
durations, tricky names, flow types, metadata fragments).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from support import T0
from support.fakes import PID, FakeActivity


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
