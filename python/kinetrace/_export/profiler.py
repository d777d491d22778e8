"""The profiler lifecycle in Python: ``profile``, ``schedule``, ``tensorboard_trace_handler``
and ``install()``.

Everything here leaves torch's behaviour alone except where a trace is written: the
profiler's actions, warnings, step annotations and results are torch's own (``profile``
subclasses ``torch.profiler.profile`` and overrides only ``export_chrome_trace``), and the
trace goes through :func:`kinetrace.export_chrome_trace`, whose bytes equal those of torch's
Python exporter (``use_python_export=True``).

CUDA-graph annotations (``cuda_graph_annotations``, ``graph_lanes``, ``default_stream``) are
written by kinetrace too. What kinetrace does not do is handed to torch's own exporter: the
Cuspy backend, and legacy (non-Kineto) autograd profiles.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.autograd.profiler as _autograd_profiler
import torch.profiler
import torch.profiler.profiler as _torch_profiler
from torch.profiler import ProfilerAction, ProfilerActivity

from kinetrace._export import export as _export

__all__ = [
    "ProfilerAction",
    "install",
    "installed",
    "installed_context",
    "profile",
    "schedule",
    "tensorboard_trace_handler",
    "uninstall",
]

_EXPORT = "export_chrome_trace"
_HANDLER = "tensorboard_trace_handler"


def _owner(cls: type, name: str) -> type:
    """The class in ``cls``'s MRO that defines ``name`` (where a patch has to go)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    raise AttributeError(f"{cls.__qualname__} has no attribute {name!r}")


# Where torch defines the two export methods (``_KinetoProfile`` and the autograd
# ``profile`` on torch 2.13-2.15), found once, before anything here patches them.
_KINETO_OWNER = _owner(torch.profiler.profile, _EXPORT)
_AUTOGRAD_OWNER = _owner(_autograd_profiler.profile, _EXPORT)


# --------------------------------------------------------------------------------------
# schedule
# --------------------------------------------------------------------------------------


class _Schedule:
    """The callable :func:`schedule` returns (picklable, with a readable repr)."""

    __slots__ = ("active", "repeat", "skip_first", "skip_first_wait", "wait", "warmup")

    def __init__(
        self,
        wait: int,
        warmup: int,
        active: int,
        repeat: int,
        skip_first: int,
        skip_first_wait: int,
    ) -> None:
        self.wait = wait
        self.warmup = warmup
        self.active = active
        self.repeat = repeat
        self.skip_first = skip_first
        self.skip_first_wait = skip_first_wait

    def __call__(self, step: int) -> ProfilerAction:
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < self.skip_first:
            return ProfilerAction.NONE
        # Position counted from the end of the skipped steps; skipping the first wait
        # amounts to starting the count ``wait`` steps into the first cycle.
        step -= self.skip_first
        if self.skip_first_wait != 0:
            step += self.wait
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step >= self.repeat * cycle:
            return ProfilerAction.NONE
        phase = step % cycle
        if phase < self.wait:
            return ProfilerAction.NONE
        if phase < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        if phase < cycle - 1:
            return ProfilerAction.RECORD
        return ProfilerAction.RECORD_AND_SAVE

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in _SCHEDULE_ARGS)
        return f"kinetrace.schedule({args})"


_SCHEDULE_ARGS = ("wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait")


def schedule(
    *,
    wait: int,
    warmup: int,
    active: int,
    repeat: int = 0,
    skip_first: int = 0,
    skip_first_wait: int = 0,
) -> Callable[[int], ProfilerAction]:
    """A profiler schedule: the same actions, errors and warnings as ``torch.profiler.schedule``.

    The profiler skips the first ``skip_first`` steps, then cycles: ``wait`` steps idle
    (:attr:`ProfilerAction.NONE`), ``warmup`` steps warming up, ``active`` steps recording,
    the last of them :attr:`ProfilerAction.RECORD_AND_SAVE` (when ``on_trace_ready`` runs).
    ``repeat`` bounds the number of cycles (0: no bound). A non-zero ``skip_first_wait``
    drops the ``wait`` phase of the first cycle only.

    Args:
        wait: idle steps at the start of each cycle (>= 0).
        warmup: warm-up steps per cycle (>= 0; 0 warns, as torch does).
        active: recorded steps per cycle (> 0).
        repeat: cycles to run, 0 for as many as there are steps (>= 0).
        skip_first: steps to skip before the first cycle (>= 0).
        skip_first_wait: non-zero to skip the first cycle's ``wait`` steps.

    Returns:
        A callable mapping a step number (>= 0) to a :class:`ProfilerAction`.

    Raises:
        AssertionError: an argument is out of range (torch raises the same, with the same
            message).
    """
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), "
            f"warmup={warmup} (need >= 0), active={active} (need > 0), "
            f"repeat={repeat} (need >= 0), skip_first={skip_first} (need >= 0)."
        )
    if warmup == 0:
        warnings.warn(
            "Profiler won't be using warmup, this can skew profiler results", stacklevel=2
        )
    return _Schedule(wait, warmup, active, repeat, skip_first, skip_first_wait)


