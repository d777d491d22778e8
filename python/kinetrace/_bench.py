"""The comparison behind ``kinetrace demo`` and ``benches/bench_export.py``.

One profile, one process, the same ``_ProfilerResult`` for every exporter:
- stock C++: Kineto's ``ChromeTraceLogger`` (``result.save``), which torch's
  ``prof.export_chrome_trace`` calls; its ``.json.gz`` path is that file gzipped at level 9
  by Python afterwards (torch writes a temp ``.json`` and copies it through ``gzip.open``).
  ``save`` works once per result, so the ``.gz`` row reuses the timed ``.json`` save and
  adds the timed gzip copy, which is exactly torch's sequence;
- torch Python: ``torch.profiler._chrome_trace_export.export_chrome_trace``;
- kinetrace;
- the accessor floor: ``trace_activities()`` plus the field reads kinetrace makes (and
  freeing the list), timed alone. No exporter built on these accessors can beat it on one
  core.
"""

from __future__ import annotations

import gc
import gzip
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import compress
from typing import Any

from kinetrace import _export, _kinetrace

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


def record_workload(iterations: int, *, record_shapes: bool = True, with_stack: bool = False):
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
    """Seconds for ``trace_activities()`` plus every accessor call kinetrace makes, plus
    freeing the activity list again (every exporter that builds the list pays for that)."""
    t0 = time.perf_counter()
    _read_every_field(result.trace_activities())
    return time.perf_counter() - t0


def _read_every_field(acts: list[Any]) -> None:
    """The accessor calls of an export (the list is freed when this returns)."""
    get = _export._getters(acts, _export._FIRST_PASS_FIELDS + _export._SECOND_PASS_FIELDS)
    n = len(acts)
    step = _export.BATCH_SIZE
    for lo in range(0, n, step):
        part = acts[lo : lo + step]
        for f in _export._FIRST_PASS_FIELDS:
            list(map(get[f], part))
    for lo in range(0, n, step):
        part = acts[lo : lo + step]
        cats = list(map(get["type"], part))
        linked = list(map(get["linked_correlation_id"], part))
        flow_ids = list(map(get["flow_id"], part))
        list(map(get["name"], part))
        list(map(get["metadata_json"], part))
        need = [
            not li and c not in EXCLUDED_EXTERNAL_ID for c, li in zip(cats, linked, strict=True)
        ]
        list(map(get["correlation_id"], compress(part, need)))
        flows = list(compress(part, [f > 0 for f in flow_ids]))
        list(map(get["flow_type"], flows))
        list(map(get["flow_start"], flows))
        _export._comms_metadata(compress(part, [c == "kernel" for c in cats]))


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


def _row(exporter: str, fmt: str, seconds: float, size: int | None, note: str = "") -> Row:
    return Row(exporter, fmt, seconds, size, note=note, peak_rss=_last_peak[0])


def _size(path: str) -> int:
    return os.path.getsize(path)


