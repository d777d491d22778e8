"""A big Kineto-shaped trace file written fast, for the tools' multi-GB tests.

Exporting ~1 GB through ``tests/synthetic.py`` reads every field of ~3M Python activities
(minutes on a busy 2-core machine); the tools only read the file, so this writes the same
shape straight from a text template: per launch a CPU operator, its ``cudaLaunchKernel``
with the ``ac2g`` flow start, the kernel on stream 7 with the flow's end, and a memcpy,
as torch writes them (seconds per GB).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["BLOCK_EVENTS", "CPU_PID", "write_big_trace"]

#: The CPU process and thread, and the GPU's (torch writes device 0 as pid 0).
CPU_PID = 4242
_TID = 4242

#: One launch: 4 complete events and the two ends of a flow. ``%(t)d``: its start (µs).
_BLOCK = (
    '{"ph":"X","cat":"cpu_op","name":"aten::add","pid":%(pid)d,"tid":%(tid)d,'
    '"ts":%(t)d.125,"dur":6.500,"args":{"External id": %(e)d,"Sequence number": %(e)d, '
    '"Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", "1"], '
    '"Input type": ["float", "float", "Scalar"], "Input Strides": [[512, 1], [512, 1], []], '
    '"Input Dims": [[64, 512], [64, 512], []], "Ev Idx": %(e)d}},\n'
    '{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":%(pid)d,"tid":%(tid)d,'
    '"ts":%(t)d.500,"dur":3.250,"args":{"External id": %(e)d,"cbid": 211, '
    '"correlation": %(c)d}},\n'
    '{"ph":"s","id":%(c)d,"pid":%(pid)d,"tid":%(tid)d,"ts":%(t)d.500,"cat":"ac2g",'
    '"name":"ac2g"},\n'
    '{"ph":"X","cat":"kernel","name":"void at::native::vectorized_elementwise_kernel<4, '
    "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, "
    'at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)","pid":0,"tid":7,'
    '"ts":%(k)d.250,"dur":4.000,"args":{"External id": %(e)d,"queued": 0, "device": 0, '
    '"context": 1, "stream": 7, "correlation": %(c)d, "registers per thread": 32, '
    '"shared memory": 0, "blocks per SM": 4.5, "warps per SM": 18, "grid": [1, 1, 1], '
    '"block": [128, 1, 1], "est. achieved occupancy %%": 100}},\n'
    '{"ph":"f","id":%(c)d,"pid":0,"tid":7,"ts":%(k)d.250,"cat":"ac2g","name":"ac2g",'
    '"bp":"e"},\n'
    '{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoH (Device -> Pinned)","pid":0,"tid":7,'
    '"ts":%(k)d.750,"dur":0.500,"args":{"External id": %(e)d,"device": 0, "context": 1, '
    '"stream": 7, "correlation": %(m)d, "bytes": 4096, "memory bandwidth (GB/s)": 8.2}},\n'
)
#: Events in one launch block.
BLOCK_EVENTS = 6
#: Microseconds between launches (a kernel and its memcpy end within them).
_STEP_US = 10
_START_US = 5_171_285_502_386


def _metadata(pid: int) -> list[str]:
    events = [
        ("process_name", pid, 0, {"name": "python"}),
        ("process_labels", pid, 0, {"labels": "CPU"}),
        ("thread_name", pid, _TID, {"name": f"thread {_TID}"}),
        ("process_name", 0, 0, {"name": "python"}),
        ("process_labels", 0, 0, {"labels": "GPU 0"}),
        ("thread_name", 0, 7, {"name": "stream 7 "}),
    ]
    return [
        json.dumps(
            {"ph": "M", "name": name, "ts": _START_US, "pid": p, "tid": t, "args": args},
            separators=(",", ":"),
        )
        for name, p, t, args in events
    ]


def write_big_trace(
    path: str | os.PathLike[str], min_bytes: int, *, rank: int = 0, world_size: int = 1
) -> int:
    """Writes a trace of at least ``min_bytes`` bytes of JSON to ``path`` (rank ``rank`` of
    ``world_size``: its ``distributedInfo``, and a pid of its own); returns its events."""
    pid = CPU_PID + rank
    header = (
        '{\n"schemaVersion": 1,\n"deviceProperties": [],\n'
        f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n'
        '"displayTimeUnit": "ms",\n"baseTimeNanoseconds": 1790857026000000000,\n'
        '"traceEvents": [\n'
    )
    written = 0
    launches = 0
    with open(path, "w", encoding="ascii", buffering=1 << 20) as out:
        written += out.write(header)
        while written < min_bytes:
            chunk = []
            for i in range(launches, launches + 4096):
                t = _START_US + i * _STEP_US
                fields = {"pid": pid, "tid": _TID, "t": t, "k": t + 4, "e": i + 1}
                fields.update(c=1_000_000_000 + 2 * i, m=1_000_000_001 + 2 * i)
                chunk.append(_BLOCK % fields)
            launches += 4096
            written += out.write("".join(chunk))
        metadata = _metadata(pid)
        written += out.write(",\n".join(metadata))
        written += out.write(f'\n],\n"traceName": {json.dumps(str(Path(path)))}\n}}\n')
    return launches * BLOCK_EVENTS + len(metadata)