# --------------------------------------------------------------------------------------
# export through kinetrace, or through torch for what kinetrace does not do
# --------------------------------------------------------------------------------------


def _torch_method(owner: type, name: str) -> Any:
    """torch's own ``owner.name``: the one saved by :func:`install`, else the current one."""
    with _lock:
        for target, attr, original in _saved:
            if target is owner and attr == name:
                return original
    return vars(owner)[name]


def _torch_options(
    use_python_export: bool,
    cuda_graph_annotations: Mapping[int, Any] | None,
    graph_lanes: str,
    default_stream: int,
) -> dict[str, Any]:
    """The torch-only arguments the caller set (only those: older torch lacks some)."""
    options: dict[str, Any] = {}
    if use_python_export:
        options["use_python_export"] = use_python_export
    if cuda_graph_annotations is not None:
        options["cuda_graph_annotations"] = cuda_graph_annotations
    if graph_lanes != "none":
        options["graph_lanes"] = graph_lanes
    if default_stream != 7:
        options["default_stream"] = default_stream
    return options


def _export_or_defer(
    owner: type,
    profile: Any,
    path: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None,
    *,
    torch_writes: bool,
    torch_args: tuple[Any, ...] = (),
    use_python_export: bool,
    cuda_graph_annotations: Mapping[int, Any] | None,
    graph_lanes: str,
    default_stream: int,
    compresslevel: int | None,
    threads: int | None,
    background: bool,
) -> Any:
    """The body of both export methods :func:`install` puts over torch's: where
    ``torch_writes``, torch's own method (``owner``'s, given ``torch_args`` after the path and
    the torch-only options the caller set); otherwise :func:`kinetrace.export_chrome_trace`
    with the options the caller set (kinetrace's own defaults for the others)."""
    if torch_writes:
        options = _torch_options(
            use_python_export, cuda_graph_annotations, graph_lanes, default_stream
        )
        return _torch_method(owner, _EXPORT)(profile, path, *torch_args, **options)
    return _export.export_chrome_trace(
        profile,
        path,
        metadata,
        annotations=cuda_graph_annotations,
        graph_lanes=graph_lanes,
        default_stream=default_stream,
        compresslevel=compresslevel,
        threads=threads,
        background=background,
    )


def _kineto_profile_export_chrome_trace(
    self: Any,
    path: str | os.PathLike[str],
    use_python_export: bool = False,
    cuda_graph_annotations: Mapping[int, Any] | None = None,
    graph_lanes: str = "none",
    default_stream: int = 7,
    *,
    compresslevel: int | None = None,
    threads: int | None = None,
    background: bool = False,
) -> Any:
    """Export the last profiling cycle's trace in Chrome JSON format, through kinetrace.

    Same signature as ``torch.profiler.profile.export_chrome_trace``; the file is written
    by :func:`kinetrace.export_chrome_trace` and equals what torch's Python exporter
    (``use_python_export=True``) writes, CUDA-graph annotations included.
    ``use_python_export`` therefore changes nothing.

    torch's own implementation runs instead (kinetrace does not do these) when the profile
    uses the Cuspy backend, and when the profiler was never started (torch's
    ``AssertionError``). Those exports are synchronous and return None whatever
    ``background`` says.

    Args:
        path: destination; ``.gz`` is written as gzip.
        use_python_export: accepted for compatibility (kinetrace writes what torch's Python
            exporter writes).
        cuda_graph_annotations: CUDA-graph kernel annotations, graph node id -> annotation
            (``annotations`` of :func:`kinetrace.export_chrome_trace`).
        graph_lanes: ``"none"`` or ``"all"`` (move graphed events onto their lanes).
        default_stream: the lane of graphed events whose annotation names none (with
            ``graph_lanes="all"``).
        compresslevel: gzip level for ``.gz`` paths (kinetrace's default when None).
        threads: compression threads for ``.gz`` paths.
        background: export on kinetrace's background writer and return its handle.

    Returns:
        kinetrace's :class:`~kinetrace.ExportStats` (or a background handle); None when
        torch wrote the trace.
    """
    return _export_or_defer(
        _KINETO_OWNER,
        self,
        path,
        None,
        torch_writes=getattr(self, "_use_cuspy", False) or self.profiler is None,
        use_python_export=use_python_export,
        cuda_graph_annotations=cuda_graph_annotations,
        graph_lanes=graph_lanes,
        default_stream=default_stream,
        compresslevel=compresslevel,
        threads=threads,
        background=background,
    )


