"""``export_chrome_trace``: pull activity fields in columnar batches, format them in Rust.

``background=True`` runs this same export in a forked process (``kinetrace._export.background``);
the handles of such exports, and the waiting for them, live in ``kinetrace._export.handles``, the
passes in ``kinetrace._export.extract``. This module only orchestrates.

Data flow: ``trace_activities()`` -> first pass (device, resource, timestamp, duration of every
activity, kept in Rust: 32 bytes an activity) -> header -> second pass, batch by batch (the
other fields, read only where the format needs them) -> a Rust writer thread that formats,
compresses and writes while Python extracts the next batch.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kinetrace import _kinetrace
from kinetrace._env import (
    DEFAULT_COMPRESSLEVEL,
    _torch_version,
    available_cpus,
    fifo_reader_ready,
    require_in_range,
)
from kinetrace._export import graphs as _graphs
from kinetrace._export.extract import ProgressBar, activity_getters, end_first_pass, extract_here
from kinetrace._export.handles import (
    ExportHandle,
    ExportStats,
    _raise_unreported_errors,
    add_pending,
    wait,
)

if TYPE_CHECKING:
    from kinetrace._tools.split import Keep

__all__ = [
    "DEFAULT_COMPRESSLEVEL",
    "ExportHandle",
    "ExportOptions",
    "ExportStats",
    "export",
    "export_chrome_trace",
    "export_here",
    "parameters",
    "wait",
]


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
        return source, None  # a torch < 2.13 _ProfilerResult: see kinetrace._export.fallback
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
    without a full-size temporary file; a ``FallbackWarning`` says so (each distinct
    message once per process),
    ``metadata`` is added as top-level keys, ``base_time_ns``, ``workers`` and ``progress``
    do not apply, and ``background=True`` runs synchronously (see ``kinetrace._export.fallback``).

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
            mapping means the same as None. See ``kinetrace._export.graphs``.
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
            formats a contiguous slice; the trace text is byte-identical). Default for
            torch's activities: ``sqrt(activities / 30,000)`` rounded (one below ~68k
            activities, two from there, three at 300k), at most one per two idle cores
            (one process on a 2-core machine) and 16, within
            64 MiB + 64 bytes an activity for the whole export (see
            ``kinetrace._export.workers.default_workers``); one process for look-alike activities
            whose accessors are Python code. 1 disables forking. A worker reads torch's
            activities without copying them and costs ~6-9 MiB. Where ``os.fork`` is
            missing, an explicit value above 1 warns and one process is used.
        progress: show a progress bar (events done, total, MB/s, ETA) on stderr; needs
            ``tqdm`` (``pip install kinetrace[progress]``).
        background: return at once (in milliseconds, whatever the trace size) and let a
            forked process read the activities and write the file while the caller goes
            on; the file is byte-identical to a foreground export's. Exports run one at a
            time; a call finding :data:`kinetrace._export.background.MAX_WAITING` exports waiting
            waits for room. Argument errors are raised by the call; everything else (a
            missing or unwritable directory, a full disk, an accessor that raises) by the
            handle's ``result()``, by :func:`wait`, or by the next export. See
            ``kinetrace._export.background`` for the design, memory bound and Ctrl-C handling.
            Where ``os.fork`` is missing the call returns once the fields are extracted and
            Rust threads format, compress and write the file.
        keep: a :class:`kinetrace.Keep` (or a dict of its fields): write only the events
            it selects, each byte-identical to the unfiltered export's, flows only when
            both ends are kept, process/thread metadata only for what remains. The full
            trace is written to a private temporary file beside ``path`` first (see
            ``kinetrace._tools.split``). Not with ``background=True`` (a ``ValueError``, here and
            from :func:`kinetrace.tensorboard_trace_handler`).
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
            ``graph_lanes``, or ``"all"`` without ``annotations`` (torch's errors);
            ``keep``/``split_mb`` with ``background=True``.
        OSError: the file cannot be written (its subclass tells why: ``FileNotFoundError``
            for a missing directory, ``IsADirectoryError``, ``PermissionError``, and
            ``OSError`` with ``errno.ENOSPC`` for a full disk). No partial file is left.
        KeyboardInterrupt: Ctrl-C; the export stops and removes its temporary file. It is
            seen within ~50 ms, except during torch's ``trace_activities()`` (one call at the
            start that holds the GIL, ~0.5-1.1 µs an activity: ~1 s at 1.5M activities),
            where it is seen when that call returns.
    """
    started = time.perf_counter()
    return export(source, path, ExportOptions.of_call(locals()), started)


