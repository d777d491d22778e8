"""A synthetic activity source for huge-trace tests and benchmarks.

``SyntheticResult(n)`` looks like a ``_ProfilerResult`` whose ``trace_activities()`` holds ``n``
activities, but the activities are built on the fly: the sequence it returns is lazy (``len``,
indexing, slicing, iteration), so ten million activities never exist as ten million live
Python objects. Each activity is a small ``__slots__`` object whose fields are derived from
``(seed, index)`` alone, so the same source always produces the same trace.

The events look like a CPU profile recorded with ``record_shapes=True`` (about 300-400 bytes
of JSON per event: ``aten::`` names, "Concrete Inputs" / "Input type" / "Input Strides" /
"Input Dims" fragments, the occasional ``user_annotation``); with ``gpu=True`` every fourth
group is a launch (cpu_op -> cuda_runtime -> kernel with an ``ac2g`` flow, the kernel linked
to its cpu_op) so the second pass reads the conditional fields too.

Run as a script it is also the worker the tests and ``benches/bench_huge.py`` start in a
subprocess::

    python tests/synthetic.py export N PATH [--seed S] [--gpu] [--base-time-ns B] ...

which exports and prints one JSON line: the export's stats plus the peak resident-memory
growth during the export (``rss_growth``, bytes), measured against a baseline taken right
before ``export_chrome_trace`` is called (after the source is built).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, overload

__all__ = [
    "T0",
    "ListResult",
    "PeakRss",
    "SyntheticActivity",
    "SyntheticResult",
    "SyntheticSequence",
    "export_measured",
    "memory_budget",
    "warm_up",
]

#: A realistic epoch time (late 2026), the start of every synthetic trace.
T0 = 1_796_028_311_502_385_758

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


# ---------------------------------------------------------------------------------------------
# Peak memory measurement
# ---------------------------------------------------------------------------------------------


def _status_kib(field: str, pid: int | str = "self") -> int | None:
    """A ``VmXXX`` field of /proc/PID/status, in KiB (None where unavailable)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(field.encode() + b":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _pss_kib(pid: int | str = "self") -> int | None:
    """Proportional set size of a process (shared pages split among their users), KiB."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _children() -> list[int]:
    """This process's child processes (kinetrace's forked workers)."""
    pids: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


def _reset_hwm() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class PeakRss:
    """Peak memory over a block, relative to when it is entered.

    ``growth``: this process's resident memory: VmRSS sampled from a thread every
    ``interval`` seconds and, where the kernel allows resetting it, VmHWM (exact).

    ``total_growth``: the same plus forked child processes (kinetrace's ``workers``): while
    children exist, the sum of every process's PSS (shared copy-on-write pages counted
    once) is sampled every ``pss_interval`` seconds (reading PSS costs milliseconds).
    """

    def __init__(self, interval: float = 0.01, pss_interval: float = 0.05) -> None:
        self.interval = interval
        self.pss_interval = pss_interval
        self.baseline = 0
        self.peak_sampled = 0
        self.peak_hwm: int | None = None
        self.pss_baseline = 0
        self.peak_total = 0
        self.samples = 0
        self.max_children = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hwm_reset = False

    def _sample(self) -> None:
        last_pss = 0.0
        while not self._stop.wait(self.interval):
            rss = _status_kib("VmRSS")
            if rss is None:
                continue
            self.samples += 1
            self.peak_sampled = max(self.peak_sampled, rss * 1024)
            now = time.monotonic()
            children = _children()
            if children and now - last_pss >= self.pss_interval:
                last_pss = now
                self.max_children = max(self.max_children, len(children))
                total = sum(_pss_kib(p) or 0 for p in ["self", *children]) * 1024
                self.peak_total = max(self.peak_total, total - self.pss_baseline)
            elif not children:
                # Alone: this process's growth (RSS and PSS grow alike).
                self.peak_total = max(self.peak_total, rss * 1024 - self.baseline)

    def __enter__(self) -> PeakRss:
        self._hwm_reset = _reset_hwm()
        self.pss_baseline = (_pss_kib() or 0) * 1024
        self.baseline = (_status_kib("VmRSS") or 0) * 1024
        self.peak_sampled = self.baseline
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        rss = _status_kib("VmRSS")
        if rss is not None:
            self.peak_sampled = max(self.peak_sampled, rss * 1024)
        if self._hwm_reset:
            hwm = _status_kib("VmHWM")
            self.peak_hwm = None if hwm is None else hwm * 1024

    @property
    def growth(self) -> int:
        peak = max(self.peak_sampled, self.peak_hwm or 0)
        return max(0, peak - self.baseline)

    @property
    def total_growth(self) -> int:
        return max(self.growth, self.peak_total)


def memory_budget(n: int) -> int:
    """The peak-memory budget of an export of ``n`` activities: 64 MiB + 32 bytes each."""
    return 64 * 2**20 + 32 * n


def warm_up() -> None:
    """Imports what the first export of a process imports (torch, for the device
    properties), so that a measurement counts the export and not the import."""
    try:
        import torch

        torch.cuda.is_available()
    except ImportError:
        pass


def export_measured(
    result: SyntheticResult | ListResult, path: str, *, warm: bool = True, **kwargs: Any
) -> dict[str, Any]:
    """Exports ``result`` to ``path``, measuring wall time and peak RSS growth (the baseline
    is taken right before ``export_chrome_trace``, after the source is built)."""
    import kinetrace

    if warm:
        warm_up()
    with PeakRss() as rss:
        started = time.perf_counter()
        stats = kinetrace.export_chrome_trace(result, path, **kwargs)
        seconds = time.perf_counter() - started
    n = len(result)
    return {
        "n": n,
        "path": stats.path,
        "events": stats.events,
        "uncompressed_bytes": stats.uncompressed_bytes,
        "file_bytes": stats.file_bytes,
        "seconds": seconds,
        "rss_baseline": rss.baseline,
        "rss_growth": rss.growth,
        "rss_growth_sampled": max(0, rss.peak_sampled - rss.baseline),
        "rss_growth_hwm": None if rss.peak_hwm is None else max(0, rss.peak_hwm - rss.baseline),
        "rss_samples": rss.samples,
        "total_growth": rss.total_growth,
        "workers_seen": rss.max_children,
        "budget": memory_budget(n),
    }


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="export a synthetic trace (test/bench worker)")
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="export N synthetic activities to each PATH in turn")
    exp.add_argument("n", type=int)
    exp.add_argument("paths", nargs="+", metavar="PATH")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--gpu", action="store_true")
    exp.add_argument("--name-len", type=int, default=None)
    exp.add_argument("--no-metadata", action="store_true")
    exp.add_argument("--payload", type=int, default=0)
    exp.add_argument("--pid", type=int, default=None, help="the activities' process id")
    exp.add_argument("--base-time-ns", type=int, default=None)
    exp.add_argument("--compresslevel", type=int, default=None)
    exp.add_argument("--threads", type=int, default=None)
    exp.add_argument("--workers", type=int, default=None)
    exp.add_argument(
        "--list", action="store_true", help="build the activities into a list first (as torch)"
    )
    exp.add_argument(
        "--cpus", type=int, default=None, help="the cores the default worker count assumes"
    )
    args = parser.parse_args(argv)
    if args.cpus is not None:
        from kinetrace import _workers

        _workers.available_cpus = lambda: args.cpus  # type: ignore[assignment]
    kwargs: dict[str, Any] = {}
    for key in ("base_time_ns", "compresslevel", "threads", "workers"):
        if getattr(args, key) is not None:
            kwargs[key] = getattr(args, key)
    result = SyntheticResult(
        args.n,
        seed=args.seed,
        gpu=args.gpu,
        name_len=args.name_len,
        with_metadata=not args.no_metadata,
        payload=args.payload,
        pid=args.pid,
    )
    source: SyntheticResult | ListResult = ListResult(result) if args.list else result
    if args.list:
        import gc

        gc.collect()
    for path in args.paths:
        print(json.dumps(export_measured(source, path, **kwargs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