def _autograd_profile_export_chrome_trace(
    self: Any,
    path: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
    use_python_export: bool = False,
    cuda_graph_annotations: Mapping[int, Any] | None = None,
    graph_lanes: str = "none",
    default_stream: int = 7,
    *,
    compresslevel: int | None = None,
    threads: int | None = None,
    background: bool = False,
) -> Any:
    """``torch.autograd.profiler.profile.export_chrome_trace`` through kinetrace.

    Installed by :func:`kinetrace.install`. Same signature as torch's (CUDA-graph
    annotations are written by kinetrace, as for ``profile``); torch's own implementation
    runs for a disabled profiler (``enabled=False``) and where Kineto is not available.
    """
    return _export_or_defer(
        _AUTOGRAD_OWNER,
        self,
        path,
        metadata,
        torch_writes=not getattr(self, "enabled", True)
        or not torch._C._autograd.kineto_available(),
        torch_args=(metadata,),
        use_python_export=use_python_export,
        cuda_graph_annotations=cuda_graph_annotations,
        graph_lanes=graph_lanes,
        default_stream=default_stream,
        compresslevel=compresslevel,
        threads=threads,
        background=background,
    )


# --------------------------------------------------------------------------------------
# profile
# --------------------------------------------------------------------------------------


def _torch_profile_takes(name: str) -> bool:
    parameters = inspect.signature(torch.profiler.profile.__init__).parameters
    return name in parameters


def _activities_for_use_cuda(activities: Iterable[Any] | None, use_cuda: bool) -> list[Any]:
    """``activities`` with CUDA added (``use_cuda=True``) or removed (False), as torch did
    while it accepted ``use_cuda``."""
    if activities is None:
        activities = torch.profiler.supported_activities()  # type: ignore[no-untyped-call]
    items = list(activities)

    def is_cuda(item: Any) -> bool:
        return bool(item == ProfilerActivity.CUDA)

    has_cuda = any(
        ProfilerActivity.CUDA in item if isinstance(item, dict) else is_cuda(item) for item in items
    )
    if use_cuda:
        return items if has_cuda else [*items, ProfilerActivity.CUDA]
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            rest = {k: v for k, v in item.items() if k != ProfilerActivity.CUDA}
            if rest:
                kept.append(rest)
        elif not is_cuda(item):
            kept.append(item)
    return kept


