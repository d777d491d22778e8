"""kinetrace: fast, exact Chrome-trace export for the PyTorch profiler.

>>> import kinetrace
>>> kinetrace.export_chrome_trace(prof, "trace.json.gz")

The profiler lifecycle names (``profile``, ``schedule``, ``tensorboard_trace_handler``,
``install``, ...) import torch, so they load on first use: ``import kinetrace`` stays cheap.
"""

from typing import TYPE_CHECKING, Any

from kinetrace._errors import TraceFormatError
from kinetrace._export.export import (
    DEFAULT_COMPRESSLEVEL,
    ExportHandle,
    ExportStats,
    export_chrome_trace,
    wait,
)
from kinetrace._export.fallback import FallbackWarning
from kinetrace._export.gzip_writer import GzipWriter
from kinetrace._export.parquet import export_parquet
from kinetrace._export.workers import WorkerError
from kinetrace._kinetrace import __version__
from kinetrace._tools.check import CheckReport, Example, Finding, TraceInfo, TrackCount, check_trace
from kinetrace._tools.compress import CompressResult, compress_trace
from kinetrace._tools.diff import (
    CountChange,
    DiffResult,
    FigureChange,
    KernelChange,
    OperatorChange,
    RankCounts,
    RankDiff,
    StepComparison,
    diff,
)
from kinetrace._tools.diff_hta import HtaDiff, HtaOpChange
from kinetrace._tools.merge import (
    MergedProcess,
    MergedRank,
    MergeResult,
    MergeWarning,
    merge_traces,
)
from kinetrace._tools.ops import GpuPeaks, OpGroup, OpRow, OpsCoverage, OpsReport, ops
from kinetrace._tools.ops_html import write_ops_html
from kinetrace._tools.parquet import ParquetRank, ParquetResult, to_parquet
from kinetrace._tools.repair import Change, RepairReport, repair_trace
from kinetrace._tools.split import FilterResult, Keep, Part, SplitResult, filter_trace, split_trace
from kinetrace._tools.summary import (
    KernelStats,
    RankSummary,
    Step,
    StepSpread,
    StreamIdle,
    Summary,
    SummaryWarning,
    TemporalBreakdown,
    summarize,
)

if TYPE_CHECKING:
    from kinetrace._export.profiler import (
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
        from kinetrace._export import profiler as _profiler

        value = getattr(_profiler, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kinetrace' has no attribute {name!r}")


__all__ = [
    "DEFAULT_COMPRESSLEVEL",
    "Change",
    "CheckReport",
    "CompressResult",
    "CountChange",
    "DiffResult",
    "Example",
    "ExportHandle",
    "ExportStats",
    "FallbackWarning",
    "FigureChange",
    "FilterResult",
    "Finding",
    "GpuPeaks",
    "GzipWriter",
    "HtaDiff",
    "HtaOpChange",
    "Keep",
    "KernelChange",
    "KernelStats",
    "MergeResult",
    "MergeWarning",
    "MergedProcess",
    "MergedRank",
    "OpGroup",
    "OpRow",
    "OperatorChange",
    "OpsCoverage",
    "OpsReport",
    "ParquetRank",
    "ParquetResult",
    "Part",
    "ProfilerAction",
    "RankCounts",
    "RankDiff",
    "RankSummary",
    "RepairReport",
    "SplitResult",
    "Step",
    "StepComparison",
    "StepSpread",
    "StreamIdle",
    "Summary",
    "SummaryWarning",
    "TemporalBreakdown",
    "TraceFormatError",
    "TraceInfo",
    "TrackCount",
    "WorkerError",
    "__version__",
    "check_trace",
    "compress_trace",
    "diff",
    "export_chrome_trace",
    "export_parquet",
    "filter_trace",
    "install",
    "installed",
    "installed_context",
    "merge_traces",
    "ops",
    "profile",
    "repair_trace",
    "schedule",
    "split_trace",
    "summarize",
    "tensorboard_trace_handler",
    "to_parquet",
    "uninstall",
    "wait",
    "write_ops_html",
]
