"""``to_parquet``: trace files as one Parquet dataset (``kinetrace parquet``).

The dataset (``docs/parquet.md``, schema version 2) is what DuckDB, Spark, pyarrow and
pandas read without conversion: ``events/``, ``flows/``, ``tracks/``, ``ops/`` (the rows
of ``kinetrace.ops``) and ``meta/``, each partitioned by rank the Hive way (``rank=R``
folders). The reading and writing are the
native module's (the ``parquet`` crate, zstd), files in parallel, the GIL released.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kinetrace import _kinetrace
from kinetrace._env import available_cpus, require_in_range
from kinetrace._tools.sources import trace_files

__all__ = ["DEFAULT_PARQUET_LEVEL", "ParquetRank", "ParquetResult", "to_parquet"]

#: zstd's level for the dataset's pages: speed first; 9 writes ~10% smaller files at ~70%
#: of the speed (docs/benchmarks.md, "Parquet").
DEFAULT_PARQUET_LEVEL = 3


@dataclass(frozen=True)
class ParquetRank:
    """One source in the dataset: its rank (and where the rank came from:
    ``"distributedInfo"``, ``"file name"`` or ``"order"``), and the rows it gave to
    ``events``, ``flows`` and ``tracks``."""

    source: str
    rank: int
    rank_from: str
    events: int
    flows: int
    tracks: int
    json_bytes: int


@dataclass(frozen=True)
class ParquetResult:
    """A dataset written: where, its ranks in the order of the sources, and the time it took."""

    path: str
    ranks: tuple[ParquetRank, ...]
    seconds: float

    @property
    def json_bytes(self) -> int:
        return sum(r.json_bytes for r in self.ranks)

    @property
    def events(self) -> int:
        return sum(r.events for r in self.ranks)


def to_parquet(
    sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    force: bool = False,
    threads: int | None = None,
    level: int = DEFAULT_PARQUET_LEVEL,
    names: list[str] | None = None,
    cancel: threading.Event | None = None,
) -> ParquetResult:
    """Writes trace files (``.json`` or gzip, one rank each, from any writer) or directories
    of them as one Parquet dataset at ``out_dir`` (``docs/parquet.md``).

    Ranks are found as :func:`merge_traces` finds them (``distributedInfo.rank``, else a
    number after ``rank`` in the file name, else the position). The dataset is made in a
    private folder beside ``out_dir`` and renamed into place once complete: a failure or
    Ctrl-C leaves nothing behind.

    Args:
        sources: a trace file or directory, or several.
        out_dir: the dataset's folder; it must not exist, unless ``force``.
        force: replace an existing dataset (a folder with ``_kinetrace.json``) or an empty
            folder; anything else is never replaced.
        threads: files converted at once (default: the CPUs available).
        level: zstd's level, 1-22.
        names: what the dataset calls each source (``meta.source``; default: its path), one
            per file (with no directory among ``sources``).
        cancel: an event another thread sets to stop the conversion (as Ctrl-C stops it on
            the main thread).

    Raises:
        kinetrace.TraceFormatError: a source is not a valid trace (its file and byte offset
            named); nothing is written.
        FileExistsError: ``out_dir`` exists (without ``force``, or it is not a dataset).
        ValueError: two sources claim one rank, a directory holds no trace, or an argument
            is out of range.
        OSError: a source cannot be read, or the dataset cannot be written.
        KeyboardInterrupt: Ctrl-C.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    files = trace_files(sources, tool="parquet")
    if names is not None and len(names) != len(files):
        raise ValueError(f"{len(names)} names for {len(files)} trace files")
    workers = available_cpus() if threads is None else threads
    require_in_range("threads", workers, 1, 1024)
    require_in_range("level", level, 1, 22)
    out = os.fspath(out_dir)
    start = time.perf_counter()
    raw = _kinetrace.to_parquet(files, names, out, force, workers, level, cancel)
    ranks = tuple(ParquetRank(**d) for d in raw)
    return ParquetResult(out, ranks, time.perf_counter() - start)
