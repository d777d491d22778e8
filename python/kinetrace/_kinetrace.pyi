"""Private native module of kinetrace (Rust). The public API is in ``kinetrace``.

A build with the cargo feature ``test-hooks`` (never a release wheel) also has
``_panic_for_tests()`` and ``_Exporter._inject_panic()``, for ``tests/test_panics.py``."""

from collections.abc import Callable, Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, ClassVar, Literal, SupportsIndex, TypedDict, final, overload

from typing_extensions import Self

__all__ = [
    "EXTERNAL_ID_EXCLUDED",
    "POLL_INTERVAL_MS",
    "OpRows",
    "_Accessors",
    "_Discard",
    "_Exporter",
    "_FallbackFile",
    "_FallbackStream",
    "_GzipEncoder",
    "__version__",
    "check_trace",
    "common_type",
    "create_temporary",
    "create_temporary_dir",
    "diff_hta_side",
    "diff_read",
    "filter_trace",
    "merge_traces",
    "ops",
    "ops_gpu",
    "ops_gpu_keys",
    "recompress",
    "remove_temporaries",
    "remove_temporary_dir",
    "repair_trace",
    "split_trace",
    "summarize",
    "to_parquet",
    "trimonth_base_ns",
]

__version__: str
#: Categories whose own correlation id is not written as "External id" (nor read).
EXTERNAL_ID_EXCLUDED: list[str]
#: How long any wait runs before Ctrl-C is looked for again (native and Python waits alike).
POLL_INTERVAL_MS: int

# The dicts the tools return: the fields of kinetrace's result dataclasses, which are built
# from them with ** (so a key added here and not there is a type error).

class _PartStats(TypedDict):
    path: str
    start_us: float
    end_us: float
    events: int
    json_bytes: int

class _SplitStats(TypedDict):
    events_read: int
    flow_events_cut: int
    flow_events_unpaired: int
    json_bytes_read: int
    oversized_parts: int

class _FilterStats(TypedDict):
    events_read: int
    events_written: int
    metadata_written: int
    flow_events_cut: int
    flow_events_unpaired: int
    json_bytes_read: int
    json_bytes_written: int

class _Example(TypedDict):
    offset: int | None
    event_index: int | None
    message: str

class _TrackCount(TypedDict):
    pid: str
    tid: str
    name: str | None
    dropped: int

class _Finding(TypedDict):
    kind: str
    level: Literal["error", "warning"]
    count: int
    message: str
    examples: list[_Example]
    tracks: list[_TrackCount]
    track_count: int
    note: str | None

class _TraceInfo(TypedDict):
    json_bytes: int
    gzip_members: int
    top_level_keys: list[str]
    schema_version: Any
    trace_name: Any
    base_time_ns: Any
    display_time_unit: Any
    events: int
    phases: dict[str, int]
    categories: dict[str, int]
    processes: int
    threads: int
    ts_min: float | None
    ts_max: float | None
    flows_paired: int
    flows_unpaired: int
    summary_truncated: bool

class _CheckReport(TypedDict):
    valid: bool
    complete: bool
    errors: list[_Finding]
    warnings: list[_Finding]
    info: _TraceInfo

class _Change(TypedDict):
    kind: str
    count: int
    message: str
    examples: list[_Example]

class _RepairStats(TypedDict):
    changes: list[_Change]
    json_bytes_read: int
    json_bytes_written: int
    events_read: int
    events_written: int

class _MergedProcessStats(TypedDict):
    source_pid: str
    pid: int
    name: str
    sort_index: int

class _MergedRankStats(TypedDict):
    source: str
    label: str
    rank: int | None
    rank_from: str
    base_time_ns: int | None
    offset_ns: int
    align_offset_ns: int
    events_read: int
    events_written: int
    json_bytes_read: int
    processes: list[_MergedProcessStats]

class _MergeStats(TypedDict):
    base_time_ns: int | None
    aligned_step: int | None
    events_read: int
    events_written: int
    flow_events_cut: int
    json_bytes_read: int
    json_bytes_written: int
    oversized_parts: int
    warnings: list[str]

