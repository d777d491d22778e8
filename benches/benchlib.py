"""What only the benchmarks need (kept out of the wheel): the gzip encoder alone, how long
``on_trace_ready`` handlers block a step, machine facts, Markdown tables, the chart, and the
comparison of a run's ratios with the last full run committed under ``benches/results/``.
The comparison ``kinetrace demo`` prints is ``kinetrace._bench`` (in the wheel); the
synthetic source and the memory measurement the benchmarks share with the tests are in
``tests/support`` (``support.synthetic``, ``support.measure``; see :data:`TESTS`).
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kinetrace import _bench

RESULTS = Path(__file__).resolve().parent / "results"
#: The tests' folder, on ``sys.path`` so benchmarks import ``support.<module>`` as tests do.
TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

#: A ratio that moved by more than this fraction since the last full run is reported.
MOVED = 0.25


def rows_as_dicts(rows: list[_bench.Row]) -> list[dict[str, Any]]:
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


def measure_handler_block(handler: Callable[[Any], Any], prof: Any) -> tuple[float, float]:
    """How long ``handler(prof)`` holds up its caller, and how long until the file is done.

    Returns:
        ``(blocked_s, done_s)``: seconds until the handler returned, and until its export
        finished (the same for a synchronous export; for a background one, after waiting on
        the handle's ``result()``, which re-raises the export's error).
    """
    started = time.perf_counter()
    outcome = handler(prof)
    blocked = time.perf_counter() - started
    result = getattr(outcome, "result", None)
    if callable(result):
        result()
    return blocked, time.perf_counter() - started


def handler_blocking(iterations: int, out_dir: str, rounds: int = 1) -> list[dict[str, Any]]:
    """How long ``on_trace_ready`` holds up a training step: torch's
    ``tensorboard_trace_handler`` vs kinetrace's, foreground and background, each call on a
    fresh profile of ``iterations`` steps; ``rounds`` rounds in alternating order, medians
    (``kinetrace._bench.method_note``)."""
    import torch.profiler

    import kinetrace

    variants = [
        ("torch handler", "json", lambda d: torch.profiler.tensorboard_trace_handler(d)),
        (
            "torch handler",
            "json.gz",
            lambda d: torch.profiler.tensorboard_trace_handler(d, use_gzip=True),
        ),
        ("kinetrace handler", "json", lambda d: kinetrace.tensorboard_trace_handler(d)),
        (
            "kinetrace handler",
            "json.gz",
            lambda d: kinetrace.tensorboard_trace_handler(d, use_gzip=True),
        ),
        (
            "kinetrace background",
            "json",
            lambda d: kinetrace.tensorboard_trace_handler(d, background=True),
        ),
        (
            "kinetrace background",
            "json.gz",
            lambda d: kinetrace.tensorboard_trace_handler(d, use_gzip=True, background=True),
        ),
    ]
    times: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(variants))}
    order = list(range(len(variants)))
    for r in range(max(1, rounds)):
        for i in order if r % 2 == 0 else order[::-1]:
            make = variants[i][2]
            prof = _bench.record_workload(iterations)
            directory = os.path.join(out_dir, f"handler{i}.{r}")
            gc.collect()
            times[i].append(measure_handler_block(make(directory), prof))
            del prof
    rows = []
    for i, (who, fmt, _) in enumerate(variants):
        how = (
            "torch.profiler.tensorboard_trace_handler(dir"
            if who == "torch handler"
            else "kinetrace.tensorboard_trace_handler(dir"
        )
        how += ", use_gzip=True" if fmt == "json.gz" else ""
        how += ", background=True" if "background" in who else ""
        how += f")(prof), median of {max(1, rounds)}"
        blocked = statistics.median(b for b, _ in times[i])
        done = statistics.median(d for _, d in times[i])
        rows.append({"handler": who, "fmt": fmt, "blocked_s": blocked, "done_s": done, "how": how})
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


# --------------------------------------------------------------------------------------
# machine facts, Markdown, chart
# --------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        return subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def free_cores(seconds: float = 0.5) -> float:
    """How many cores this run can have right now: one spinning process per usable core
    for ``seconds``, their CPU time over the wall time (2.0 on an idle 2-core machine, ~1 when
    other work keeps one core busy). The load average lags by a minute and counts the
    benchmark itself; this does not. The spinners are fresh interpreters, not forks of this
    process (a fork of a process with torch's threads can block on a lock one of them held)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    spin = (
        "import time\n"
        "start, cpu = time.perf_counter(), time.process_time()\n"
        f"while time.perf_counter() - start < {seconds}:\n"
        "    pass\n"
        "print(time.process_time() - cpu)\n"
    )
    spinners = [
        subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
        for _ in range(cores)
    ]
    return sum(float(p.communicate()[0]) for p in spinners) / seconds


