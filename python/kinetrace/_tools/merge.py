"""Many ranks on one timeline: :func:`merge_traces` (``kinetrace merge``).

Distributed training writes one trace per rank; viewers show one file. The merge reads every
rank's trace (``.json`` or gzip with any number of members, from torch, Kineto or kinetrace)
in Rust with the GIL released, several at once, and writes one trace in which:

- each rank's events keep their text, except ``pid`` (every process of every rank becomes a
  process of its own), flow and async ``id`` (made unique per rank, so no arrow joins two
  ranks) and ``ts`` (shifted exactly, on the decimal text, onto one clock: the earliest
  ``baseTimeNanoseconds``; with ``align="step"`` also aligned on the first
  ``ProfilerStep#N`` every rank has);
- processes are named after their rank and host process or device (``rank 3 · GPU 1``,
  ``rank 3 · host-a pid 4242``) and sorted rank by rank, CPU first;
- the ``kinetrace_merge`` key holds, per rank, its source, rank, offsets, pid map and every
  top-level key of the source (``deviceProperties``, ``distributedInfo``, ...).

See ``src/tools/merge/mod.rs`` for the rules, the passes and the memory bound.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from kinetrace import _kinetrace
from kinetrace._env import available_cpus
from kinetrace._tools.sources import trace_files
from kinetrace._tools.split import Keep, Part, _gzip_settings, _max_bytes

__all__ = [
    "MergeResult",
    "MergeWarning",
    "MergedProcess",
    "MergedRank",
    "merge_traces",
]


class MergeWarning(UserWarning):
    """Something about the merged sources worth knowing that did not stop the merge (their
    time spans do not overlap: traces of different runs?)."""


@dataclasses.dataclass(frozen=True)
class MergedProcess:
    """A process of one rank, as merged."""

    #: The pid in the source (a number, a string, or None when its events had none).
    source_pid: int | str | None
    #: Its pid in the merged trace, its name there and its place in the process order.
    pid: int
    name: str
    sort_index: int


@dataclasses.dataclass(frozen=True)
class MergedRank:
    """One source of a merge."""

    source: str
    #: How its processes are named (``rank 3``, or the label given).
    label: str
    rank: int | None
    #: Where the rank came from: ``label``, ``distributedInfo``, ``file name`` or ``order``.
    rank_from: str
    base_time_ns: int | None
    #: Nanoseconds added to each of its ``ts``; the part of it that aligns the steps.
    offset_ns: int
    align_offset_ns: int
    events_read: int
    events_written: int
    json_bytes_read: int
    processes: tuple[MergedProcess, ...]


@dataclasses.dataclass(frozen=True)
class MergeResult:
    """What :func:`merge_traces` wrote."""

    #: The merged trace, or its parts in time order (``max_mb``).
    outputs: tuple[Part, ...]
    #: The sources in rank order.
    ranks: tuple[MergedRank, ...]
    #: The merged trace's ``baseTimeNanoseconds`` (None: absolute ``ts``).
    base_time_ns: int | None
    #: The ``N`` of the ``ProfilerStep#N`` the ranks were aligned on (``align="step"``).
    aligned_step: int | None
    events_read: int
    events_written: int
    #: Flow ends dropped because another end was not kept or is in another part.
    flow_events_cut: int
    json_bytes_read: int
    json_bytes_written: int
    #: Parts larger than asked (more than that much JSON within one histogram cell).
    oversized_parts: int
    warnings: tuple[str, ...]
    seconds: float

    @property
    def paths(self) -> list[str]:
        """The files written."""
        return [p.path for p in self.outputs]


def _parts_of(dst: str) -> re.Pattern[str]:
    """The names of the parts a merge into ``dst`` writes (left out of a folder's sources)."""
    name = os.path.basename(dst)
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return re.compile(re.escape(name) + r"\.part-\d{3}-of-\d{3}\.json(\.gz)?$")


def merge_traces(
    sources: Iterable[str | os.PathLike[str]],
    dst: str | os.PathLike[str],
    *,
    labels: Sequence[str | None] | None = None,
    align: str | None = None,
    keep: Keep | None = None,
    max_mb: float | None = None,
    compresslevel: int | None = None,
    threads: int | None = None,
    **criteria: Any,
) -> MergeResult:
    """Merges the traces ``sources`` (files, or directories of trace files such as a
    ``tensorboard_trace_handler`` log dir) into ``dst``, one timeline for every rank.

    ``dst`` is gzip (one member, parallel encoder) when its name ends in ``.gz``. It appears
    atomically; on any error nothing is written (an existing ``dst`` stays as it was).

    Args:
        labels: one per source file (after directories are expanded), replacing its rank:
            an integer label is that rank, any other text names its processes.
        align: ``"step"`` aligns the ranks on the start of the first ``ProfilerStep#N``
            that all of them have (clock skew between hosts is often larger than kernels);
            the offsets are in the result and the merged trace's ``kinetrace_merge``.
        keep: the events kept (a :class:`kinetrace.Keep`, or its fields as keyword
            arguments), as ``kinetrace filter`` keeps them; ``window_us`` is on the merged
            timeline, ``pids`` are the sources' pids (in every rank).
        max_mb: parts of at most this many MB (10**6 bytes) of JSON, each a time window of
            the merged timeline, named ``<stem>.part-001-of-012.json[.gz]`` beside ``dst``.
        compresslevel, threads: gzip level; threads reading (and compressing).

    Raises:
        ValueError: a source is not a valid trace (the message names the file and the byte
            offset), two sources are one rank, the criteria select nothing, or an argument
            is out of range.
        OSError: a file cannot be read or written.
        KeyboardInterrupt: Ctrl-C; nothing is written.

    A :class:`MergeWarning` is issued when the ranks' time spans do not all overlap.
    """
    if keep is None:
        keep = Keep(**criteria)
    elif criteria:
        raise TypeError("give the criteria as a Keep or as keyword arguments, not both")
    if align not in (None, "step"):
        raise ValueError(f"align must be None or 'step', got {align!r}")
    dst_path = os.fsdecode(dst)
    listed = list(sources)
    parts = _parts_of(dst_path)
    directory_files = [
        os.path.join(d, name)
        for d in map(os.fsdecode, listed)
        if os.path.isdir(d)
        for name in os.listdir(d)
        if parts.match(name)
    ]
    files = trace_files(listed, tool="merge", exclude=[dst_path, *directory_files])
    label_list: list[str | None] = []
    if labels is not None:
        label_list = [None if label is None else str(label) for label in labels]
        if len(label_list) != len(files):
            raise ValueError(
                f"{len(label_list)} labels for {len(files)} trace files: give one per file"
            )
    max_bytes = None if max_mb is None else _max_bytes(max_mb)
    n_threads = available_cpus() if threads is None else threads
    gzip = _gzip_settings(dst_path.endswith(".gz"), compresslevel, n_threads)
    started = time.perf_counter()
    raw = _kinetrace.merge_traces(
        files,
        dst_path,
        label_list,
        align == "step",
        *keep._native(),
        max_bytes,
        gzip,
        n_threads,
    )
    result = _result(raw, time.perf_counter() - started)
    for message in result.warnings:
        warnings.warn(message, MergeWarning, stacklevel=2)
    return result


def _source_pid(text: str) -> int | str | None:
    """A source pid from its JSON text (a number, a string, or null)."""
    value = json.loads(text)
    if value is None or isinstance(value, (int, str)):
        return value
    return text


def _result(
    raw: tuple[
        list[_kinetrace._PartStats],
        list[_kinetrace._MergedRankStats],
        _kinetrace._MergeStats,
    ],
    seconds: float,
) -> MergeResult:
    raw_outputs, raw_ranks, stats = raw
    ranks = tuple(
        MergedRank(
            source=r["source"],
            label=r["label"],
            rank=r["rank"],
            rank_from=r["rank_from"],
            base_time_ns=r["base_time_ns"],
            offset_ns=r["offset_ns"],
            align_offset_ns=r["align_offset_ns"],
            events_read=r["events_read"],
            events_written=r["events_written"],
            json_bytes_read=r["json_bytes_read"],
            processes=tuple(
                MergedProcess(
                    source_pid=_source_pid(p["source_pid"]),
                    pid=p["pid"],
                    # The name as the body of a JSON string (escapes as written).
                    name=json.loads(f'"{p["name"]}"'),
                    sort_index=p["sort_index"],
                )
                for p in r["processes"]
            ),
        )
        for r in raw_ranks
    )
    return MergeResult(
        outputs=tuple(Part(**o) for o in raw_outputs),
        ranks=ranks,
        base_time_ns=stats["base_time_ns"],
        aligned_step=stats["aligned_step"],
        events_read=stats["events_read"],
        events_written=stats["events_written"],
        flow_events_cut=stats["flow_events_cut"],
        json_bytes_read=stats["json_bytes_read"],
        json_bytes_written=stats["json_bytes_written"],
        oversized_parts=stats["oversized_parts"],
        warnings=tuple(stats["warnings"]),
        seconds=seconds,
    )
