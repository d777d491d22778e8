"""The comparison behind ``kinetrace demo`` (and the main table of ``benches/bench_export.py``).

Every exporter is timed through the call its users make, on profiles of the same workload:
- stock: ``prof.export_chrome_trace(path)``, Kineto's C++ writer; for ``.json.gz`` torch
  writes a temporary ``.json`` with it and copies that through ``gzip.open(...).writelines``
  (level 9, one write per line). A result can be saved only once, so each stock row exports a
  profile of its own, recorded again;
- torch Python: ``prof.export_chrome_trace(path, use_python_export=True)``;
- kinetrace: ``kinetrace.export_chrome_trace(prof, path)``;
- the accessor floor: ``trace_activities()`` plus the field reads kinetrace makes (its own
  extraction passes, ``kinetrace._extract``, into a consumer that keeps nothing) and freeing
  the list, timed alone. No exporter built on these accessors can beat it on one core.

Benchmark-only helpers (tables, charts, history, the handler timing) are in
``benches/benchlib.py``, outside the wheel.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kinetrace import _export, _extract, _kinetrace

#: The categories whose correlation id an export does not read (the Rust rule itself).
EXCLUDED_EXTERNAL_ID = frozenset(_kinetrace.EXTERNAL_ID_EXCLUDED)


@dataclass
class Row:
    """One measured exporter run."""

    exporter: str
    fmt: str
    seconds: float
    size: int | None = None
    note: str = ""
    ratios: dict[str, float] = field(default_factory=dict)
    #: Peak growth of this process's resident memory during the run (worker processes not
    #: included), in bytes.
    peak_rss: int | None = None
    #: Activities in the profile this row exported.
    activities: int | None = None
    #: How the row was obtained: the call timed, on which profile, how many runs.
    how: str = ""


def _rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _PeakRss:
    """Samples resident memory every 5 ms from a thread; ``growth`` is the peak over the
    value at start."""

    def __init__(self) -> None:
        self.base = _rss_bytes()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_bytes())

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.base)


def record_workload(
    iterations: int, *, record_shapes: bool = True, with_stack: bool = False
) -> Any:
    """Profile ``iterations`` steps of add/mul/sum on 8x8 tensors (6 ops a step)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(8, 8)
    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=record_shapes, with_stack=with_stack
    ) as prof:
        for _ in range(iterations):
            y = (x + x) * x
            y.sum()
    return prof


class _KeepNothing:
    """Takes the extraction passes' columns and keeps nothing: asks for the conditional
    fields where the Rust exporter asks for them (the same rule), so the passes make every
    accessor call an export makes and no other work."""

    def add_first_pass(self, *columns: list[Any]) -> None:
        pass

    def begin_batch(
        self, categories: list[str], linked_correlation_ids: list[int], flow_ids: list[int]
    ) -> tuple[bytes, bytes, bytes]:
        need_correlation = bytes(
            not linked and category not in EXCLUDED_EXTERNAL_ID
            for category, linked in zip(categories, linked_correlation_ids, strict=True)
        )
        need_flow = bytes(flow_id > 0 for flow_id in flow_ids)
        kernels = bytes(category == "kernel" for category in categories)
        return need_correlation, need_flow, kernels

    def submit_batch(self, *columns: list[Any]) -> None:
        pass


def accessor_floor(result: Any) -> float:
    """Seconds for ``trace_activities()`` plus every accessor call kinetrace makes (its own
    two passes, into a consumer that keeps nothing), plus freeing the activity list again
    (every exporter that builds the list pays for that)."""
    t0 = time.perf_counter()
    _read_every_field(result.trace_activities())
    return time.perf_counter() - t0


def _read_every_field(activities: list[Any]) -> None:
    """The accessor calls of an export (the list is freed when this returns)."""
    get = _extract.activity_getters(activities)
    consumer = _KeepNothing()
    _extract.first_pass(consumer, activities, get)
    _extract.second_pass(consumer, activities, get)


_last_peak: list[int] = [0]