class profile(torch.profiler.profile):
    """``torch.profiler.profile`` whose traces are written by kinetrace.

    Takes every argument ``torch.profiler.profile`` takes (they are passed through, so
    arguments of newer or older torch releases keep working) and behaves the same: schedule
    actions and their warnings, ``ProfilerStep#N`` annotations, the step tracker, the
    execution-trace observer, ``on_trace_ready``, metadata, ``key_averages()``,
    ``events()``, ``export_stacks()`` and ``export_memory_timeline()`` are torch's own.
    Only :meth:`export_chrome_trace` differs: it goes through
    :func:`kinetrace.export_chrome_trace` (see there for what torch still handles).

    ``use_cuda`` (deprecated and since removed from torch) is still accepted: where torch
    no longer takes it, it adds ``ProfilerActivity.CUDA`` to (True) or removes it from
    (False) ``activities``, with the ``FutureWarning`` torch used to give.

    Example::

        with kinetrace.profile(
            schedule=kinetrace.schedule(wait=1, warmup=1, active=2),
            on_trace_ready=kinetrace.tensorboard_trace_handler("./log"),
        ) as prof:
            for batch in loader:
                train_step(batch)
                prof.step()
    """

    def __init__(self, *, use_cuda: bool | None = None, **kwargs: Any) -> None:
        if use_cuda is not None:
            if _torch_profile_takes("use_cuda"):
                kwargs["use_cuda"] = use_cuda
            else:
                warnings.warn(
                    "`use_cuda` is deprecated, use `activities` argument instead",
                    FutureWarning,
                    stacklevel=2,
                )
                kwargs["activities"] = _activities_for_use_cuda(kwargs.get("activities"), use_cuda)
        super().__init__(**kwargs)
        if not hasattr(self, "_trace_metadata"):
            # torch < 2.13 keeps no metadata of its own (it hands each value to Kineto,
            # which rewrites backslashes): kinetrace carries it and writes it as given.
            self._trace_metadata: dict[str, str] = {}
            self._kinetrace_carries_metadata = True

    export_chrome_trace = _kineto_profile_export_chrome_trace

    def add_metadata(self, key: str, value: str) -> None:
        """Adds a string value to the trace's top-level metadata, as torch's does, but
        escaped as JSON: torch escapes only quotes, so a backslash (a Windows path) or a
        control character in ``value`` made its whole trace invalid or changed the value.
        A value of plain text is written exactly as torch writes it. On torch < 2.13 the
        value is kept here (not handed to Kineto, which writes every backslash as ``/``) and
        written by kinetrace's exports of this profile."""
        wrapped = json.dumps(value, ensure_ascii=False)
        self._trace_metadata[key] = wrapped
        if not getattr(self, "_kinetrace_carries_metadata", False):
            torch._C._autograd._add_metadata_json(key, wrapped)


def _init_signature() -> inspect.Signature:
    """torch's constructor signature, plus ``use_cuda`` where torch dropped it (for help()
    and IDEs; the constructor itself forwards whatever it is given)."""
    signature = inspect.signature(torch.profiler.profile.__init__)
    parameters = list(signature.parameters.values())
    if "use_cuda" not in signature.parameters:
        use_cuda = inspect.Parameter(
            "use_cuda", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="bool | None"
        )
        at = next(
            (i for i, p in enumerate(parameters) if p.kind is inspect.Parameter.VAR_KEYWORD),
            len(parameters),
        )
        parameters.insert(at, use_cuda)
    return signature.replace(parameters=parameters)


with contextlib.suppress(TypeError, ValueError):  # introspection only: never fail the import
    profile.__init__.__signature__ = _init_signature()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------
# tensorboard_trace_handler
# --------------------------------------------------------------------------------------