def compare(
    prof: Any,
    out_dir: str,
    *,
    formats: Sequence[str] = ("json", "json.gz"),
    repeat: int = 1,
    extra_levels: Sequence[int] = (9,),
    include_stock: bool = True,
    worker_counts: Sequence[int] = (1, 2),
) -> list[Row]:
    """Run every exporter on ``prof``'s result; rows in table order."""
    from torch.profiler._chrome_trace_export import export_chrome_trace as torch_python_export

    result = prof.profiler.kineto_results
    metadata = prof._trace_metadata
    os.makedirs(out_dir, exist_ok=True)
    rows: list[Row] = []
    floor = _timed(lambda: accessor_floor(result), repeat)
    rows.append(_row("accessor floor", "-", floor, None, "trace_activities() + field reads"))

    stock_json = os.path.join(out_dir, "stock.json")
    if include_stock:
        stock_seconds = _timed(lambda: result.save(stock_json), 1)  # works once per result
        stock_peak = _last_peak[0]
        if "json" in formats:
            rows.append(_row("stock C++", "json", stock_seconds, _size(stock_json)))
        if "json.gz" in formats:
            stock_gz = os.path.join(out_dir, "stock.json.gz")

            def gzip_copy() -> None:
                with open(stock_json, "rb") as fin, gzip.open(stock_gz, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)

            gz_seconds = _timed(gzip_copy, 1)
            _last_peak[0] = max(_last_peak[0], stock_peak)
            rows.append(
                _row(
                    "stock C++",
                    "json.gz",
                    stock_seconds + gz_seconds,
                    _size(stock_gz),
                    f"save {stock_seconds:.2f} s + gzip -9 {gz_seconds:.2f} s",
                )
            )

    for fmt in formats:
        path = os.path.join(out_dir, f"torch_python.{fmt}")
        seconds = _timed(lambda p=path: torch_python_export(result, p, metadata), repeat)
        rows.append(_row("torch Python", fmt, seconds, _size(path)))

    for fmt in formats:
        for workers in worker_counts:
            path = os.path.join(out_dir, f"kinetrace.w{workers}.{fmt}")
            seconds = _timed(
                lambda p=path, w=workers: _export.export_chrome_trace(prof, p, workers=w), repeat
            )
            note = f"{workers} worker{'s' if workers > 1 else ''}"
            if fmt == "json.gz":
                note += f", level {_export.DEFAULT_COMPRESSLEVEL}"
            rows.append(_row("kinetrace", fmt, seconds, _size(path), note))
        if fmt == "json.gz":
            for level in extra_levels:
                if level == _export.DEFAULT_COMPRESSLEVEL:
                    continue
                path = os.path.join(out_dir, f"kinetrace.l{level}.{fmt}")
                seconds = _timed(
                    lambda p=path, lv=level: _export.export_chrome_trace(
                        prof, p, compresslevel=lv, workers=1
                    ),
                    repeat,
                )
                rows.append(
                    _row("kinetrace", fmt, seconds, _size(path), f"1 worker, level {level}")
                )
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
    torch < 2.13 its fallback), each run on a fresh profile from ``record()`` (Kineto's
    ``save`` works once per result). Rows in table order; only exporters timed, so there is
    no accessor-floor row."""
    import warnings

    from kinetrace import _fallback

    os.makedirs(out_dir, exist_ok=True)
    rows: list[Row] = []

    def best_of(export: Callable[[Any, str], Any], path: str) -> float:
        best = float("inf")
        peak = 0
        for _ in range(max(1, repeat)):
            prof = record()
            gc.collect()
            with _PeakRss() as rss:
                t0 = time.perf_counter()
                export(prof, path)
                best = min(best, time.perf_counter() - t0)
            peak = max(peak, rss.growth)
            del prof
        _last_peak[0] = peak
        return best

    def kinetrace_export(prof: Any, path: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", _fallback.FallbackWarning)
            _export.export_chrome_trace(prof, path)

    for fmt in formats:
        path = os.path.join(out_dir, f"stock.{fmt}")
        seconds = best_of(lambda prof, p: prof.export_chrome_trace(p), path)
        note = "torch's own gzip copy, level 9" if fmt == "json.gz" else "Kineto's writer"
        rows.append(_row("stock C++", fmt, seconds, _size(path), note))
    own_formatter = has_trace_activities()
    for fmt in formats:
        path = os.path.join(out_dir, f"kinetrace.{fmt}")
        seconds = best_of(kinetrace_export, path)
        note = "torch Python-exporter bytes" if own_formatter else "Kineto's writer, streamed"
        if fmt == "json.gz":
            note += f", level {_export.DEFAULT_COMPRESSLEVEL}"
        rows.append(_row("kinetrace", fmt, seconds, _size(path), note))
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
    return "\n".join(lines)


def rows_as_dicts(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows for JSON output."""
    return [asdict(r) for r in rows]


