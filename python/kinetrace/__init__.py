"""kinetrace: fast, exact Chrome-trace export for the PyTorch profiler.

>>> import kinetrace
>>> kinetrace.export_chrome_trace(prof, "trace.json.gz")

The profiler lifecycle names (``profile``, ``schedule``, ``tensorboard_trace_handler``,
``install``, ...) import torch, so they load on first use: ``import kinetrace`` stays cheap.
"""

from typing import TYPE_CHECKING, Any

from kinetrace._check import CheckReport, Example, Finding, TraceInfo, TrackCount, check_trace
from kinetrace._compress import CompressResult, compress_trace
from kinetrace._errors import TraceFormatError
from kinetrace._export import (
    DEFAULT_COMPRESSLEVEL,
    ExportHandle,
    ExportStats,
    export_chrome_trace,
    wait,
)
from kinetrace._fallback import FallbackWarning
from kinetrace._gzip import GzipWriter
from kinetrace._kinetrace import __version__
from kinetrace._merge import MergedProcess, MergedRank, MergeResult, MergeWarning, merge_traces
from kinetrace._repair import Change, RepairReport, repair_trace
from kinetrace._split import FilterResult, Keep, Part, SplitResult, filter_trace, split_trace
from kinetrace._workers import WorkerError

if TYPE_CHECKING:
    from kinetrace._profiler import (
        ProfilerAction,
        install,
        installed,
        installed_context,
        profile,
        schedule,
        tensorboard_trace_handler,
        uninstall,
    )

_PROFILER_NAMES = frozenset(
    {
        "ProfilerAction",
        "install",
        "installed",
        "installed_context",
        "profile",
        "schedule",
        "tensorboard_trace_handler",
        "uninstall",
    }
)


def __getattr__(name: str) -> Any:
    if name in _PROFILER_NAMES:
        from kinetrace import _profiler

        value = getattr(_profiler, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kinetrace' has no attribute {name!r}")


__all__ = [
    "DEFAULT_COMPRESSLEVEL",
    "Change",
    "CheckReport",
    "CompressResult",
    "Example",
    "ExportHandle",
    "ExportStats",
    "FallbackWarning",
    "FilterResult",
    "Finding",
    "GzipWriter",
    "Keep",
    "MergeResult",
    "MergeWarning",
    "MergedProcess",
    "MergedRank",
    "Part",
    "ProfilerAction",
    "RepairReport",
    "SplitResult",
    "TraceFormatError",
    "TraceInfo",
    "TrackCount",
    "WorkerError",
    "__version__",
    "check_trace",
    "compress_trace",
    "export_chrome_trace",
    "filter_trace",
    "install",
    "installed",
    "installed_context",
    "merge_traces",
    "profile",
    "repair_trace",
    "schedule",
    "split_trace",
    "tensorboard_trace_handler",
    "uninstall",
    "wait",
]