def machine_facts() -> dict[str, Any]:
    """Where and when a run happened: cores, CPU model, memory, load, versions, commit."""
    import torch

    import kinetrace

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "cpu_model": _cpu_model(),
        "memory_bytes": _memory_bytes(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "free_cores": round(free_cores(), 2),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "kinetrace": kinetrace.__version__,
        "platform": platform.platform(),
        "commit": _git_commit(),
    }


def _load_text(m: dict[str, Any]) -> str:
    load = m.get("load_average")
    text = f", load average {load[0]:.1f} at the start" if load else ""
    if m.get("free_cores") is not None:
        text += f" ({m['free_cores']:.1f} cores free)"
    return text


def _cell(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def markdown_tables(payload: dict[str, Any]) -> str:
    """The run as Markdown: one table per workload (with how each row was timed), the
    handler table and the encoder table."""
    m = payload["machine"]
    out = [
        f"Machine: {m['cpus']} cores ({m.get('cpu_model', '?')}), Python {m['python']}, "
        f"torch {m['torch']}, {m.get('date', '')[:10]}{_load_text(m)}; "
        f"{payload['iterations']} steps. {_bench.method_note(payload.get('repeat', 1))}",
        "",
    ]
    for name, w in payload["workloads"].items():
        floor = w["rows"][0]["seconds"]
        out += [
            f"**Workload `{name}`** ({', '.join(f'{k}={v}' for k, v in w['options'].items())}):"
            f" {w['activities']:,} activities. Accessor floor {floor:.3f} s.",
            "",
            "| exporter | format | seconds | x floor | MB | peak MB | vs stock | vs torch Python"
            " | note | how it was timed |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in w["rows"][1:]:
            vs_c = r["ratios"].get("speedup vs stock C++")
            vs_p = r["ratios"].get("speedup vs torch Python")
            size = "" if r["size"] is None else f"{r['size'] / 1e6:.2f}"
            peak = "" if r.get("peak_rss") is None else f"{r['peak_rss'] / 2**20:.0f}"
            how = r.get("how", "").replace("|", "\\|")
            if r.get("activities") not in (None, w["activities"]):
                how += f" ({r['activities']:,} activities)"
            out.append(
                f"| {r['exporter']} | {r['fmt']} | {r['seconds']:.3f} | "
                f"{r['ratios']['x floor']:.2f} | {size} | {peak} | "
                f"{_cell(vs_c, '.2f')}{'x' if vs_c else ''} | "
                f"{_cell(vs_p, '.2f')}{'x' if vs_p else ''} | {r['note']} | `{how}` |"
            )
        out.append("")
    if payload.get("handler"):
        out += [
            "**A training step blocked by `on_trace_ready`** (the `shapes` workload, a fresh"
            " profile per call, medians as above):",
            "",
            "| handler | format | blocked s | file done s | how it was timed |",
            "|---|---|---|---|---|",
        ]
        for r in payload["handler"]:
            out.append(
                f"| {r['handler']} | {r['fmt']} | {r['blocked_s']:.3f} | {r['done_s']:.3f} | "
                f"`{r.get('how', '')}` |"
            )
        out.append("")
    if payload.get("encoder"):
        enc = payload["encoder"]
        single = {r["level"]: r["mb_per_s"] for r in enc["rows"] if r["threads"] == 1}
        out += [
            f"**The gzip encoder alone** (`GzipWriter` to `/dev/null`, "
            f"{enc['text_bytes'] / 1e6:.0f} MB of trace text):",
            "",
            "| level | threads | MB/s | speedup | ratio |",
            "|---|---|---|---|---|",
        ]
        for r in enc["rows"]:
            out.append(
                f"| {r['level']} | {r['threads']} | {r['mb_per_s']:.0f} | "
                f"{r['mb_per_s'] / single[r['level']]:.2f}x | {r['ratio']:.1f}x |"
            )
        out.append("")
    return "\n".join(out)


def _pick(w: dict[str, Any], exporter: str, fmt: str) -> dict[str, Any] | None:
    for r in w["rows"]:
        if r["exporter"] == exporter and r["fmt"] == fmt:
            return r  # kinetrace: the first row is 1 worker at the default level
    return None


def summary_markdown(payload: dict[str, Any], workload: str = "shapes") -> str:
    """The README's headline: one workload, the three exporters, both formats."""
    w = payload["workloads"][workload]
    m = payload["machine"]
    peers = [
        ("torch, stock (`prof.export_chrome_trace(path)`, Kineto C++)", "stock C++"),
        ("torch, Python exporter (`use_python_export=True`)", "torch Python"),
        ("**kinetrace** (`kinetrace.export_chrome_trace(prof, path)`)", "kinetrace"),
    ]
    out = [
        f"On a {w['activities']:,}-activity profile ({payload['iterations']:,} steps, "
        f"`record_shapes=True`), torch {m['torch']}, {m['cpus']} cores{_load_text(m)}, each "
        "exporter timed through the call its users make, default settings (the median of "
        f"{payload.get('repeat', 1)} rounds, each call on a fresh profile, the order "
        "alternating):",
        "",
        "| exporter | `.json` | `.json.gz` |",
        "|---|---|---|",
    ]
    for label, exporter in peers:
        cells = []
        for fmt in ("json", "json.gz"):
            r = _pick(w, exporter, fmt)
            cells.append("" if r is None else f"{r['seconds']:.2f} s, {r['size'] / 1e6:.2f} MB")
        out.append(f"| {label} | {' | '.join(cells)} |")
    sentences = []
    for fmt in ("json.gz", "json"):
        r = _pick(w, "kinetrace", fmt)
        if r is None:
            continue
        vs_c = r["ratios"].get("speedup vs stock C++")
        vs_p = r["ratios"].get("speedup vs torch Python")
        if vs_c and vs_p:
            sentences.append(
                f"`.{fmt}`: {vs_c:.1f}x the speed of stock torch, {vs_p:.1f}x that of torch's "
                "Python exporter"
            )
    out += ["", "; ".join(sentences) + "."]
    return "\n".join(out)


def replace_between(text: str, name: str, body: str) -> str:
    """``text`` with what stands between ``<!-- name:start -->`` and ``<!-- name:end -->``
    replaced by ``body``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"no {start} ... {end} block")
    return text[: i + len(start)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


#: The bars of the chart: (label, exporter, note or None for any).
_CHART_ROWS = [
    ("torch stock", "stock C++", None),
    ("torch Python", "torch Python", None),
    ("kinetrace", "kinetrace", "default settings"),
]


def write_chart(payload: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Seconds per exporter and format, one panel per workload, as SVG or PNG (by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = payload["workloads"]
    fig, axes = plt.subplots(
        1, len(workloads), figsize=(5.2 * len(workloads), 3.2), squeeze=False, sharey=True
    )
    formats = ["json", "json.gz"]
    colors = {"json": "#7f9fbf", "json.gz": "#2f5f8f"}
    for ax, (name, w) in zip(axes[0], workloads.items(), strict=True):
        for j, fmt in enumerate(formats):
            ys, xs = [], []
            for i, (_label, exporter, note) in enumerate(_CHART_ROWS):
                match = [
                    r
                    for r in w["rows"]
                    if r["exporter"] == exporter
                    and r["fmt"] == fmt
                    and (note is None or r["note"].startswith(note))
                ]
                if match:
                    ys.append(i + (j - 0.5) * 0.38)
                    xs.append(match[0]["seconds"])
            bars = ax.barh(ys, xs, height=0.36, color=colors[fmt], label=f".{fmt}")
            ax.bar_label(bars, fmt="%.2f s", padding=2, fontsize=8)
        ax.set_yticks(range(len(_CHART_ROWS)), [label for label, _, _ in _CHART_ROWS])
        ax.set_title(f"{name}: {w['activities']:,} activities", fontsize=10)
        ax.set_xlabel("seconds (lower is better)")
        ax.margins(x=0.18)
    axes[0][0].invert_yaxis()  # once: the panels share the axis; torch stock at the top
    axes[0][0].legend(loc="lower right", fontsize=8)
    m = payload["machine"]
    fig.suptitle(
        f"Chrome-trace export, torch {m['torch']}, {m['cpus']} cores, {m.get('date', '')[:10]}",
        fontsize=10,
    )
    fig.tight_layout()
    # No timestamps or random ids in the file: the same figures give the same bytes.
    matplotlib.rcParams["svg.hashsalt"] = "kinetrace"
    metadata = {"Date": None} if str(path).endswith(".svg") else {}
    fig.savefig(path, metadata=metadata)
    plt.close(fig)


# --------------------------------------------------------------------------------------
# history: ratios against the last full run
# --------------------------------------------------------------------------------------


def _run_date(path: Path, payload: dict[str, Any]) -> str:
    date = payload.get("machine", {}).get("date")
    if date:
        return str(date)
    found = re.search(r"\d{4}-\d{2}-\d{2}", path.name)
    return found.group(0) if found else ""


def last_full_run(directory: Path = RESULTS) -> tuple[Path, dict[str, Any]] | None:
    """The newest full run under ``directory`` (by the date it records), or None."""
    runs = []
    for path in directory.glob("*.json"):
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(payload, dict) and "workloads" in payload:
            runs.append((_run_date(path, payload), path.name, path, payload))
    if not runs:
        return None
    runs.sort(key=lambda run: (run[0], run[1]))
    return runs[-1][2], runs[-1][3]


def ratios(payload: dict[str, Any]) -> dict[str, float]:
    """Every ratio of a run by a stable name: speedups, multiples of the accessor floor,
    and torch's handler time over kinetrace's. Absolute times are left out on purpose."""
    out: dict[str, float] = {}
    for name, w in payload.get("workloads", {}).items():
        for r in w["rows"]:
            label = f"{name}: {r['exporter']} {r['fmt']}" + (f" ({r['note']})" if r["note"] else "")
            for ratio, value in r.get("ratios", {}).items():
                if ratio == "x floor" and r["exporter"] == "accessor floor":
                    continue
                out[f"{label} {ratio}"] = value
    handler = {(r["handler"], r["fmt"]): r["blocked_s"] for r in payload.get("handler", [])}
    for fmt in ("json", "json.gz"):
        torch_s = handler.get(("torch handler", fmt))
        ours = handler.get(("kinetrace handler", fmt))
        if torch_s and ours:
            out[f"handler {fmt}: torch blocked / kinetrace blocked"] = torch_s / ours
    return out


def compare_with(previous: dict[str, Any], current: dict[str, Any]) -> tuple[list[str], int]:
    """Lines comparing the ratios two runs share, marking each that moved by more than
    :data:`MOVED`; and how many moved."""
    before, now = ratios(previous), ratios(current)
    lines = [f"{'ratio':<72} {'last full':>9} {'this run':>9}  change"]
    moved = 0
    for key in sorted(before.keys() & now.keys()):
        change = now[key] / before[key] - 1 if before[key] else 0.0
        flag = ""
        if abs(change) > MOVED:
            moved += 1
            flag = "  <<< MOVED"
        lines.append(f"{key:<72} {before[key]:9.2f} {now[key]:9.2f}  {change:+6.0%}{flag}")
    return lines, moved