def encoder_throughput(
    text: bytes, levels: Sequence[int] = (1, 3, 6, 9), threads: Sequence[int] = (1, 2)
) -> list[dict[str, Any]]:
    """The parallel gzip encoder alone (``GzipWriter`` to ``/dev/null``) on ``text``."""
    from kinetrace import GzipWriter

    chunk = 4 << 20
    out = []
    for level in levels:
        for n in threads:
            gc.collect()
            t0 = time.perf_counter()
            with GzipWriter(os.devnull, compresslevel=level, threads=n) as w:
                view = memoryview(text)
                for i in range(0, len(text), chunk):
                    w.write(view[i : i + chunk])
            seconds = time.perf_counter() - t0
            out.append(
                {
                    "level": level,
                    "threads": n,
                    "seconds": seconds,
                    "mb_per_s": len(text) / seconds / 1e6,
                    "compressed": w.bytes_out,
                    "ratio": len(text) / max(1, w.bytes_out or 1),
                }
            )
    return out


def format_encoder_table(rows: list[dict[str, Any]], text_bytes: int) -> str:
    """A table of :func:`encoder_throughput` results with the 2-thread speedup."""
    single = {r["level"]: r["mb_per_s"] for r in rows if r["threads"] == 1}
    lines = [
        f"gzip encoder alone on {text_bytes / 1e6:.0f} MB of trace text",
        f"{'level':>5} {'threads':>7} {'MB/s':>8} {'MB/s/thread':>11} {'speedup':>8} {'ratio':>7}",
    ]
    for r in rows:
        lines.append(
            f"{r['level']:>5} {r['threads']:>7} {r['mb_per_s']:8.0f} "
            f"{r['mb_per_s'] / r['threads']:11.0f} {r['mb_per_s'] / single[r['level']]:7.2f}x "
            f"{r['ratio']:6.1f}x"
        )
    return "\n".join(lines)


def handler_blocking(iterations: int, out_dir: str) -> list[dict[str, Any]]:
    """How long ``on_trace_ready`` holds up a training step: torch's
    ``tensorboard_trace_handler`` vs kinetrace's, foreground and background, each on a
    fresh profile of ``iterations`` steps (torch's stock export can save a result once)."""
    import torch.profiler

    from kinetrace import _profiler

    variants = [
        ("torch handler", "json", lambda d: torch.profiler.tensorboard_trace_handler(d)),
        (
            "torch handler",
            "json.gz",
            lambda d: torch.profiler.tensorboard_trace_handler(d, use_gzip=True),
        ),
        ("kinetrace handler", "json", lambda d: _profiler.tensorboard_trace_handler(d)),
        (
            "kinetrace handler",
            "json.gz",
            lambda d: _profiler.tensorboard_trace_handler(d, use_gzip=True),
        ),
        (
            "kinetrace background",
            "json",
            lambda d: _profiler.tensorboard_trace_handler(d, background=True),
        ),
        (
            "kinetrace background",
            "json.gz",
            lambda d: _profiler.tensorboard_trace_handler(d, use_gzip=True, background=True),
        ),
    ]
    rows = []
    for i, (who, fmt, make) in enumerate(variants):
        prof = record_workload(iterations)
        directory = os.path.join(out_dir, f"handler{i}")
        gc.collect()
        blocked, done = _profiler.measure_handler_block(make(directory), prof)
        rows.append({"handler": who, "fmt": fmt, "blocked_s": blocked, "done_s": done})
        del prof
    return rows


def format_handler_table(rows: list[dict[str, Any]]) -> str:
    """A table of :func:`handler_blocking` results."""
    lines = [
        "on_trace_ready: how long the training step is blocked",
        f"{'handler':<22} {'format':<8} {'blocked s':>9} {'file done s':>11}",
    ]
    for r in rows:
        lines.append(f"{r['handler']:<22} {r['fmt']:<8} {r['blocked_s']:9.3f} {r['done_s']:11.3f}")
    return "\n".join(lines)