def export(
    source: Any,
    path: str | os.PathLike[str],
    options: ExportOptions,
    started: float | None = None,
) -> Any:
    """:func:`export_chrome_trace` with its parameters already checked (``options``): what
    it and :func:`kinetrace.tensorboard_trace_handler`'s handler run. ``started``: the
    ``time.perf_counter()`` the export's seconds count from (default: now)."""
    if started is None:
        started = time.perf_counter()
    trace_name = os.fsdecode(os.fspath(path))
    _raise_unreported_errors()
    result, source_metadata = resolve_source(source)
    if options.metadata is None and source_metadata is not None:
        options = options.but(metadata=dict(source_metadata))
    if options.keep is not None or options.split_mb is not None:
        return _export_cut(result, trace_name, options)
    if not hasattr(result, "trace_activities"):  # torch < 2.13: Kineto's own writer
        return _export_fallback(result, trace_name, options, started)
    if options.background and _background_available():
        return _export_background(result, trace_name, options, started)
    return export_here(result, trace_name, options, started)


# --------------------------------------------------------------------------------------
# the settings of one export
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """The parameters of one export, defined once: each field is the keyword of
    :func:`export_chrome_trace` of the same name, with the same default (its signature
    spells them out for readers and type checkers; ``tests/test_errors.py`` checks that the
    two agree). Made from the caller's values, checked and normalised once (the errors
    :func:`export_chrome_trace` documents, before anything is read or written), and shared
    by every path an export can take and by :func:`kinetrace.tensorboard_trace_handler`, so
    that one combination behaves the same wherever it is given.

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range.
    """

    metadata: Mapping[str, Any] | None = None
    annotations: Mapping[int, Any] | None = None
    graph_lanes: str = "none"
    default_stream: int = 7
    base_time_ns: int | None = None
    compresslevel: int | None = None
    threads: int | None = None
    background: bool = False
    progress: bool = False
    workers: int | None = None
    keep: Keep | None = None
    split_mb: float | None = None
    #: The CUDA-graph arguments prepared for the writer (None without annotations): made
    #: from ``annotations``, ``graph_lanes`` and ``default_stream``, not given.
    graphs: _graphs.Graphs | None = dataclasses.field(
        init=False, default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.compresslevel is not None:  # checked even for plain JSON: a typo never passes
            require_in_range("compresslevel", self.compresslevel, 0, 9)
        if self.threads is not None:
            require_in_range("threads", self.threads, 1, 256)
        if self.workers is not None:
            require_in_range("workers", self.workers, 1, 256)
        base = self.base_time_ns
        if base is not None and (isinstance(base, bool) or not isinstance(base, int)):
            raise TypeError(f"base_time_ns must be an int, not {type(base).__name__}")
        if (self.keep is not None or self.split_mb is not None) and self.background:
            raise ValueError("keep= and split_mb= do not work with background=True")
        from kinetrace._tools import split as _split

        normalised = {
            "metadata": None if self.metadata is None else dict(self.metadata),
            "background": bool(self.background),
            "progress": bool(self.progress),
            "keep": _split.as_keep(self.keep),
            "split_mb": None if self.split_mb is None else _split.check_part_size(self.split_mb),
            "graphs": _graphs.prepare(self.annotations, self.graph_lanes, self.default_stream),
        }
        for name, value in normalised.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of_call(cls, arguments: Mapping[str, Any]) -> ExportOptions:
        """The options of one call of :func:`export_chrome_trace`, from its ``locals()``."""
        return cls(**{field.name: arguments[field.name] for field in parameters()})

    def but(self, **changes: Any) -> ExportOptions:
        """A copy with ``changes`` to fields that need no check (``metadata``, ``keep``,
        ``split_mb`` or ``background``, to values this class made or None/False), without
        checking and preparing the rest again: the annotations are rendered once."""
        if not changes.keys() <= {"metadata", "keep", "split_mb", "background"}:
            raise TypeError(f"ExportOptions.but() changes no {sorted(changes)}")
        changed = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(changed, name, value)
        return changed

    def gzip_level(self, trace_name: str) -> int | None:
        """The gzip level for ``trace_name`` (None: plain JSON)."""
        if not trace_name.endswith(".gz"):
            return None
        return DEFAULT_COMPRESSLEVEL if self.compresslevel is None else self.compresslevel

    def gzip_threads(self) -> int:
        return available_cpus() if self.threads is None else self.threads


def parameters() -> tuple[dataclasses.Field[Any], ...]:
    """The export's parameters (after ``source`` and ``path``), in the order of
    :func:`export_chrome_trace`'s signature."""
    return tuple(field for field in dataclasses.fields(ExportOptions) if field.init)


# --------------------------------------------------------------------------------------
# the paths of an export
# --------------------------------------------------------------------------------------


def _export_cut(result: Any, trace_name: str, options: ExportOptions) -> Any:
    """``keep=`` / ``split_mb=``: the full trace to a private temporary file, then cut."""
    from kinetrace._tools import split as _split

    full = options.but(keep=None, split_mb=None)

    def export_full(tmp: str) -> Any:
        if not hasattr(result, "trace_activities"):
            return _export_fallback(result, tmp, full, time.perf_counter())
        return export_here(result, tmp, full, time.perf_counter())

    return _split.export_cut(
        export_full,
        trace_name,
        options.keep,
        options.split_mb,
        options.compresslevel,
        options.threads,
    )


def _export_fallback(
    result: Any, trace_name: str, options: ExportOptions, started: float
) -> ExportStats | ExportHandle:
    """torch < 2.13: Kineto's own writer, streamed into place (``kinetrace._export.fallback``)."""
    from kinetrace._export import fallback as _fallback

    return _fallback.export_chrome_trace(
        result,
        trace_name,
        options.gzip_level(trace_name),
        options.gzip_threads(),
        started=started,
        background=options.background,
        metadata=options.metadata,
        ignored={
            "base_time_ns": options.base_time_ns is not None,
            "workers": options.workers is not None,
            "progress": options.progress,
            "annotations": options.graphs is not None,
        },
    )


def _background_available() -> bool:
    from kinetrace._export import background as _background

    return _background.available()


def _export_background(
    result: Any, trace_name: str, options: ExportOptions, started: float
) -> ExportHandle:
    """``background=True`` where ``os.fork`` exists: a queued job whose forked child runs
    :func:`export_here` (``kinetrace._export.background``)."""
    from kinetrace._export import background as _background

    foreground = options.but(background=False)
    job = _background.submit(
        lambda res, path: export_here(res, path, foreground, time.perf_counter()),
        result,
        trace_name,
    )
    handle = ExportHandle(job, trace_name, started)
    add_pending(handle)
    return handle


def export_here(result: Any, trace_name: str, options: ExportOptions, started: float) -> Any:
    """The export in this process (and its ``workers=``), from ``trace_activities()``.

    With ``options.background`` (only where ``os.fork`` is missing) it returns an
    :class:`ExportHandle` once the fields are read, Rust threads finishing the file;
    otherwise the :class:`ExportStats` of the finished file.
    """
    level = options.gzip_level(trace_name)
    n_threads = options.gzip_threads()
    activities = result.trace_activities()
    get = activity_getters(activities)
    n_workers = _resolve_workers(options.workers, len(activities), get.direct)
    with fifo_reader_ready(trace_name):
        exporter = _kinetrace._Exporter(trace_name, level, n_threads, options.background)
    worker_outputs: list[Any] = []
    handed_over = False  # a background handle removes the worker outputs when done
    try:
        graphs = options.graphs
        if graphs is not None:
            exporter.set_graph_annotations(*graphs.native(graphs.inline_annotated(activities)))
        bar = ProgressBar(len(activities), trace_name, exporter) if options.progress else None
        try:
            if n_workers > 1:
                from kinetrace._export import workers as _workers

                worker_outputs = _workers.export_forked(
                    exporter,
                    activities,
                    get,
                    n_workers,
                    trace_name,
                    level,
                    n_threads,
                    lambda ex: end_first_pass(ex, result, options.metadata, options.base_time_ns),
                    bar,
                    graphs,
                )
                exporter.close(trace_name)
            else:
                extract_here(
                    exporter,
                    result,
                    activities,
                    options.metadata,
                    options.base_time_ns,
                    trace_name,
                    bar,
                    get,
                )
        finally:
            if bar is not None:
                bar.close()
        # Every field is read: the activity objects are freed now, while the writer thread
        # finishes, not after it.
        del activities
        if options.background:
            handle = ExportHandle(exporter, trace_name, started, worker_outputs)
            handed_over = True
            add_pending(handle)
            return handle
        events, raw_bytes, file_bytes, _ = exporter.wait(None)
    except BaseException:
        exporter.abort()
        raise
    finally:
        if worker_outputs and not handed_over:
            from kinetrace._export import workers as _workers

            _workers.remove_outputs(worker_outputs)
    return ExportStats(
        events=events,
        uncompressed_bytes=raw_bytes,
        file_bytes=file_bytes,
        seconds=time.perf_counter() - started,
        path=trace_name,
    )


def _resolve_workers(workers: int | None, activities: int, direct: bool) -> int:
    from kinetrace._export import workers as _workers

    if workers is None:
        return _workers.default_workers(activities, direct)
    if workers > 1 and not _workers.can_fork():
        import warnings

        warnings.warn(
            f"workers={workers} needs os.fork, which this platform lacks; using one process",
            RuntimeWarning,
            stacklevel=3,
        )
        return 1
    return max(1, min(workers, activities))
