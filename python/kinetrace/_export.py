"""``export_chrome_trace``: pull activity fields in columnar batches, format them in Rust.

``background=True`` runs this same export in a forked process (``kinetrace._background``);
the handles of such exports, and the waiting for them, live here.

Data flow: ``trace_activities()`` -> first pass (device, resource, timestamp, duration of every
activity, kept in Rust: 32 bytes an activity) -> header -> second pass, batch by batch (the
other fields, read only where the format needs them) -> a Rust writer thread that formats,
compresses and writes while Python extracts the next batch.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import methodcaller
from typing import Any

from kinetrace import _graphs, _kinetrace

__all__ = ["DEFAULT_COMPRESSLEVEL", "ExportHandle", "ExportStats", "export_chrome_trace", "wait"]

#: Activities per batch. Large enough that per-batch overhead vanishes, small enough that a
#: few batches in flight stay a few MB.
BATCH_SIZE = 8192

#: Default gzip level for ``.gz`` paths: the fastest level whose output stays within 1.10x
#: of stock torch's (level 9) size on the benchmark profile. Measured on 300k record_shapes
#: activities: level 6 gives 1.11x the size, level 7 0.995x in the same time.
DEFAULT_COMPRESSLEVEL = 7

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


@dataclass(frozen=True)
class ExportStats:
    """What an export wrote."""

    #: Trace events written (process/thread metadata, activities, flows, closing events).
    events: int
    #: Bytes of JSON text (before compression).
    uncompressed_bytes: int
    #: Bytes in the file (equal to ``uncompressed_bytes`` for plain JSON).
    file_bytes: int
    #: Wall-clock seconds the export took.
    seconds: float
    #: Where the trace was written.
    path: str


class ExportHandle:
    """A background export: a forked process (``kinetrace._background``) reads the
    activities and writes the file; without ``os.fork``, Rust threads finish writing fields
    already extracted.

    ``result()`` waits for the file and returns its :class:`ExportStats`, or raises the
    error that stopped it. An error nobody asked for is raised by the next
    ``export_chrome_trace`` call instead, so a failure is never silent.
    """

    def __init__(
        self, exporter: Any, path: str, started: float, worker_outputs: list[Any] | None = None
    ) -> None:
        self._exporter = exporter
        # Worker output files the writer still reads; removed once it is done.
        self._worker_outputs = worker_outputs or []
        self._lock = threading.Lock()
        self._outcome: ExportStats | BaseException | None = None
        self._reported = False
        #: Where the trace is being written.
        self.path = path
        self._started = started

    def done(self) -> bool:
        """True once the file is complete (or the export failed)."""
        return self._settle(0.0)

    def result(self, timeout: float | None = None) -> ExportStats:
        """Wait for the export (at most ``timeout`` seconds) and return its stats.

        Raises:
            TimeoutError: still running after ``timeout`` seconds.
            OSError, ValueError, ...: whatever stopped the export.
        """
        if not self._settle(timeout):
            raise TimeoutError(f"export to {self.path} still running after {timeout} s")
        self._reported = True
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome

    def _settle(self, timeout: float | None) -> bool:
        with self._lock:
            if self._outcome is None:
                try:
                    counts = self._exporter.wait(timeout)
                except Exception as exc:
                    self._outcome = exc
                except BaseException as exc:
                    # Ctrl-C while waiting: the export is cancelled, not left to finish
                    # behind the caller's back; the interrupt goes on up.
                    self._exporter.abort()
                    self._outcome = exc
                    self._reported = True
                    self._release()
                    raise
                else:
                    if counts is None:
                        return False
                    events, raw_bytes, file_bytes, _ = counts
                    self._outcome = ExportStats(
                        events=events,
                        uncompressed_bytes=raw_bytes,
                        file_bytes=file_bytes,
                        seconds=time.perf_counter() - self._started,
                        path=self.path,
                    )
                self._release()
            return True

    def _abandon(self) -> None:
        """Stop the export if it still runs (its temporary file is removed)."""
        with self._lock:
            if self._outcome is None and self._exporter is not None:
                self._exporter.abort()
                self._outcome = KeyboardInterrupt()
                self._reported = True
                self._release()

    def _release(self) -> None:
        self._exporter = None
        if self._worker_outputs:
            from kinetrace import _workers

            _workers.remove_outputs(self._worker_outputs)

    def _unreported_error(self) -> BaseException | None:
        if self._reported or not isinstance(self._outcome, BaseException):
            return None
        self._reported = True
        return self._outcome

    def __repr__(self) -> str:
        state = "running" if self._outcome is None else "done"
        return f"<ExportHandle {self.path!r} {state}>"


_pending: list[ExportHandle] = []
_pending_lock = threading.Lock()


def _raise_unreported_errors() -> None:
    """Raise the first error of a finished background export nobody looked at."""
    with _pending_lock:
        handles = list(_pending)
    for handle in handles:
        if handle.done():
            with _pending_lock:
                if handle in _pending:
                    _pending.remove(handle)
            error = handle._unreported_error()
            if error is not None:
                raise RuntimeError(
                    f"an earlier background export to {handle.path} failed"
                ) from error


def wait(timeout: float | None = None) -> list[ExportStats]:
    """Wait for every background export started so far.

    Returns the stats of those that succeeded, in start order. After waiting for all of
    them, raises the first error that nobody has seen yet (an error already raised by
    ``result()`` is not raised again).

    Raises:
        TimeoutError: an export is still running after ``timeout`` seconds.
    """
    with _pending_lock:
        handles = list(_pending)
    deadline = None if timeout is None else time.monotonic() + timeout
    first_error: BaseException | None = None
    stats = []
    for handle in handles:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not handle._settle(remaining):
            raise TimeoutError(f"export to {handle.path} still running after {timeout} s")
        with _pending_lock:
            if handle in _pending:
                _pending.remove(handle)
        if isinstance(handle._outcome, ExportStats):
            stats.append(handle._outcome)
        else:
            error = handle._unreported_error()
            first_error = first_error or error
    if first_error is not None:
        raise first_error
    return stats


@atexit.register
def _wait_at_exit() -> None:
    """Finish pending background exports before the interpreter goes away."""
    with _pending_lock:
        handles = list(_pending)
    for i, handle in enumerate(handles):
        try:
            handle._settle(None)
        except KeyboardInterrupt:
            # A second Ctrl-C (the first stopped the program): abandon every export still
            # running; each removes its temporary file, so no partial file is left.
            for rest in handles[i:]:
                rest._abandon()
            print("kinetrace: background exports abandoned (Ctrl-C)", file=sys.stderr)
            return
        error = handle._unreported_error()
        if error is not None:  # report (once), never raise during shutdown
            print(f"kinetrace: background export to {handle.path} failed: {error}", file=sys.stderr)


def available_cpus() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except ImportError:
        return "not installed"


def resolve_source(source: Any) -> tuple[Any, Mapping[str, Any] | None]:
    """The ``_ProfilerResult`` behind ``source`` and the trace metadata it carries."""
    if hasattr(source, "trace_activities"):
        return source, None
    if _is_profile(source):
        # torch.profiler.profile (or kinetrace.profile): the autograd profiler inside holds
        # the result once the profile has stopped. torch < 2.13 keeps no _trace_metadata
        # (kinetrace.profile does, there too).
        inner = source.profiler
        if inner is None:
            raise RuntimeError(
                "the profiler has not been started: use it as a context manager "
                "or call start() and stop() before exporting"
            )
        result = getattr(inner, "kineto_results", None)
        if result is None:
            raise RuntimeError(
                "the profiler has not stopped yet: export after the `with` block "
                "or after stop() (or from on_trace_ready)"
            )
        return _require_trace_activities(result), getattr(source, "_trace_metadata", None)
    if hasattr(source, "kineto_results"):
        result = source.kineto_results
        if result is None:
            raise RuntimeError(
                "the profiler has not stopped yet (or ran without Kineto): export after "
                "the `with` block"
            )
        return _require_trace_activities(result), None
    if hasattr(source, "save") and hasattr(source, "trace_start_ns"):
        return source, None  # a torch < 2.13 _ProfilerResult: see kinetrace._fallback
    raise TypeError(
        "export_chrome_trace() needs a torch.profiler.profile, a "
        "torch.autograd.profiler.profile or a _ProfilerResult (anything with "
        f"trace_activities()), not {type(source).__name__}"
    )


def _is_profile(source: Any) -> bool:
    """A ``torch.profiler.profile`` (or a subclass, or anything shaped like one: its
    autograd profiler under ``profiler`` and a ``step`` method or ``_trace_metadata``)."""
    if not hasattr(source, "profiler"):
        return False
    torch = sys.modules.get("torch")
    kineto_profile = getattr(getattr(torch, "profiler", None), "_KinetoProfile", None)
    if isinstance(kineto_profile, type) and isinstance(source, kineto_profile):
        return True
    return hasattr(source, "_trace_metadata") or callable(getattr(source, "step", None))


def _require_trace_activities(result: Any) -> Any:
    """The result, if it has ``trace_activities()`` or (torch < 2.13) ``save()``."""
    if not hasattr(result, "trace_activities") and not hasattr(result, "save"):
        raise RuntimeError(
            "kinetrace needs torch >= 2.13 (for _ProfilerResult.trace_activities()); "
            f"found torch {_torch_version()}"
        )
    return result


def _getters(activities: list[Any], fields: Iterable[str]) -> dict[str, Callable[[Any], Any]]:
    """Accessors to map over activity lists: the unbound methods when every activity is of
    one type (the cheapest call from Python), ``methodcaller`` otherwise."""
    kinds = set(map(type, activities))
    if len(kinds) == 1:
        (kind,) = kinds
        if all(callable(getattr(kind, f, None)) for f in fields):
            return {f: getattr(kind, f) for f in fields}
    return {f: methodcaller(f) for f in fields}


def _select(items: list[Any], mask: bytes | bool | None) -> Iterable[Any]:
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


def export_chrome_trace(
    source: Any,
    path: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
    annotations: Mapping[int, Any] | None = None,
    graph_lanes: str = "none",
    default_stream: int = 7,
    *,
    base_time_ns: int | None = None,
    compresslevel: int | None = None,
    threads: int | None = None,
    background: bool = False,
    progress: bool = False,
    workers: int | None = None,
    keep: Any = None,
    split_mb: float | None = None,
) -> Any:
    """Write the trace of ``source`` to ``path`` in Chrome trace format.

    The bytes are those torch's own Python exporter writes for the same result, with two
    deliberate differences: the time base is the trimonth floor of the trace's own start
    (not of the wall clock at export time), and the file is always strict JSON (bad
    escapes, control characters and NaN/Infinity in names or metadata are repaired).

    On torch < 2.13 (no ``trace_activities()``) the file is Kineto's own output
    (``result.save``), made strict JSON and streamed into ``path`` (gzip for ``.gz``)
    without a full-size temporary file; a ``FallbackWarning`` (once per process) says so,
    ``metadata`` is added as top-level keys, ``base_time_ns``, ``workers`` and ``progress``
    do not apply, and ``background=True`` runs synchronously (see ``kinetrace._fallback``).

    Args:
        source: a stopped ``torch.profiler.profile``, a ``torch.autograd.profiler.profile``
            or a ``_ProfilerResult`` (anything with ``trace_activities()``). A profile's
            trace metadata (``add_metadata``/``add_metadata_json``) is written when
            ``metadata`` is None.
        path: destination. A name ending in ``.gz`` is written as one gzip member by the
            parallel encoder; anything else as plain JSON. The file appears only when the
            export succeeded (it is written beside the destination and renamed into
            place); a destination that exists and is not a regular file (a FIFO,
            ``/dev/null``) is written directly.
        metadata: extra top-level keys; each value is JSON text written as given (made
            valid if it is not).
        annotations: CUDA-graph annotations, graph node id -> annotation (a dict or a list
            of dicts), as ``torch.cuda.graph_annotations.get_kernel_annotations()`` returns
            them: each kernel, memcpy and memset whose metadata names an annotated
            ``"graph node id"`` gets the annotation's fields in its ``args`` (and the header
            says ``"cudaGraphInlineAnnotated": true``), as torch 2.15 writes them. An empty
            mapping means the same as None. See ``kinetrace._graphs``.
        graph_lanes: ``"none"`` (graphed events stay on their stream; a lane an annotation
            names is reported as ``args["annotated_stream"]``) or ``"all"`` (graphed events
            move to the lane their annotation names, else to ``default_stream``; needs
            ``annotations``).
        default_stream: the lane of graphed events whose annotation names none
            (``graph_lanes="all"``).
        base_time_ns: the time base to use instead of the trace's own (for reproducible
            output across exports).
        compresslevel: gzip level 0-9 for ``.gz`` paths (default
            :data:`DEFAULT_COMPRESSLEVEL`).
        threads: compression threads for ``.gz`` paths (default: the cores available).
        workers: processes that read activities in parallel (POSIX only; each reads and
            formats a contiguous slice; the trace text is byte-identical). Default: one per
            two cores available, at most 8, and one per 50,000 activities, so small traces
            and 2-core machines use one process. 1 disables forking. Each extra process
            costs about 180 bytes per activity of copy-on-write memory. Where ``os.fork``
            is missing, an explicit value above 1 warns and one process is used.
        progress: show a progress bar (events done, total, MB/s, ETA) on stderr; needs
            ``tqdm`` (``pip install kinetrace[progress]``).
        background: return at once (in milliseconds, whatever the trace size) and let a
            forked process read the activities and write the file while the caller goes
            on; the file is byte-identical to a foreground export's. Exports run one at a
            time; a call finding :data:`kinetrace._background.MAX_WAITING` exports waiting
            waits for room. Argument errors are raised by the call; everything else (a
            missing or unwritable directory, a full disk, an accessor that raises) by the
            handle's ``result()``, by :func:`wait`, or by the next export. See
            ``kinetrace._background`` for the design, memory bound and Ctrl-C handling.
            Where ``os.fork`` is missing the call returns once the fields are extracted and
            Rust threads format, compress and write the file.
        keep: a :class:`kinetrace.Keep` (or a dict of its fields): write only the events
            it selects, each byte-identical to the unfiltered export's, flows only when
            both ends are kept, process/thread metadata only for what remains. The full
            trace is written to a private temporary file beside ``path`` first (see
            ``kinetrace._split``). Not with ``background=True``.
        split_mb: write the trace as parts of at most this many MB of JSON, each a
            contiguous time window and a complete trace, named after ``path``
            (``x.part-001-of-004.json.gz`` for ``x.json.gz``; a TensorBoard name keeps its
            ``.pt.trace.json[.gz]`` ending). With ``keep``, the kept events are split. Not
            with ``background=True``.

    Returns:
        :class:`ExportStats`; with ``background=True`` an :class:`ExportHandle` whose
        ``result()`` gives them; with ``keep`` a :class:`kinetrace.FilterResult`, with
        ``split_mb`` a :class:`kinetrace.SplitResult`. :func:`wait` waits for all
        background exports, and they are waited for at interpreter exit.

    Raises:
        TypeError: ``source`` is not a profiler or result, or an accessor returned a value
            of the wrong type.
        RuntimeError: the profiler has not stopped, or the result has neither
            ``trace_activities()`` nor ``save()``.
        ValueError: ``compresslevel``, ``threads`` or ``workers`` out of range; a bad
            ``graph_lanes``, or ``"all"`` without ``annotations`` (torch's errors).
        OSError: the file cannot be written (its subclass tells why: ``FileNotFoundError``
            for a missing directory, ``IsADirectoryError``, ``PermissionError``, and
            ``OSError`` with ``errno.ENOSPC`` for a full disk). No partial file is left.
        KeyboardInterrupt: Ctrl-C; the export stops and removes its temporary file.
    """
    started = time.perf_counter()
    if keep is not None or split_mb is not None:
        if background:
            raise ValueError("keep= and split_mb= do not work with background=True")
        from kinetrace import _split

        return _split.export_cut(
            lambda full: export_chrome_trace(
                source,
                full,
                metadata,
                base_time_ns=base_time_ns,
                compresslevel=compresslevel,
                threads=threads,
                progress=progress,
                workers=workers,
                annotations=annotations,
                graph_lanes=graph_lanes,
                default_stream=default_stream,
            ),
            os.fsdecode(os.fspath(path)),
            keep,
            split_mb,
            compresslevel,
            threads,
        )
    _raise_unreported_errors()
    result, source_metadata = resolve_source(source)
    if metadata is None:
        metadata = source_metadata
    trace_name = os.fsdecode(os.fspath(path))
    is_gzip = trace_name.endswith(".gz")
    if compresslevel is not None:  # checked even where unused, so a typo never passes
        _check_range("compresslevel", compresslevel, 0, 9)
    level: int | None = None
    if is_gzip:
        level = DEFAULT_COMPRESSLEVEL if compresslevel is None else compresslevel
    n_threads = available_cpus() if threads is None else threads
    _check_range("threads", n_threads, 1, 256)

    if workers is not None:
        _check_range("workers", workers, 1, 256)
    graphs = _graphs.prepare(annotations, graph_lanes, default_stream)

    if not hasattr(result, "trace_activities"):  # torch < 2.13: Kineto's own writer
        from kinetrace import _fallback

        return _fallback.export_chrome_trace(
            result,
            trace_name,
            level,
            n_threads,
            started=started,
            background=background,
            metadata=metadata,
            ignored={
                "base_time_ns": base_time_ns is not None,
                "workers": workers is not None,
                "progress": progress,
                "annotations": graphs is not None,
            },
        )
    if background:
        from kinetrace import _background

        if _background.available():
            if base_time_ns is not None and (
                isinstance(base_time_ns, bool) or not isinstance(base_time_ns, int)
            ):
                raise TypeError(f"base_time_ns must be an int, not {type(base_time_ns).__name__}")
            handle = ExportHandle(
                _background.submit(
                    result,
                    trace_name,
                    metadata,
                    annotations=annotations,
                    graph_lanes=graph_lanes,
                    default_stream=default_stream,
                    base_time_ns=base_time_ns,
                    compresslevel=compresslevel,
                    threads=threads,
                    workers=workers,
                    progress=progress,
                ),
                trace_name,
                started,
            )
            with _pending_lock:
                _pending.append(handle)
            return handle
    activities = result.trace_activities()
    n_workers = _resolve_workers(workers, len(activities))
    with fifo_reader_ready(trace_name):
        exporter = _kinetrace._Exporter(trace_name, level, n_threads, bool(background))
    worker_outputs: list[Any] = []
    handed_over = False  # a background handle removes the worker outputs when done
    try:
        if graphs is not None:
            inline = graphs.inline_annotated(activities)
            exporter.set_graph_annotations(*graphs.native(inline))
        bar = _ProgressBar(len(activities), trace_name, exporter) if progress else None
        try:
            if n_workers > 1:
                from kinetrace import _workers

                worker_outputs = _workers.export_forked(
                    exporter,
                    activities,
                    activity_getters(activities),
                    n_workers,
                    trace_name,
                    level,
                    n_threads,
                    lambda ex: start_writer(ex, result, metadata, base_time_ns),
                    bar,
                    graphs,
                )
                exporter.close(trace_name)
            else:
                _extract(exporter, result, activities, metadata, base_time_ns, trace_name, bar)
        finally:
            if bar is not None:
                bar.close()
        if background:
            handle = ExportHandle(exporter, trace_name, started, worker_outputs)
            handed_over = True
            with _pending_lock:
                _pending.append(handle)
            return handle
        events, raw_bytes, file_bytes, _ = exporter.wait(None)
    except BaseException:
        exporter.abort()
        raise
    finally:
        if worker_outputs and not handed_over:
            from kinetrace import _workers

            _workers.remove_outputs(worker_outputs)
    return ExportStats(
        events=events,
        uncompressed_bytes=raw_bytes,
        file_bytes=file_bytes,
        seconds=time.perf_counter() - started,
        path=trace_name,
    )


class _ProgressBar:
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


@contextlib.contextmanager
def fifo_reader_ready(path: str) -> Iterator[None]:
    """Opening a FIFO that has no reader blocks, out of Ctrl-C's reach (the native open
    runs with the GIL released): wait for a reader here instead, where Ctrl-C works. The
    probe stays open as a writer until the block ends, so a reader that opens the FIFO for
    one writer does not see end-of-file between our probe and the real open."""
    probe = None
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False  # the real open reports it
    while is_fifo and probe is None:
        try:
            probe = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                break
            time.sleep(0.05)
    try:
        yield
    finally:
        if probe is not None:
            os.close(probe)


def _resolve_workers(workers: int | None, activities: int) -> int:
    from kinetrace import _workers

    if workers is None:
        return _workers.default_workers(activities)
    if workers > 1 and not _workers.can_fork():
        import warnings

        warnings.warn(
            f"workers={workers} needs os.fork, which this platform lacks; using one process",
            RuntimeWarning,
            stacklevel=3,
        )
        return 1
    return max(1, min(workers, activities))


def _check_range(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


Getters = dict[str, Callable[[Any], Any]]


def activity_getters(activities: list[Any]) -> Getters:
    """The accessors both passes use."""
    return _getters(activities, _FIRST_PASS_FIELDS + _SECOND_PASS_FIELDS)


def _batches(activities: Sequence[Any], span: range | None) -> Iterator[list[Any]]:
    """Slices of at most BATCH_SIZE activities over ``span`` (default: all), taken one at a
    time so a lazy sequence never holds more than a batch."""
    span = range(len(activities)) if span is None else span
    for lo in range(span.start, span.stop, BATCH_SIZE):
        yield activities[lo : min(lo + BATCH_SIZE, span.stop)]


def first_pass(
    exporter: Any, activities: Sequence[Any], get: Getters, span: range | None = None
) -> None:
    """Device, resource, timestamp and duration of every activity in ``span``, kept in Rust."""
    device, resource, timestamp, duration = (get[f] for f in _FIRST_PASS_FIELDS)
    for part in _batches(activities, span):
        exporter.add_first_pass(
            list(map(device, part)),
            list(map(resource, part)),
            list(map(timestamp, part)),
            list(map(duration, part)),
        )


def start_writer(
    exporter: Any, result: Any, metadata: Mapping[str, Any] | None, base_time_ns: int | None
) -> int:
    """Ends the first pass: picks the time base, queues the header. Returns the base."""
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
    bar: _ProgressBar | None = None,
    span: range | None = None,
) -> None:
    """The other fields of the activities in ``span``, batch by batch, each batch queued
    for the writer thread."""
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


def _extract(
    exporter: Any,
    result: Any,
    activities: list[Any],
    metadata: Mapping[str, Any] | None,
    base_time_ns: int | None,
    trace_name: str,
    bar: _ProgressBar | None = None,
) -> None:
    """Both passes over the activities in this process; ends with the tail queued."""
    get = activity_getters(activities)
    first_pass(exporter, activities, get)
    start_writer(exporter, result, metadata, base_time_ns)
    second_pass(exporter, activities, get, bar)
    exporter.close(trace_name)
