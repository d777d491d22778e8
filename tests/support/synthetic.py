"""A synthetic activity source for huge-trace tests and benchmarks.

``SyntheticResult(n)`` looks like a ``_ProfilerResult`` whose ``trace_activities()`` holds ``n``
activities, but the activities are built on the fly: the sequence it returns is lazy (``len``,
indexing, slicing, iteration), so ten million activities never exist as ten million live
Python objects. Each activity is a small ``__slots__`` object whose fields are derived from
``(seed, index)`` alone, so the same source always produces the same trace. Every synthetic
trace starts at :data:`support.T0`.

The events look like a CPU profile recorded with ``record_shapes=True`` (about 300-400 bytes
of JSON per event: ``aten::`` names, "Concrete Inputs" / "Input type" / "Input Strides" /
"Input Dims" fragments, the occasional ``user_annotation``); with ``gpu=True`` every fourth
group is a launch (cpu_op -> cuda_runtime -> kernel with an ``ac2g`` flow, the kernel linked
to its cpu_op) so the second pass reads the conditional fields too.

``tests/synthetic.py`` is the command line that exports such a source in a subprocess and
reports its time and peak memory (``support.measure``).
"""

from __future__ import annotations

import json
import os
import random
import string
from collections.abc import Iterator, Sequence
from typing import overload

from support import T0

__all__ = [
    "ListResult",
    "SyntheticActivity",
    "SyntheticResult",
    "SyntheticSequence",
    "distributed_info",
]

_MASK64 = (1 << 64) - 1

#: Host-side operators: (name, metadata template). ``{a}``/``{b}`` are tensor sizes,
#: ``{seq}`` the autograd sequence number; ``"Ev Idx"`` is appended per event.
_OPS: tuple[tuple[str, str], ...] = (
    (
        "aten::add",
        '"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, '
        '"Concrete Inputs": ["", "", "1"], "Input type": ["float", "float", "Scalar"], '
        '"Input Strides": [[{b}, 1], [{b}, 1], []], "Input Dims": [[{a}, {b}], [{a}, {b}], []]',
    ),
    (
        "aten::mm",
        '"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, '
        '"Concrete Inputs": ["", ""], "Input type": ["float", "float"], '
        '"Input Strides": [[{b}, 1], [1, {b}]], "Input Dims": [[{a}, {b}], [{b}, {a}]]',
    ),
    (
        "aten::empty",
        '"Record function id": 0, "Concrete Inputs": ["[{a}, {b}]", "6", "", "", "False", ""], '
        '"Input type": ["ScalarList", "Scalar", "", "", "Scalar", ""], '
        '"Input Strides": [[], [], [], [], [], []], "Input Dims": [[], [], [], [], [], []]',
    ),
    (
        "aten::as_strided",
        '"Record function id": 0, "Concrete Inputs": ["", "[{b}, {a}]", "[1, {b}]", ""], '
        '"Input type": ["float", "ScalarList", "ScalarList", ""], '
        '"Input Strides": [[{b}, 1], [], [], []], "Input Dims": [[{a}, {b}], [], [], []]',
    ),
    (
        "aten::slice",
        '"Record function id": 0, "Concrete Inputs": ["", "0", "0", "{a}", "1"], '
        '"Input type": ["float", "Scalar", "Scalar", "Scalar", "Scalar"], '
        '"Input Strides": [[{b}, 1], [], [], [], []], "Input Dims": [[{a}, {b}], [], [], [], []]',
    ),
    (
        "aten::cat",
        '"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, '
        '"Concrete Inputs": ["", "0"], "Input type": ["TensorList", "Scalar"], '
        '"Input Strides": [[[{b}, 1], [{b}, 1]], []], "Input Dims": [[[{a}, {b}], [{a}, {b}]], []]',
    ),
    (
        "aten::relu",
        '"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, '
        '"Concrete Inputs": [""], "Input type": ["float"], '
        '"Input Strides": [[{b}, 1]], "Input Dims": [[{a}, {b}]]',
    ),
    (
        "aten::sum",
        '"Record function id": 0, "Concrete Inputs": ["", "[]", "False", ""], '
        '"Input type": ["float", "ScalarList", "Scalar", ""], '
        '"Input Strides": [[{b}, 1], [], [], []], "Input Dims": [[{a}, {b}], [], [], []]',
    ),
)
_ANNOTATION = ("ProfilerStep#{step}", '"Record function id": 0')
_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)"
)
_SIZES = (1, 3, 8, 64, 128, 512, 1024, 4096)
#: Distinct payload strings per source (picked per event by its hash).
_PAYLOAD_POOL = 256

#: Streams and threads.
_STREAM = 7
_AUTOGRAD_TID_OFFSET = 3


