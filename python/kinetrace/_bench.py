"""The comparison behind ``kinetrace demo`` (and the main table of ``benches/bench_export.py``).

Every exporter is timed through the call its users make, on profiles of the same workload:
- stock: ``prof.export_chrome_trace(path)``, Kineto's C++ writer; for ``.json.gz`` torch
  writes a temporary ``.json`` with it and copies that through ``gzip.open(...).writelines``
  (level 9, one write per line);
- torch Python: ``prof.export_chrome_trace(path, use_python_export=True)``;
- kinetrace: ``kinetrace.export_chrome_trace(prof, path)`` (default settings), and with
  ``workers=`` given;
- the accessor floor: ``trace_activities()`` plus the field reads kinetrace makes (its own
  extraction passes, ``kinetrace._export.extract``, into a consumer that keeps nothing) and freeing
  the list, timed alone. No exporter built on these accessors can beat it on one core.

The method (:func:`method_note`): every timed call exports a fresh profile of its own
(torch saves a result once, and a result's first ``trace_activities()`` costs about three
times a later one, so a reused profile would flatter whoever runs second); rounds run every
row once, the order alternating; each row is the median of its rounds.

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

from kinetrace import _kinetrace
from kinetrace._export import export as _export
from kinetrace._export import extract as _extract


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
    #: How the row was obtained: the call timed, how many rounds (see :func:`method_note`).
    how: str = ""
    #: Rounds its seconds are the median of.
    rounds: int = 1
    #: Every round's seconds, in the order of the rounds (a round runs every row once).
    samples: list[float] = field(default_factory=list)


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
    consumer = _kinetrace._Discard()
    _extract.first_pass(consumer, activities, get)
    _extract.second_pass(consumer, activities, get)


@dataclass
class _Spec:
    """One row to measure: ``run(prof, path)`` is the timed call."""

    exporter: str
    fmt: str
    run: Callable[[Any, str], Any]
    note: str = ""
    call: str = ""
    #: The output's name in the output folder (the names ``kinetrace demo`` documents).
    filename: str = ""
    #: Every round's seconds, peak RSS growth, activities.
    seconds: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)


def _export_with(prof: Any, path: str, **options: Any) -> Any:
    """``kinetrace.export_chrome_trace(prof, path, **options)``."""
    return _export.export_chrome_trace(prof, path, **options)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _size(path: str) -> int:
    return os.path.getsize(path)


def activity_count(prof: Any) -> int:
    """How many activities ``prof`` recorded."""
    return len(prof.profiler.kineto_results.trace_activities())


def method_note(rounds: int) -> str:
    """How every row of :func:`compare` is timed (printed under its tables)."""
    return (
        f"Each row: the median of {rounds} round{'s' if rounds != 1 else ''}; every timed call "
        "exports a fresh profile of its own (recorded just before it, the same workload: torch "
        "saves a result only once, and the first read of a result's activity list costs ~3x a "
        "later one); the rows' order alternates between rounds (first to last, then last to "
        "first)."
    )


def _compare_specs(
    formats: Sequence[str],
    extra_levels: Sequence[int],
    include_stock: bool,
    worker_counts: Sequence[int | None],
) -> list[_Spec]:
    """The rows of :func:`compare`, in table order."""
    specs = [
        _Spec(
            "accessor floor",
            "-",
            lambda prof, _: accessor_floor(prof.profiler.kineto_results),
            call="trace_activities() + field reads",
        )
    ]
    if include_stock:
        for fmt in formats:
            call = "prof.export_chrome_trace(path)"
            if fmt == "json.gz":
                call += " (Kineto to a temporary .json, then gzip writelines, level 9)"
            specs.append(
                _Spec(
                    "stock C++",
                    fmt,
                    lambda prof, p: prof.export_chrome_trace(p),
                    call=call,
                    filename=f"stock.{fmt}",
                )
            )
    for fmt in formats:
        specs.append(
            _Spec(
                "torch Python",
                fmt,
                lambda prof, p: prof.export_chrome_trace(p, use_python_export=True),
                call="prof.export_chrome_trace(path, use_python_export=True)",
                filename=f"torch_python.{fmt}",
            )
        )
    for fmt in formats:
        level = f", level {_export.DEFAULT_COMPRESSLEVEL}" if fmt == "json.gz" else ""
        for workers in worker_counts:
            if workers is None:
                note = "default settings" + level
                call = "kinetrace.export_chrome_trace(prof, path)"
                filename = f"kinetrace.{fmt}"
            else:
                note = f"{workers} worker{'s' if workers > 1 else ''}{level}"
                call = f"kinetrace.export_chrome_trace(prof, path, workers={workers})"
                filename = f"kinetrace.w{workers}.{fmt}"
            specs.append(
                _Spec(
                    "kinetrace",
                    fmt,
                    partial(_export_with, workers=workers),
                    note,
                    call,
                    filename,
                )
            )
        if fmt == "json.gz":
            for lv in extra_levels:
                if lv == _export.DEFAULT_COMPRESSLEVEL:
                    continue
                specs.append(
                    _Spec(
                        "kinetrace",
                        fmt,
                        partial(_export_with, compresslevel=lv),
                        f"default settings, level {lv}",
                        f"kinetrace.export_chrome_trace(prof, path, compresslevel={lv})",
                        f"kinetrace.l{lv}.{fmt}",
                    )
                )
    return specs


def compare(
    record: Callable[[], Any],
    out_dir: str,
    *,
    formats: Sequence[str] = ("json", "json.gz"),
    repeat: int = 1,
    extra_levels: Sequence[int] = (9,),
    include_stock: bool = True,
    worker_counts: Sequence[int | None] = (None, 1, 2),
) -> list[Row]:
    """Run every exporter through the call its users make; rows in table order.

    ``record()`` profiles the workload and returns the stopped ``torch.profiler.profile``.
    Every timed call gets a profile of its own, recorded just before it; ``repeat`` rounds
    run every row once each, in alternating order, and a row's seconds are the median of its
    rounds (see :func:`method_note`). ``worker_counts``: the kinetrace rows (None: the
    default settings). Each row's ``how`` says which call was timed, and its ``activities``
    how many activities its profiles held.
    """
    from kinetrace._export import profiler as _profiler

    if _profiler.installed():
        raise RuntimeError("kinetrace.install() is in effect: stock torch can't be timed")
    os.makedirs(out_dir, exist_ok=True)
    specs = _compare_specs(formats, extra_levels, include_stock, worker_counts)
    rows = _measure(specs, record, out_dir, repeat)
    _add_ratios(rows)
    return rows


def _measure(
    specs: list[_Spec],
    record: Callable[[], Any],
    out_dir: str,
    repeat: int,
    count: bool = True,
) -> list[Row]:
    """``repeat`` rounds of every spec, each on a fresh profile, the order alternating;
    the rows (median seconds, peak RSS growth); the outputs under the specs' file names.
    ``count``: count each profile's activities (torch < 2.13 cannot: no
    ``trace_activities()``)."""
    paths = {}
    for i, spec in enumerate(specs):
        name = spec.exporter.split()[0].lower()
        paths[id(spec)] = os.path.join(out_dir, f"{name}.{i}.{spec.fmt}")
    rounds = max(1, repeat)
    for r in range(rounds):
        for spec in specs if r % 2 == 0 else specs[::-1]:
            prof = record()
            if count:
                spec.counts.append(activity_count(prof))
            path = paths[id(spec)]
            gc.collect()
            with _PeakRss() as rss:
                t0 = time.perf_counter()
                spec.run(prof, path)
                spec.seconds.append(time.perf_counter() - t0)
            spec.peaks.append(rss.growth)
            del prof
            gc.collect()
    rows = []
    for spec in specs:
        path = paths[id(spec)]
        size = _size(path) if spec.fmt != "-" else None
        rows.append(
            Row(
                spec.exporter,
                spec.fmt,
                _median(spec.seconds),
                size,
                note=spec.note,
                peak_rss=max(spec.peaks),
                activities=spec.counts[0] if spec.counts else None,
                how=f"{spec.call}, median of {rounds}",
                rounds=rounds,
                samples=list(spec.seconds),
            )
        )
        if spec.filename and os.path.exists(path):
            os.replace(path, os.path.join(out_dir, spec.filename))
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
    torch < 2.13 its fallback), timed as :func:`compare` times (a fresh profile per call,
    rounds in alternating order, medians). Rows in table order; only exporters timed, so
    there is no accessor-floor row."""
    import warnings

    from kinetrace._export import fallback as _fallback

    os.makedirs(out_dir, exist_ok=True)

    def kinetrace_export(prof: Any, path: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _fallback.FallbackWarning)
            _export.export_chrome_trace(prof, path)

    specs = []
    for fmt in formats:
        note = "torch's own gzip copy, level 9" if fmt == "json.gz" else "Kineto's writer"
        specs.append(
            _Spec(
                "stock C++",
                fmt,
                lambda prof, p: prof.export_chrome_trace(p),
                note,
                "prof.export_chrome_trace(path)",
                f"stock.{fmt}",
            )
        )
    own_formatter = has_trace_activities()
    for fmt in formats:
        note = "torch Python-exporter bytes" if own_formatter else "Kineto's writer, streamed"
        if fmt == "json.gz":
            note += f", level {_export.DEFAULT_COMPRESSLEVEL}"
        call = "kinetrace.export_chrome_trace(prof, path)"
        specs.append(_Spec("kinetrace", fmt, kinetrace_export, note, call, f"kinetrace.{fmt}"))
    rows = _measure(specs, record, out_dir, repeat, count=False)
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
    if rows:
        lines.append(method_note(rows[0].rounds))
    return "\n".join(lines)