def tensorboard_trace_handler(
    dir_name: str | os.PathLike[str],
    worker_name: str | None = None,
    use_gzip: bool = False,
    use_python_export: bool = False,
    *,
    background: bool = False,
    keep: Any = None,
    split_mb: float | None = None,
) -> Callable[[Any], Any]:
    """An ``on_trace_ready`` handler writing TensorBoard trace files through kinetrace.

    Same files as ``torch.profiler.tensorboard_trace_handler``: the directory is created
    on the first trace (``RuntimeError("Can't create directory: ...")`` when it cannot
    be), and each trace goes to ``{dir_name}/{worker_name}.{time.time_ns()}.pt.trace.json``
    (``.gz`` appended with ``use_gzip``), ``worker_name`` defaulting to
    ``"{hostname}_{pid}"``. Works with :class:`kinetrace.profile` and with a plain
    ``torch.profiler.profile`` (a Cuspy profile is exported by its own method).

    Args:
        dir_name: directory for the trace files (TensorBoard's log directory).
        worker_name: file name prefix; unique per worker in distributed runs.
        use_gzip: write gzip-compressed ``.pt.trace.json.gz`` files.
        use_python_export: accepted for compatibility with torch's handler (kinetrace
            writes what torch's Python exporter writes).
        background: export each trace in a forked background process so that the
            ``on_trace_ready`` call returns in milliseconds and the training loop goes on
            while the activities are read and the file is written; the handler then
            returns the export's handle (``.result()``, ``.done()``) and
            :func:`kinetrace.wait` waits for all of them.
        keep: write only the events a :class:`kinetrace.Keep` (or a dict of its fields)
            selects (see :func:`kinetrace.export_chrome_trace`). ``keep`` and ``split_mb``
            do not work with ``background=True``: ``ValueError`` here, as from
            :func:`kinetrace.export_chrome_trace`.
        split_mb: write each trace as parts of at most this many MB of JSON,
            ``{worker_name}.{ns}.part-001-of-004.pt.trace.json[.gz]``.

    Returns:
        The handler: called with the profiler, it returns what the export returns
        (:class:`~kinetrace.ExportStats`, or a handle with ``background=True``).
    """

    # Checked here, once: the settings export_chrome_trace would refuse are refused before
    # any trace, and every trace is exported with these same options.
    options = _export.ExportOptions(background=background, keep=keep, split_mb=split_mb)
    if background:
        from kinetrace._export import background as _background

        _background.prestart()

    def handler_fn(prof: Any) -> Any:
        nonlocal worker_name
        if not os.path.isdir(dir_name):
            try:
                os.makedirs(dir_name, exist_ok=True)
            except Exception as e:
                raise RuntimeError("Can't create directory: " + os.fsdecode(dir_name)) from e
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        # Nanoseconds, as torch, so that consecutive traces do not clash.
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json"
        if use_gzip:
            file_name = file_name + ".gz"
        path = os.path.join(dir_name, file_name)
        if getattr(prof, "_use_cuspy", False):
            return prof.export_chrome_trace(path, use_python_export=use_python_export)
        return _export.export(prof, path, options)

    return handler_fn


# --------------------------------------------------------------------------------------
# install / uninstall
# --------------------------------------------------------------------------------------

_lock = threading.RLock()
# A fork waits for an install() or uninstall() in progress: the child gets the patches all
# in place or none, and the lock free.
os.register_at_fork(
    before=_lock.acquire, after_in_parent=_lock.release, after_in_child=_lock.release
)
# (owner, attribute, torch's object) for every patch in place; empty when not installed.
_saved: list[tuple[Any, str, Any]] = []


def _patches() -> list[tuple[Any, str, Any]]:
    return [
        (_KINETO_OWNER, _EXPORT, _kineto_profile_export_chrome_trace),
        (_AUTOGRAD_OWNER, _EXPORT, _autograd_profile_export_chrome_trace),
        (torch.profiler, _HANDLER, tensorboard_trace_handler),
        (_torch_profiler, _HANDLER, tensorboard_trace_handler),
    ]


def install() -> None:
    """Make torch's own profiler API write traces through kinetrace.

    Afterwards ``torch.profiler.profile(...).export_chrome_trace(path)``,
    ``torch.autograd.profiler.profile(...).export_chrome_trace(path)`` and
    ``torch.profiler.tensorboard_trace_handler(...)`` (looked up from ``torch.profiler``
    or ``torch.profiler.profiler`` after this call) use kinetrace (CUDA-graph annotations
    included); calls asking for what only torch does (Cuspy) still reach torch's code. Installing
    twice changes nothing; :func:`uninstall` puts torch's objects back.

    A name bound before ``install()`` (``from torch.profiler import
    tensorboard_trace_handler``) keeps torch's handler; methods are patched on the
    classes, so every profiler, old or new, is affected.
    """
    with _lock:
        if _saved:
            return
        for owner, name, replacement in _patches():
            original = vars(owner)[name]
            _saved.append((owner, name, original))
            setattr(owner, name, replacement)


def uninstall() -> None:
    """Undo :func:`install`: torch's original functions are back (the same objects).

    Does nothing when kinetrace is not installed.
    """
    with _lock:
        while _saved:
            owner, name, original = _saved.pop()
            setattr(owner, name, original)


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    with _lock:
        return bool(_saved)


@contextlib.contextmanager
def installed_context() -> Iterator[None]:
    """``with kinetrace.installed_context():`` -- :func:`install` for the block.

    On leaving, kinetrace is uninstalled unless it was already installed on entering.
    """
    with _lock:
        was_installed = bool(_saved)
        install()
    try:
        yield
    finally:
        if not was_installed:
            uninstall()