def _mix(x: int) -> int:
    """splitmix64's finalizer: a well-spread 64-bit hash of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _fit(name: str, length: int | None, salt: int) -> str:
    """``name`` padded (with a deterministic suffix) or cut to exactly ``length`` characters."""
    if length is None:
        return name
    if len(name) >= length:
        return name[:length]
    filler = f"_{salt:x}" * (length // 4 + 2)
    return (name + filler)[:length]


class _Config:
    """What every activity of one source shares (one object per source)."""

    __slots__ = (
        "annotation_name",
        "gpu",
        "kernel_name",
        "key",
        "n",
        "names",
        "payloads",
        "pid",
        "runtime_name",
        "start",
        "templates",
        "with_metadata",
    )

    def __init__(
        self,
        n: int,
        seed: int,
        name_len: int | None,
        with_metadata: bool,
        gpu: bool,
        pid: int,
        start: int,
        payload: int = 0,
    ) -> None:
        self.n = n
        self.key = _mix(seed & _MASK64) << 1
        self.gpu = gpu
        self.pid = pid
        self.start = start
        self.with_metadata = with_metadata
        self.names = tuple(_fit(name, name_len, k) for k, (name, _) in enumerate(_OPS))
        self.templates = tuple(t for _, t in _OPS)
        self.annotation_name = (
            _ANNOTATION[0] if name_len is None else _fit("ProfilerStep#", name_len, 99)
        )
        self.kernel_name = _fit(_KERNEL, name_len, 98)
        self.runtime_name = _fit("cudaLaunchKernel", name_len, 97)
        self.payloads: tuple[str, ...] = ()
        if payload > 0:
            rng = random.Random(seed)
            alphabet = string.ascii_letters + string.digits + "+/"
            self.payloads = tuple(
                f', "payload": "{"".join(rng.choices(alphabet, k=payload))}"'
                for _ in range(_PAYLOAD_POOL)
            )


# Roles of an activity (derived from its index).
_CPU, _ANNOT, _RUNTIME, _KERNEL_ROLE = range(4)


class SyntheticActivity:
    """An ``_ITraceActivity`` look-alike computed from ``(seed, index)``.

    Only the index and one hash are stored; every accessor derives its value on demand.
    """

    __slots__ = ("_c", "_h", "_i", "_role")

    def __init__(self, config: _Config, index: int) -> None:
        self._c = config
        self._i = index
        self._h = h = _mix(config.key ^ index)
        if config.gpu and index % 16 >= 13:
            # ...13: cpu_op (the launching op), 14: cuda_runtime, 15: kernel.
            self._role = (
                _RUNTIME if index % 16 == 14 else _KERNEL_ROLE if index % 16 == 15 else _CPU
            )
        elif h & 0x3F == 0:
            self._role = _ANNOT
        else:
            self._role = _CPU

    # -- the _ITraceActivity accessors ---------------------------------------------------------

    def name(self) -> str:
        role = self._role
        if role == _CPU:
            return self._c.names[(self._h >> 8) % len(_OPS)]
        if role == _ANNOT:
            c = self._c
            name = c.annotation_name
            return name.format(step=self._i) if "{step}" in name else name
        if role == _RUNTIME:
            return self._c.runtime_name
        return self._c.kernel_name

    def type(self) -> str:
        return ("cpu_op", "user_annotation", "cuda_runtime", "kernel")[self._role]

    def device_id(self) -> int:
        return 0 if self._role == _KERNEL_ROLE else self._c.pid

    def resource_id(self) -> int:
        if self._role == _KERNEL_ROLE:
            return _STREAM
        pid = self._c.pid
        return pid + _AUTOGRAD_TID_OFFSET if (self._h >> 20) & 0xF == 0 else pid

    def timestamp(self) -> int:
        # Increasing by 1-2 us an event, with sub-us jitter; kernels run a little later.
        ts = self._c.start + self._i * 1_500 + ((self._h >> 24) & 0x3FF)
        return ts + 5_000 if self._role == _KERNEL_ROLE else ts

    def duration(self) -> int:
        return 100 + (self._h >> 34) % 50_000

    def correlation_id(self) -> int:
        i = self._i
        if self._role in (_RUNTIME, _KERNEL_ROLE):
            return 1_000_000_000 + i - i % 16
        return i + 1

    def linked_correlation_id(self) -> int:
        if self._role in (_RUNTIME, _KERNEL_ROLE):
            i = self._i
            return i - i % 16 + 14  # the launching cpu_op's correlation id (index 13 -> 14)
        return 0

    def flow_id(self) -> int:
        if self._role in (_RUNTIME, _KERNEL_ROLE):
            i = self._i
            return 1_000_000_000 + i - i % 16
        return 0

    def flow_type(self) -> int:
        return 2 if self._role in (_RUNTIME, _KERNEL_ROLE) else 0

    def flow_start(self) -> bool:
        return self._role == _RUNTIME

    def metadata_json(self) -> str:
        c = self._c
        if not c.with_metadata:
            return ""
        role = self._role
        h = self._h
        i = self._i
        extra = c.payloads[(h >> 50) & 0xFF] if c.payloads else ""
        if role == _CPU:
            template = c.templates[(h >> 8) % len(_OPS)]
            text = template.format(
                a=_SIZES[(h >> 40) & 7], b=_SIZES[(h >> 43) & 7], seq=(h >> 46) & 0xFFFF
            )
            return f'{text}, "Ev Idx": {i}{extra}'
        if role == _ANNOT:
            return f'{_ANNOTATION[1]}, "Ev Idx": {i}{extra}'
        corr = 1_000_000_000 + i - i % 16
        if role == _RUNTIME:
            return f'"cbid": 211, "correlation": {corr}{extra}'
        return (
            f'"queued": 0, "device": 0, "context": 1, "stream": {_STREAM}, '
            f'"correlation": {corr}, "registers per thread": 32, "shared memory": 0, '
            f'"blocks per SM": 4.5, "warps per SM": 18, "grid": [{_SIZES[(h >> 40) & 7]}, 1, 1], '
            f'"block": [128, 1, 1], "est. achieved occupancy %": 100{extra}'
        )

    def linked_activity(self) -> SyntheticActivity | None:
        if self._role == _KERNEL_ROLE:
            i = self._i
            return SyntheticActivity(self._c, i - i % 16 + 13)
        return None

    def __repr__(self) -> str:
        return f"<SyntheticActivity {self._i} {self.type()} {self.name()[:40]!r}>"


class SyntheticSequence(Sequence):  # type: ignore[type-arg]
    """The lazy ``trace_activities()`` list: activities are built when indexed or sliced."""

    __slots__ = ("_c",)

    def __init__(self, config: _Config) -> None:
        self._c = config

    def __len__(self) -> int:
        return self._c.n

    @overload
    def __getitem__(self, index: int) -> SyntheticActivity: ...

    @overload
    def __getitem__(self, index: slice) -> list[SyntheticActivity]: ...

    def __getitem__(self, index: int | slice) -> SyntheticActivity | list[SyntheticActivity]:
        c = self._c
        if isinstance(index, slice):
            return [SyntheticActivity(c, i) for i in range(*index.indices(c.n))]
        i = index.__index__()
        if i < 0:
            i += c.n
        if not 0 <= i < c.n:
            raise IndexError("activity index out of range")
        return SyntheticActivity(c, i)

    def __iter__(self) -> Iterator[SyntheticActivity]:
        c = self._c
        for i in range(c.n):
            yield SyntheticActivity(c, i)

    def __reversed__(self) -> Iterator[SyntheticActivity]:
        c = self._c
        for i in reversed(range(c.n)):
            yield SyntheticActivity(c, i)


class ListResult:
    """``result`` with its activities built up front into a list, as torch's
    ``trace_activities()`` returns them (for measurements where the source must already
    be in memory)."""

    def __init__(self, result: SyntheticResult) -> None:
        self._result = result
        self._activities = list(result.trace_activities())

    def trace_activities(self) -> list[SyntheticActivity]:
        return self._activities

    def trace_start_ns(self) -> int:
        return self._result.trace_start_ns()

    def __len__(self) -> int:
        return len(self._activities)


class SyntheticResult:
    """A ``_ProfilerResult`` look-alike with ``n`` synthetic activities.

    Args:
        n: number of activities.
        seed: what the activities are derived from (with their index).
        name_len: every name exactly this many characters (None: realistic names).
        with_metadata: write record_shapes-like metadata (else every ``metadata_json`` is "").
        gpu: include launches (cpu_op -> cuda_runtime -> kernel with flows and links).
        payload: add a ``"payload"`` string of this many random characters to every
            event's metadata (nearly incompressible: makes the writer, not the extraction,
            the slow side of an export).
        pid: the process the CPU activities belong to (default: this one, so they are
            labelled as CPU threads).
    """

    def __init__(
        self,
        n: int,
        *,
        seed: int = 0,
        name_len: int | None = None,
        with_metadata: bool = True,
        gpu: bool = False,
        payload: int = 0,
        pid: int | None = None,
    ) -> None:
        if n < 0:
            raise ValueError("n must be >= 0")
        self._config = _Config(
            n,
            seed,
            name_len,
            with_metadata,
            gpu,
            os.getpid() if pid is None else pid,
            T0,
            payload,
        )
        self._activities = SyntheticSequence(self._config)

    def trace_activities(self) -> SyntheticSequence:
        return self._activities

    def trace_start_ns(self) -> int:
        return self._config.start

    def __len__(self) -> int:
        return self._config.n


def distributed_info(rank: int, world_size: int) -> dict[str, str]:
    """The top-level key torch writes for one rank of a distributed run, as the
    ``metadata=`` of an export (so a synthetic trace is that rank's)."""
    info = {"backend": "nccl", "rank": rank, "world_size": world_size}
    return {"distributedInfo": json.dumps(info)}