def trimonth_base_ns(earliest_ns: int) -> int: ...
def check_trace(path: str | PathLike[str], examples: int = 5) -> _CheckReport: ...
def create_temporary(directory: str | PathLike[str], name: str) -> Path: ...
def create_temporary_dir(directory: str | PathLike[str], name: str) -> Path: ...
def remove_temporaries(path: str | PathLike[str], pid: int) -> int: ...
def remove_temporary_dir(path: str | PathLike[str]) -> bool: ...
def repair_trace(
    src: str | PathLike[str],
    dst: str | PathLike[str],
    untangle: bool,
    gzip: tuple[int, int] | None,
    examples: int = 5,
) -> _RepairStats: ...
def recompress(
    src: str | PathLike[str], dst: str | PathLike[str], level: int, threads: int
) -> tuple[int, int]: ...
def split_trace(
    src: str | PathLike[str],
    max_bytes: int,
    out_dir: str | PathLike[str] | None,
    gzip: tuple[int, int] | None,
    like_source: bool,
    stem: str | None = None,
    suffix: str | None = None,
    trace_name: str | None = None,
) -> tuple[list[_PartStats], _SplitStats]: ...
def filter_trace(
    src: str | PathLike[str],
    dst: str | PathLike[str],
    include_cats: list[str],
    exclude_cats: list[str],
    min_dur_us: float | None,
    window_us: tuple[float, float] | None,
    pids: list[str],
    gzip: tuple[int, int] | None,
    trace_name: str | None = None,
) -> _FilterStats: ...
def merge_traces(
    sources: list[str],
    dst: str | PathLike[str],
    labels: list[str | None],
    align_step: bool,
    include_cats: list[str],
    exclude_cats: list[str],
    min_dur_us: float | None,
    window_us: tuple[float, float] | None,
    pids: list[str],
    max_bytes: int | None,
    gzip: tuple[int, int] | None,
    threads: int,
) -> tuple[list[_PartStats], list[_MergedRankStats], _MergeStats]: ...

@final
class _Exporter:
    def __new__(
        cls,
        path: str | PathLike[str],
        compresslevel: int | None = None,
        threads: int = 1,
        background: bool = False,
        slice: int | None = None,
    ) -> Self: ...
    def partial_summary(
        self,
    ) -> tuple[int, int, int, list[tuple[int, int]], list[tuple[tuple[int, int], int]]]: ...
    def merge_partial(
        self,
        partial: tuple[int, int, int, list[tuple[int, int]], list[tuple[tuple[int, int], int]]],
    ) -> None: ...
    def set_graph_annotations(
        self,
        entries: list[tuple[int, str | None, int | None, str | None]],
        lanes_all: bool,
        default_stream: int,
        digits: list[tuple[int, int, int]],
        spaces: list[int],
        inline_annotated: bool,
    ) -> None: ...
    def graph_state(self) -> bytes | None: ...
    def append_slice(
        self,
        path: str | PathLike[str],
        fd: int,
        identity: tuple[int, int],
        events: int,
        text_len: int,
        file_len: int,
        crc: int | None = None,
        graph_state: bytes | None = None,
    ) -> None: ...
    def read_first_pass(
        self, accessors: _Accessors, activities: list[Any], lo: int, hi: int
    ) -> None: ...
    def min_timestamp(self) -> int | None: ...
    def start(
        self,
        base_ns: int,
        host_pid: int,
        device_properties: str,
        metadata: list[tuple[str, str]],
        versions: list[tuple[str, int]],
    ) -> None: ...
    def read_batch(
        self, accessors: _Accessors, activities: list[Any], lo: int, hi: int
    ) -> None: ...
    def close(self, trace_name: str) -> None: ...
    # Without a timeout it returns once the file is written; with one, None on timeout.
    @overload
    def wait(self, timeout: None = None) -> tuple[int, int, int, int | None]: ...
    @overload
    def wait(self, timeout: float) -> tuple[int, int, int, int | None] | None: ...
    def bytes_written(self) -> int: ...
    def abort(self) -> None: ...

@final
class _Accessors:
    fields: ClassVar[list[str]]
    def __new__(cls, kind: type | None, getters: list[Callable[[Any], Any]]) -> Self: ...
    @property
    def direct(self) -> bool: ...

@final
class _Discard:
    def __new__(cls) -> Self: ...
    def read_first_pass(
        self, accessors: _Accessors, activities: list[Any], lo: int, hi: int
    ) -> None: ...
    def read_batch(
        self, accessors: _Accessors, activities: list[Any], lo: int, hi: int
    ) -> None: ...

def common_type(activities: list[Any]) -> type | None: ...

@final
class _GzipEncoder:
    def __new__(cls, target: object, compresslevel: int, threads: int) -> Self: ...
    def write(self, data: object) -> int: ...
    def flush(self) -> None: ...
    def close(self) -> tuple[int, int]: ...
    def abort(self) -> None: ...

@final
class _FallbackStream:
    def __new__(
        cls,
        read_fds: list[int],
        write_fds: list[int],
        dst: str | PathLike[str],
        compresslevel: int | None = None,
        threads: int = 1,
        trace_name: tuple[bytes, bytes] | None = None,
        metadata: list[tuple[str, str]] = ...,
    ) -> Self: ...
    @staticmethod
    def from_path(
        src: str | PathLike[str],
        dst: str | PathLike[str],
        compresslevel: int | None = None,
        threads: int = 1,
        trace_name: tuple[bytes, bytes] | None = None,
        metadata: list[tuple[str, str]] = ...,
    ) -> _FallbackStream: ...
    def finish(self) -> tuple[int, int, int] | None: ...
    def abort(self) -> None: ...

@final
class _FallbackFile:
    def __new__(
        cls,
        path: str | PathLike[str],
        dst: str | PathLike[str],
        trace_name: tuple[bytes, bytes] | None = None,
        metadata: list[tuple[str, str]] = ...,
    ) -> Self: ...
    @staticmethod
    def directory(dst: str | PathLike[str]) -> PathLike[str] | None: ...
    @staticmethod
    def private_name(dir: str | PathLike[str]) -> PathLike[str]: ...
    def finish(self) -> tuple[int, int, int] | None: ...
    def abort(self) -> None: ...

