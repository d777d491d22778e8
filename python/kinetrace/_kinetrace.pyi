"""Private native module of kinetrace (Rust). The public API is in ``kinetrace``."""

from os import PathLike

__version__: str

def format_microseconds(ns: int) -> str: ...
def trimonth_base_ns(earliest_ns: int) -> int: ...

class _Exporter:
    def __init__(
        self,
        path: str | bytes | PathLike[str],
        compresslevel: int | None = None,
        threads: int = 1,
        background: bool = False,
    ) -> None: ...
    def add_first_pass(
        self,
        devices: list[int],
        resources: list[int],
        timestamps: list[int],
        durations: list[int],
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
    def begin_batch(
        self, categories: list[str], linked_correlation_ids: list[int], flow_ids: list[int]
    ) -> tuple[bytes | bool | None, bytes | bool | None, bytes | bool | None]: ...
    def submit_batch(
        self,
        names: list[str],
        metadata: list[str],
        correlation_ids: list[int],
        flow_types: list[int],
        flow_starts: list[bool],
        comms_metadata: list[str | None],
    ) -> None: ...
    def close(self, trace_name: str) -> None: ...
    def wait(self, timeout: float | None = None) -> tuple[int, int, int] | None: ...
    def abort(self) -> None: ...

class _GzipEncoder:
    def __init__(self, target: object, compresslevel: int, threads: int) -> None: ...
    def write(self, data: object) -> int: ...
    def flush(self) -> None: ...
    def close(self) -> tuple[int, int]: ...
    def abort(self) -> None: ...
