"""The two extraction passes: read activity fields through torch's accessors in columnar
batches and hand them to the Rust exporter (first pass: device, resource, timestamp and
duration of every activity; then the header; second pass: the other fields, batch by batch),
plus what the header needs (time base, the profiling host's pid, CUDA devices and versions)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import methodcaller
from typing import Any

from kinetrace import _kinetrace

#: Activities per batch. Large enough that per-batch overhead vanishes, small enough that a
#: few batches in flight stay a few MB.
BATCH_SIZE = 8192

_PARAM_COMMS_NAME = "record_param_comms"
_FIRST_PASS_FIELDS = ("device_id", "resource_id", "timestamp", "duration")
_SECOND_PASS_FIELDS = (
    "type",
    "linked_correlation_id",
    "flow_id",
    "name",
    "metadata_json",
    "correlation_id",
    "flow_type",
    "flow_start",
)


def _getters(activities: list[Any], fields: Iterable[str]) -> dict[str, Callable[[Any], Any]]:
    """Accessors to map over activity lists: the unbound methods when every activity is of
    one type (the cheapest call from Python), ``methodcaller`` otherwise."""
    kinds = set(map(type, activities))
    if len(kinds) == 1:
        (kind,) = kinds
        if all(callable(getattr(kind, f, None)) for f in fields):
            return {f: getattr(kind, f) for f in fields}
    return {f: methodcaller(f) for f in fields}


def _select(items: Sequence[Any], mask: bytes | bool | None) -> Iterable[Any]:
    if mask is None:
        return ()
    if mask is True:
        return items
    return compress(items, mask)  # type: ignore[arg-type]


def _comms_metadata(kernels: Iterable[Any]) -> list[str | None]:
    """For each kernel, the metadata of its linked ``record_param_comms`` activity."""
    out: list[str | None] = []
    for kernel in kernels:
        linked = kernel.linked_activity()
        if linked is not None and linked.name() == _PARAM_COMMS_NAME:
            out.append(linked.metadata_json() or None)
        else:
            out.append(None)
    return out


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


# Set in a forked background export (kinetrace._background): the identity of the process
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


Getters = dict[str, Callable[[Any], Any]]


def activity_getters(activities: list[Any]) -> Getters:
    """The accessors both passes use."""
    return _getters(activities, _FIRST_PASS_FIELDS + _SECOND_PASS_FIELDS)


def _batches(activities: Sequence[Any], span: range | None) -> Iterator[Sequence[Any]]:
    """Slices of at most BATCH_SIZE activities over ``span`` (default: all), taken one at a
    time so a lazy sequence never holds more than a batch."""
    span = range(len(activities)) if span is None else span
    for lo in range(span.start, span.stop, BATCH_SIZE):
        yield activities[lo : min(lo + BATCH_SIZE, span.stop)]


def first_pass(
    exporter: Any, activities: Sequence[Any], get: Getters, span: range | None = None
) -> None:
    """Device, resource, timestamp and duration of every activity in ``span``, kept in Rust.

    With :func:`second_pass`, the one copy of the batch protocol: used by the in-process
    export (:func:`extract_here`), each forked worker (``kinetrace._workers``), the demo's
    accessor floor (``kinetrace._bench``, into a consumer that keeps nothing) and the tests'
    writer-panic driver. ``exporter`` is the native ``_Exporter`` or anything with its
    ``add_first_pass`` / ``begin_batch`` / ``submit_batch``."""
    device, resource, timestamp, duration = (get[f] for f in _FIRST_PASS_FIELDS)
    for part in _batches(activities, span):
        exporter.add_first_pass(
            list(map(device, part)),
            list(map(resource, part)),
            list(map(timestamp, part)),
            list(map(duration, part)),
        )


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
    for the writer thread: the categories, linked ids and flow ids first, then the fields
    ``exporter.begin_batch`` says the format needs (correlation ids, flows, the comms
    metadata of kernels' linked activities). Its users: see :func:`first_pass`."""
    category, linked_id, flow_id = get["type"], get["linked_correlation_id"], get["flow_id"]
    name, metadata_json, correlation_id = get["name"], get["metadata_json"], get["correlation_id"]
    flow_type, flow_start = get["flow_type"], get["flow_start"]
    for part in _batches(activities, span):
        need_corr, need_flow, kernels = exporter.begin_batch(
            list(map(category, part)), list(map(linked_id, part)), list(map(flow_id, part))
        )
        flows = list(_select(part, need_flow))
        exporter.submit_batch(
            list(map(name, part)),
            list(map(metadata_json, part)),
            list(map(correlation_id, _select(part, need_corr))),
            list(map(flow_type, flows)),
            list(map(flow_start, flows)),
            _comms_metadata(_select(part, kernels)),
        )
        if bar is not None:
            bar.advance(len(part))


def extract_here(
    exporter: Any,
    result: Any,
    activities: list[Any],
    metadata: Mapping[str, Any] | None,
    base_time_ns: int | None,
    trace_name: str,
    bar: ProgressBar | None = None,
) -> None:
    """Both passes over the activities in this process; ends with the tail queued."""
    get = activity_getters(activities)
    first_pass(exporter, activities, get)
    end_first_pass(exporter, result, metadata, base_time_ns)
    second_pass(exporter, activities, get, bar)
    exporter.close(trace_name)