class _TemporalBreakdown(TypedDict):
    idle_time_us: float
    compute_time_us: float
    non_compute_time_us: float
    kernel_time_us: float

class _KernelStats(TypedDict):
    name: str
    type: str
    count: int
    sum_us: float
    mean_us: float
    min_us: float
    max_us: float

class _StreamIdle(TypedDict):
    host_wait_us: float
    kernel_wait_us: float
    other_us: float

class _RankFigures(TypedDict):
    rank: int
    rank_from: str
    source: str
    temporal_breakdown: _TemporalBreakdown
    kernel_types: list[tuple[str, float]]
    kernels: list[_KernelStats]
    comm_comp_overlap_pct: float | None
    idle_time: dict[str, _StreamIdle]
    steps: list[tuple[str, float]]
    gpu_activities: int
    events: int
    json_bytes: int
    warnings: list[str]

def summarize(paths: list[str], rules: str, threads: int) -> list[_RankFigures]: ...

class _HtaSide(TypedDict):
    source: str
    rank: int
    ranks: list[int]
    iteration: int
    iterations: list[int]
    ops: list[tuple[str, int, float]]
    warnings: list[str]

def diff_hta_side(
    paths: list[str], rank: int | None, iteration: int | None, threads: int
) -> _HtaSide: ...

class _Rates(TypedDict):
    tflops_s: float | None
    tbs: float | None
    flops_per_byte: float | None
    roof_tflops: float | None
    roof_pct: float | None
    bound: str | None
    roof_time_us: float | None

class _OpRow(_Rates):
    uid: int
    rank: int
    name: str
    table: str
    bwd: bool
    flops: float | None
    bytes: float | None
    kernel_time_us: float
    kernel_time_ns: int
    kernel_uids: list[int]
    input_dims: str | None
    input_type: str | None
    device: int | None
    precision: str | None
    peak_tflops: float | None
    time_us: float

class _GpuPeaks(TypedDict):
    key: str
    label: str
    bandwidth_tbs: float
    peaks_tflops: dict[str, float]
    source: str

class _GpuChoice(TypedDict):
    gpu: _GpuPeaks | None
    how: str
    device_name: str | None
    note: str | None

@final
class OpRows(Sequence[_OpRow]):
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: SupportsIndex, /) -> _OpRow: ...
    @overload
    def __getitem__(self, index: slice, /) -> list[_OpRow]: ...
    def __iter__(self) -> Iterator[_OpRow]: ...
    def json_text(self, start: int, stop: int) -> str: ...

class _OpGroup(TypedDict):
    name: str
    table: str
    bwd: bool
    input_dims: str | None
    input_type: str | None
    count: int
    time_us: float
    mean_us: float
    median_us: float
    min_us: float
    max_us: float
    flops: float | None
    bytes: float | None
    tflops_s: float | None
    tbs: float | None
    flops_per_byte: float | None
    precision: str | None
    peak_tflops: float | None
    roof_tflops: float | None
    roof_pct: float | None
    bound: str | None
    roof_time_us: float | None
    saveable_us: float | None

class _OpsRank(TypedDict):
    source: str
    rank: int
    gpu: _GpuChoice

class _OpsCoverage(TypedDict):
    modelled_us: float
    unmodelled_us: float
    without_shapes_us: float
    collectives_us: float
    modelled_share: float | None

class _OpsFound(TypedDict):
    ranks: list[_OpsRank]
    rows: OpRows
    groups: list[_OpGroup]
    coverage: _OpsCoverage | None

def ops(paths: list[str], rules: str, threads: int, gpu: str | None = None) -> _OpsFound: ...
def ops_gpu(name: str) -> _GpuPeaks | None: ...
def ops_gpu_keys() -> list[str]: ...

class _OperatorGroup(TypedDict):
    name: str
    input_dims: str
    input_type: str
    count: int
    self_ns: int
    gpu_ns: int
    top_kernel: str | None
    top_kernel_ns: int | None

class _StepFigures(TypedDict):
    gpu_busy_ns: int | None
    names: list[int]
    counts: list[int]
    memcpy_bytes: list[int]
    flops: int

class _RankSteps(TypedDict):
    names: list[str]
    kinds: list[str]
    directions: list[str]
    steps: list[_StepFigures]

def diff_read(
    runs: Sequence[Sequence[str | PathLike[str]]], threads: int
) -> tuple[list[list[_RankFigures]], dict[str, list[_OperatorGroup]], dict[str, _RankSteps]]: ...

class _ParquetRank(TypedDict):
    source: str
    rank: int
    rank_from: str
    events: int
    flows: int
    tracks: int
    json_bytes: int

def to_parquet(
    sources: list[str],
    names: list[str] | None,
    out: str,
    force: bool,
    threads: int,
    zstd_level: int,
    cancel: Any = None,
) -> list[_ParquetRank]: ...