def _timed(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` runs; the peak RSS growth of the runs is kept in
    ``_last_peak`` for the row being built."""
    best = float("inf")
    peak = 0
    for _ in range(max(1, repeat)):
        gc.collect()
        with _PeakRss() as rss:
            t0 = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - t0
        best = min(best, elapsed)
        peak = max(peak, rss.growth)
    _last_peak[0] = peak
    return best


def _row(
    exporter: str,
    fmt: str,
    seconds: float,
    size: int | None,
    activities: int | None,
    note: str = "",
    how: str = "",
) -> Row:
    return Row(
        exporter,
        fmt,
        seconds,
        size,
        note=note,
        peak_rss=_last_peak[0],
        activities=activities,
        how=how,
    )


def _size(path: str) -> int:
    return os.path.getsize(path)


def activity_count(prof: Any) -> int:
    """How many activities ``prof`` recorded."""
    return len(prof.profiler.kineto_results.trace_activities())


def compare(
    record: Callable[[], Any],
    out_dir: str,
    *,
    formats: Sequence[str] = ("json", "json.gz"),
    repeat: int = 1,
    extra_levels: Sequence[int] = (9,),
    include_stock: bool = True,
    worker_counts: Sequence[int] = (1, 2),
) -> list[Row]:
    """Run every exporter through the call its users make; rows in table order.

    ``record()`` profiles the workload and returns the stopped ``torch.profiler.profile``.
    torch's stock export can save a result only once, so each stock row gets a profile of
    its own (recorded again, the same workload); the other exporters all run on one more
    profile, best of ``repeat``. Each row's ``how`` says which call was timed, and its
    ``activities`` how many activities that row's profile held.
    """
    from kinetrace import _profiler

    if _profiler.installed():
        raise RuntimeError("kinetrace.install() is in effect: stock torch can't be timed")
    os.makedirs(out_dir, exist_ok=True)
    rows: list[Row] = []
    prof = record()
    n = activity_count(prof)
    result = prof.profiler.kineto_results
    floor = _timed(lambda: accessor_floor(result), repeat)
    rows.append(_row("accessor floor", "-", floor, None, n, how="trace_activities() + field reads"))
    best = f"best of {repeat}" if repeat > 1 else "1 run"

    for fmt in formats:
        path = os.path.join(out_dir, f"torch_python.{fmt}")
        seconds = _timed(partial(prof.export_chrome_trace, path, use_python_export=True), repeat)
        how = f"prof.export_chrome_trace(path, use_python_export=True), {best}"
        rows.append(_row("torch Python", fmt, seconds, _size(path), n, how=how))

    for fmt in formats:
        for workers in worker_counts:
            path = os.path.join(out_dir, f"kinetrace.w{workers}.{fmt}")
            seconds = _timed(
                partial(_export.export_chrome_trace, prof, path, workers=workers), repeat
            )
            note = f"{workers} worker{'s' if workers > 1 else ''}"
            if fmt == "json.gz":
                note += f", level {_export.DEFAULT_COMPRESSLEVEL}"
            how = f"kinetrace.export_chrome_trace(prof, path, workers={workers}), {best}"
            rows.append(_row("kinetrace", fmt, seconds, _size(path), n, note, how))
        if fmt == "json.gz":
            for level in extra_levels:
                if level == _export.DEFAULT_COMPRESSLEVEL:
                    continue
                path = os.path.join(out_dir, f"kinetrace.l{level}.{fmt}")
                seconds = _timed(
                    partial(
                        _export.export_chrome_trace, prof, path, compresslevel=level, workers=1
                    ),
                    repeat,
                )
                how = f"kinetrace.export_chrome_trace(prof, path, compresslevel={level}), {best}"
                note = f"1 worker, level {level}"
                rows.append(_row("kinetrace", fmt, seconds, _size(path), n, note, how))
    prof = result = None  # free the shared profile before recording the next ones
    gc.collect()

    if include_stock:
        stock = []
        for fmt in formats:
            # torch's own sequence for .gz: Kineto writes a temporary .json, then
            # gzip.open(path, "wb").writelines(the temporary file), level 9.
            prof = record()
            stock_n = activity_count(prof)
            path = os.path.join(out_dir, f"stock.{fmt}")
            seconds = _timed(partial(prof.export_chrome_trace, path), 1)
            how = "prof.export_chrome_trace(path) on a profile of its own, 1 run"
            if fmt == "json.gz":
                how += " (Kineto to a temporary .json, then gzip writelines, level 9)"
            stock.append(_row("stock C++", fmt, seconds, _size(path), stock_n, how=how))
            del prof
            gc.collect()
        rows[1:1] = stock
    _add_ratios(rows)
    return rows


def has_trace_activities() -> bool:
    """Whether the installed torch's ``_ProfilerResult`` has ``trace_activities()`` (2.13+)."""
    import torch

    return hasattr(torch._C._autograd._ProfilerResult, "trace_activities")


#: What ``compare_kineto_writer`` compares, for the demo's heading.
KINETO_WRITER_NOTE = (
    "torch {version} has no _ProfilerResult.trace_activities(): comparing torch's own "
    "prof.export_chrome_trace (Kineto's C++ writer; for .json.gz torch gzips that file at "
    "level 9) with kinetrace's fallback (the same writer, streamed through kinetrace's sink "
    "and parallel gzip). torch's Python exporter and kinetrace's own formatter need "
    "torch >= 2.13. Kineto's writer works once per result, so every run profiles the "
    "workload afresh (not timed)."
)


def compare_kineto_writer(
    record: Callable[[], Any],
    out_dir: str,
    *,
    formats: Sequence[str] = ("json", "json.gz"),
    repeat: int = 1,
) -> list[Row]:
    """torch's own ``export_chrome_trace`` against ``kinetrace.export_chrome_trace`` (on
    torch < 2.13 its fallback). Kineto's ``save`` works once per result, so every export
    runs on a fresh profile from ``record()`` (not timed). Each of ``repeat`` rounds exports
    once per exporter and format, stock and kinetrace in alternating order (which goes
    first changes from one format and round to the next, so neither always meets a warmer
    or a busier machine); each row holds the median of its rounds and the peak memory
    growth of any. Rows in table order; only exporters timed, so there is no
    accessor-floor row."""
    import statistics
    import warnings

    from kinetrace import _fallback

    os.makedirs(out_dir, exist_ok=True)
    rounds = max(1, repeat)

    def stock_export(prof: Any, path: str) -> None:
        prof.export_chrome_trace(path)

    def kinetrace_export(prof: Any, path: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _fallback.FallbackWarning)
            _export.export_chrome_trace(prof, path)

    exporters = {"stock C++": stock_export, "kinetrace": kinetrace_export}
    times: dict[tuple[str, str], list[float]] = {}
    peaks: dict[tuple[str, str], int] = {}
    for r in range(rounds):
        for k, fmt in enumerate(formats):
            order = list(exporters) if (r + k) % 2 == 0 else list(exporters)[::-1]
            for name in order:
                prof = record()
                path = os.path.join(out_dir, f"{'stock' if name == 'stock C++' else name}.{fmt}")
                gc.collect()
                with _PeakRss() as rss:
                    t0 = time.perf_counter()
                    exporters[name](prof, path)
                    elapsed = time.perf_counter() - t0
                times.setdefault((name, fmt), []).append(elapsed)
                peaks[name, fmt] = max(peaks.get((name, fmt), 0), rss.growth)
                del prof
    rows: list[Row] = []
    own_formatter = has_trace_activities()
    runs = f"median of {rounds} rounds" if rounds > 1 else "1 run"
    for name in exporters:
        for fmt in formats:
            if name == "stock C++":
                note = "torch's own gzip copy, level 9" if fmt == "json.gz" else "Kineto's writer"
                how = "prof.export_chrome_trace(path)"
            else:
                note = "torch Python-exporter bytes" if own_formatter else "Kineto's writer"
                if fmt == "json.gz":
                    note += f", level {_export.DEFAULT_COMPRESSLEVEL}"
                how = "kinetrace.export_chrome_trace(prof, path)"
            path = os.path.join(out_dir, f"{'stock' if name == 'stock C++' else name}.{fmt}")
            how += f", a fresh profile each run, {runs}, order alternating with the peer"
            rows.append(
                Row(
                    name,
                    fmt,
                    statistics.median(times[name, fmt]),
                    _size(path),
                    note=note,
                    peak_rss=peaks[name, fmt],
                    activities=None,  # not counted: the count would read a result an export reads
                    how=how,
                )
            )
    _add_ratios(rows)
    return rows


def _add_ratios(rows: list[Row]) -> None:
    floor = next((r.seconds for r in rows if r.exporter == "accessor floor"), None)
    by_key = {(r.exporter, r.fmt): r for r in rows if r.exporter != "kinetrace"}
    for r in rows:
        if floor is not None:
            r.ratios["x floor"] = r.seconds / floor
        for peer in ("stock C++", "torch Python"):
            ref = by_key.get((peer, r.fmt))
            if ref is not None and r.exporter == "kinetrace":
                # > 1 means kinetrace is faster.
                r.ratios[f"speedup vs {peer}"] = ref.seconds / r.seconds


def format_table(rows: list[Row], activities: int | None = None) -> str:
    """A plain-text table of ``rows``."""
    head = f"{'exporter':<14} {'format':<8} {'seconds':>8} {'x floor':>8} {'MB':>9} "
    head += f"{'peak MB':>8}  {'vs C++':>7} {'vs Py':>7}  note"
    lines = []
    if activities is not None:
        lines.append(f"{activities} activities")
    lines += [head, "-" * len(head)]
    for r in rows:
        size = f"{r.size / 1e6:9.2f}" if r.size is not None else f"{'-':>9}"
        vs_c = r.ratios.get("speedup vs stock C++")
        vs_p = r.ratios.get("speedup vs torch Python")
        vs_c_text = f"{vs_c:.2f}x" if vs_c else "-"
        vs_p_text = f"{vs_p:.2f}x" if vs_p else "-"
        peak = f"{r.peak_rss / 2**20:8.0f}" if r.peak_rss is not None else f"{'-':>8}"
        floor = r.ratios.get("x floor")
        floor_text = f"{floor:8.2f}" if floor is not None else f"{'-':>8}"
        lines.append(
            f"{r.exporter:<14} {r.fmt:<8} {r.seconds:8.3f} {floor_text} {size} "
            f"{peak}  {vs_c_text:>7} {vs_p_text:>7}  {r.note}"
        )
    lines.append("how each row was timed:")
    for r in rows:
        counted = "" if r.activities is None else f"; {r.activities} activities"
        lines.append(f"  {r.exporter + ' ' + r.fmt:<22} {r.how}{counted}")
    return "\n".join(lines)
