"""The two extraction passes: read activity fields through torch's accessors in columnar
batches and hand them to the Rust exporter (first pass: device, resource, timestamp and
duration of every activity; then the header; second pass: the other fields, batch by batch),
plus what the header needs (time base, the profiling host's pid, CUDA devices and versions)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import methodcaller
from types import BuiltinFunctionType
from typing import Any

from kinetrace import _kinetrace

#: Activities per batch. Large enough that per-batch overhead vanishes (a call into Rust and
#: a hand-over to the writer thread), small enough that the few batches in flight in every
#: process (one being read, two queued, one being formatted) stay about 2 MB.
BATCH_SIZE = 2048


def _getters(activities: Sequence[Any]) -> Any:
    """The accessors of ``activities`` (a native ``_Accessors``): the type's own methods when
    every activity is of one type (pybind11's C functions are then called directly, without
    touching the activities' reference counts: see ``src/python/reader.rs``), else
    ``methodcaller``."""
    fields = _kinetrace._Accessors.fields
    if isinstance(activities, list):
        kind = _kinetrace.common_type(activities)
    else:
        kinds = set(map(type, activities))
        kind = next(iter(kinds)) if len(kinds) == 1 else None
    if kind is not None and all(callable(getattr(kind, f, None)) for f in fields):
        getters = [_unwrapped(getattr(kind, f)) for f in fields]
        return _kinetrace._Accessors(kind, getters)
    return _kinetrace._Accessors(None, [methodcaller(f) for f in fields])


def _unwrapped(getter: Any) -> Any:
    """A pybind11 method as the C function it wraps (``instancemethod.__func__``), which
    Rust calls directly; anything else as it is."""
    function = getattr(getter, "__func__", None)
    return function if isinstance(function, BuiltinFunctionType) else getter


def device_properties_json() -> str:
    """``deviceProperties``: one entry per CUDA device, the fields Kineto writes."""
    import torch

    props: list[dict[str, Any]] = []
    if not torch.cuda.is_available():
        return json.dumps(props)
    for index in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(index)
        entry: dict[str, Any] = {
            "id": index,
            "name": p.name,
            "totalGlobalMem": p.total_memory,
            "computeMajor": p.major,
            "computeMinor": p.minor,
            "maxThreadsPerBlock": p.max_threads_per_block,
            "maxThreadsPerMultiprocessor": p.max_threads_per_multi_processor,
            "warpSize": p.warp_size,
            "sharedMemPerBlock": p.shared_memory_per_block,
            "numSms": p.multi_processor_count,
            "regsPerMultiprocessor": p.regs_per_multiprocessor,
            "sharedMemPerMultiprocessor": p.shared_memory_per_multiprocessor,
        }
        if hasattr(p, "shared_memory_per_block_optin"):
            entry["sharedMemPerBlockOptin"] = p.shared_memory_per_block_optin
        props.append(entry)
    return json.dumps(props)


def cuda_versions() -> list[tuple[str, int]]:
    """The CUDA runtime (and, where cuda.bindings can tell, driver) version keys."""
    import torch

    if not torch.cuda.is_available():
        return []
    versions = [("cuda_runtime_version", int(torch._C._cuda_getCompiledVersion()))]
    try:
        from cuda.bindings import runtime as cudart

        err, driver = cudart.cudaDriverGetVersion()
        if int(err) == 0:
            versions.append(("cuda_driver_version", int(driver)))
    except Exception:  # the key is optional: losing it beats failing the export
        pass
    return versions


@dataclass(frozen=True)
class HostIdentity:
    """What the header says about the process that profiled: its pid (the CPU process's
    id in the trace), its CUDA devices and CUDA versions."""

    pid: int
    device_properties: str
    cuda_versions: list[tuple[str, int]]

    @staticmethod
    def here() -> HostIdentity:
        """This process's identity (queries CUDA when torch has it)."""
        return HostIdentity(trace_pid(), device_properties_json(), cuda_versions())


# Set in a forked background export (kinetrace._export.background): the identity of the process
# that profiled, read there before the fork, so the child neither writes its own pid nor
# touches CUDA.
_host_override: HostIdentity | None = None


def trace_pid() -> int:
    """The pid written as the CPU process: the profiling process's, even in a forked child."""
    return os.getpid() if _host_override is None else _host_override.pid


def _time_base(result: Any, min_timestamp: int | None) -> int:
    """The trimonth floor of the trace's own earliest time (the profiler's start or the
    earliest activity), or of the wall clock for a trace with neither."""
    candidates = []
    start = getattr(result, "trace_start_ns", None)
    if callable(start):
        value = start()
        if isinstance(value, int) and value > 0:
            candidates.append(value)
    if min_timestamp is not None:
        candidates.append(min_timestamp)
    earliest = min(candidates) if candidates else time.time_ns()
    return _kinetrace.trimonth_base_ns(earliest)


class ProgressBar:
    """A tqdm bar over the activities of one export, with the writer's MB/s."""

    def __init__(self, total: int, path: str, exporter: Any) -> None:
        try:
            from tqdm import tqdm
        except ImportError as exc:
            raise ImportError(
                "progress=True needs tqdm: pip install tqdm (or kinetrace[progress])"
            ) from exc
        self._exporter = exporter
        self._started = time.perf_counter()
        self._bar = tqdm(
            total=total,
            unit="ev",
            unit_scale=True,
            desc=f"kinetrace {os.path.basename(path)}",
            dynamic_ncols=True,
        )

    def advance(self, n: int) -> None:
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        mb_per_s = self._exporter.bytes_written() / elapsed / 1e6
        self._bar.set_postfix_str(f"{mb_per_s:.0f} MB/s", refresh=False)
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


Getters = Any  # a native ``_kinetrace._Accessors``


def activity_getters(activities: Sequence[Any]) -> Getters:
    """The accessors both passes use."""
    return _getters(activities)


def _parts(activities: Sequence[Any], span: range | None) -> Iterator[tuple[list[Any], int, int]]:
    """``(list, lo, hi)`` per batch of at most BATCH_SIZE activities over ``span`` (default:
    all). A list is read in place (no slice: a slice would write every activity's
    reference count); any other sequence is sliced one batch at a time, so a lazy one never
    holds more than a batch."""
    span = range(len(activities)) if span is None else span
    listed = isinstance(activities, list)
    for lo in range(span.start, span.stop, BATCH_SIZE):
        hi = min(lo + BATCH_SIZE, span.stop)
        if listed:
            yield activities, lo, hi  # type: ignore[misc]
        else:
            part = activities[lo:hi]
            part = part if isinstance(part, list) else list(part)
            yield part, 0, len(part)


def first_pass(
    exporter: Any, activities: Sequence[Any], get: Getters, span: range | None = None
) -> None:
    """Device, resource, timestamp and duration of every activity in ``span``, kept in Rust.

    With :func:`second_pass`, the one copy of the batch protocol: used by the in-process
    export (:func:`extract_here`), each forked worker (``kinetrace._export.workers``), the demo's
    accessor floor (``kinetrace._bench``, into a ``_kinetrace._Discard`` that keeps nothing)
    and the tests' writer-panic driver. ``exporter`` is the native ``_Exporter`` or anything
    with its ``read_first_pass`` / ``read_batch``. The reading itself is Rust's
    (``src/python/reader.rs``): Python only hands over the list and the bounds."""
    for part, lo, hi in _parts(activities, span):
        exporter.read_first_pass(get, part, lo, hi)


def end_first_pass(
    exporter: Any, result: Any, metadata: Mapping[str, Any] | None, base_time_ns: int | None
) -> int:
    """Ends the first pass: picks the time base and queues the header for the writer
    thread. Returns the base."""
    if base_time_ns is None:
        base_time_ns = _time_base(result, exporter.min_timestamp())
    elif isinstance(base_time_ns, bool) or not isinstance(base_time_ns, int):
        raise TypeError(f"base_time_ns must be an int, not {type(base_time_ns).__name__}")
    items = [(str(k), str(v)) for k, v in (metadata or {}).items()]
    host = _host_override or HostIdentity.here()
    exporter.start(base_time_ns, host.pid, host.device_properties, items, host.cuda_versions)
    return base_time_ns


def second_pass(
    exporter: Any,
    activities: Sequence[Any],
    get: Getters,
    bar: ProgressBar | None = None,
    span: range | None = None,
) -> None:
    """The other fields of the activities in ``span``, batch by batch, each batch queued
    for the writer thread: categories, linked ids, flow ids, names and metadata of every
    activity, and where the format needs them correlation ids, flows and the comms metadata
    of kernels' linked activities, each accessor called at most once an activity. Its users:
    see :func:`first_pass`."""
    for part, lo, hi in _parts(activities, span):
        exporter.read_batch(get, part, lo, hi)
        if bar is not None:
            bar.advance(hi - lo)


def extract_here(
    exporter: Any,
    result: Any,
    activities: list[Any],
    metadata: Mapping[str, Any] | None,
    base_time_ns: int | None,
    trace_name: str,
    bar: ProgressBar | None = None,
    get: Getters | None = None,
) -> None:
    """Both passes over the activities in this process (through ``get``, by default
    :func:`activity_getters`'s); ends with the tail queued."""
    if get is None:
        get = activity_getters(activities)
    first_pass(exporter, activities, get)
    end_first_pass(exporter, result, metadata, base_time_ns)
    second_pass(exporter, activities, get, bar)
    exporter.close(trace_name)
