"""The ``kinetrace diff --html`` page: one self-contained file (no script, no network), the
verdict first, then two SVG charts drawn here: a waterfall from BASE's median step to NEW's
through the largest changes per step, and both sides' step times on one axis; then the
tables of the terminal report."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from kinetrace._text import change_pct, duration, p_value, signed_duration
from kinetrace._tools.diff import ESTIMATOR_FIGURES, DiffResult, StepComparison
from kinetrace._tools.diff_names import row_label
from kinetrace._tools.diff_ops import OperatorChange
from kinetrace._tools.diff_stats import median
from kinetrace._tools.summary_html import PAGE_STYLE, SVG_NS, WIDTH, svg_label, write_atomically

__all__ = ["Contributor", "contributors", "render_html", "write_html"]

#: Named bars of the waterfall; the rest are summed into one bar.
WATERFALL_TOP = 8
#: Rows of the GPU activity table (the terminal report's).
TABLE_TOP = 10
#: The waterfall's ends, a step up (slower) and a step down (faster); BASE and NEW's dots.
END, UP, DOWN = "#3b7dd8", "#d8553b", "#3b9d5d"
SIDES = (("BASE", "#3b7dd8"), ("NEW", "#e8a33d"))

_EXTRA_STYLE = """
p.verdict { font-size: 16px; font-weight: 600; }
figure { margin: 0; } figcaption { color: #444; margin-top: 4px; }
"""


@dataclass(frozen=True)
class Contributor:
    """One step of the waterfall: a change per step (µs) and what it is."""

    name: str
    change_us: float
    kind: str


def operator_label(o: OperatorChange) -> str:
    """An operator row's name with its shapes, types and the GPU activity it spent most on
    (``aten::mm [[64,64],[64,64]] [float,float] -> void gemm<...>``)."""
    label = row_label(o.status, o.name, o.new_name)
    for part in (o.input_dims, o.input_type):
        if part and part != "[]":
            label += f" {part}"
    return label + (f" -> {o.top_kernel}" if o.top_kernel else "")


def _named(result: DiffResult) -> tuple[list[Contributor], str]:
    """The per-step changes by name: the operators where the result has them (they own
    their GPU activities, which would count twice beside them), else the GPU activities."""
    if result.operators:
        rows = [Contributor(operator_label(o), o.change_us, "operator") for o in result.operators]
        return rows, "operator"
    rows = [
        Contributor(row_label(k.status, k.name, k.new_name), k.change_us, "GPU activity")
        for k in result.kernels
    ]
    return rows, "GPU activity"


def contributors(result: DiffResult) -> list[Contributor]:
    """The waterfall's steps between its two ends: the :data:`WATERFALL_TOP` largest
    changes by name, the others summed, the GPU's idle time per step (the mean over the
    ranks compared) where GPU activities are the names, and the rest of the change of the
    median step (CPU time, overlap, the slowest rank's share): they add up to NEW's median."""
    v = result.verdict
    if v.base_median_us is None or v.new_median_us is None:
        return []
    named, kind = _named(result)
    named.sort(key=lambda c: (-abs(c.change_us), c.name))
    out = named[:WATERFALL_TOP]
    others = named[WATERFALL_TOP:]
    if others:
        plural = "operators" if kind == "operator" else "GPU activities"
        out.append(
            Contributor(f"{len(others)} other {plural}", sum(c.change_us for c in others), kind)
        )
    if kind == "GPU activity" and result.kernels and result.ranks:
        idle = [c.change_us for r in result.ranks for c in r.breakdown if c.name == "idle"]
        if idle:
            out.append(Contributor("GPU idle", sum(idle) / len(result.ranks), "breakdown"))
    rest = v.new_median_us - v.base_median_us - sum(c.change_us for c in out)
    out.append(Contributor("rest of the step (CPU, overlap, slowest rank)", rest, "rest"))
    return out


def _waterfall_svg(result: DiffResult) -> str:
    v = result.verdict
    steps = contributors(result)
    if v.base_median_us is None or v.new_median_us is None:
        return "<p>No step time on one side: no waterfall.</p>"
    bar, gap, label_w, value_w = 16, 6, 380, 110
    plot_w = WIDTH - label_w - value_w
    totals = [v.base_median_us]
    for c in steps:
        totals.append(totals[-1] + c.change_us)
    lo, hi = min(totals), max(totals)
    # The axis starts below the lowest total by half the totals' span (at 0 where they are
    # equal or the span reaches it): changes of a few % stay visible.
    start = max(lo - (hi - lo) / 2, 0.0) if hi > lo else 0.0
    end = hi + (hi - start) * 0.02 or 1.0
    scale = plot_w / (end - start)

    def x(us: float) -> float:
        return label_w + (us - start) * scale

    step = "median step" if v.estimator == "median" else f"step ({ESTIMATOR_FIGURES[v.estimator]})"
    rows = [(f"BASE {step}", start, v.base_median_us, "wf-end", END, duration(v.base_median_us))]
    for c, before, after in zip(steps, totals[:-1], totals[1:], strict=True):
        cls, colour = ("wf-up", UP) if c.change_us > 0 else ("wf-down", DOWN)
        rows.append((c.name, before, after, cls, colour, signed_duration(c.change_us)))
    rows.append((f"NEW {step}", start, v.new_median_us, "wf-end", END, duration(v.new_median_us)))
    height = len(rows) * (bar + gap) + 24
    parts = [f'<svg xmlns="{SVG_NS}" width="{WIDTH}" height="{height}" class="waterfall">']
    for i, (name, a, b, cls, colour, value) in enumerate(rows):
        y = i * (bar + gap)
        left, w = x(min(a, b)), max(abs(b - a) * scale, 1.0)
        parts.append(svg_label(name, label_w - 6, y + bar - 4, label_w - 10))
        parts.append(
            f'<rect class="{cls}" x="{left:.2f}" y="{y}" width="{w:.2f}" height="{bar}" '
            f'fill="{colour}"><title>{escape(f"{name}: {value}")}</title></rect>'
        )
        parts.append(f'<text x="{left + w + 4:.2f}" y="{y + bar - 4}">{escape(value)}</text>')
    y = len(rows) * (bar + gap) + 12
    for us in (start, end):
        anchor = "start" if us == start else "end"
        parts.append(f'<text x="{x(us):.2f}" y="{y}" text-anchor="{anchor}">{duration(us)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ticks(start: float, end: float, n: int = 5) -> list[float]:
    return [start + (end - start) * i / (n - 1) for i in range(n)]


def _strip_svg(v: StepComparison) -> str:
    """Each side's step samples as dots on one axis (spread up and down so they do not hide
    each other), its median a line."""
    samples = (v.base_step_us, v.new_step_us)
    every = [s for side in samples for s in side]
    if not every:
        return "<p>No steps on either side.</p>"
    label_w, row_h, pad = 70, 56, 12
    plot_w = WIDTH - label_w - 2 * pad
    lo, hi = min(every), max(every)
    lo, hi = (lo, hi) if hi > lo else (lo * 0.95, hi * 1.05 or 1.0)

    def x(us: float) -> float:
        return label_w + pad + (us - lo) * plot_w / (hi - lo)

    height = 2 * row_h + 30
    parts = [f'<svg xmlns="{SVG_NS}" width="{WIDTH}" height="{height}" class="steps">']
    for row, ((side, colour), values) in enumerate(zip(SIDES, samples, strict=True)):
        top = row * row_h
        parts.append(
            f'<text x="{label_w - 8}" y="{top + row_h / 2 + 4}" text-anchor="end">{side}</text>'
        )
        for i, us in enumerate(values):
            # A fixed spread by the golden ratio: the same samples always draw the same.
            cy = top + 8 + (row_h - 16) * ((i * 0.6180339887) % 1.0)
            parts.append(
                f'<circle class="sample-{side.lower()}" cx="{x(us):.2f}" cy="{cy:.2f}" r="3" '
                f'fill="{colour}" fill-opacity="0.6"><title>{side} step: {duration(us)}</title>'
                "</circle>"
            )
        if values:
            m = median(values)
            parts.append(
                f'<line class="median" x1="{x(m):.2f}" x2="{x(m):.2f}" y1="{top + 2}" '
                f'y2="{top + row_h - 2}" stroke="#222" stroke-width="2">'
                f"<title>{side} median: {duration(m)}</title></line>"
            )
    axis = 2 * row_h + 4
    parts.append(f'<line x1="{x(lo)}" x2="{x(hi)}" y1="{axis}" y2="{axis}" stroke="#999"/>')
    for i, us in enumerate(_ticks(lo, hi)):
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text x="{x(us):.2f}" y="{axis + 16}" text-anchor="{anchor}">{duration(us)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _test_name(test: str | None) -> str:
    """How the p-value was had, in words."""
    if test == "bootstrap":
        return "bootstrap of the runs"
    return f"{test} Mann-Whitney"


def _strip_caption(v: StepComparison) -> str:
    if v.ci_low_pct is None or v.base_median_us is None or v.new_median_us is None:
        return f"{v.base_steps} steps in BASE, {v.new_steps} in NEW: {v.verdict}."
    figure = ESTIMATOR_FIGURES[v.estimator].capitalize()
    test = _test_name(v.test) + ("" if v.estimator == "median" else " of the runs' figures")
    return (
        f"{figure} {duration(v.base_median_us)} (BASE, {v.base_steps} steps) and "
        f"{duration(v.new_median_us)} (NEW, {v.new_steps} steps), the lines: change "
        f"{change_pct(v.change_pct)}, "
        f"95% CI [{change_pct(v.ci_low_pct)}, {change_pct(v.ci_high_pct)}], "
        f"p={p_value(v.p_value)} ({test}), verdict {v.verdict}."
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> str:
    """An HTML table, its column ``left`` aligned left (a name), the others right."""

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            f"<{tag}{' class=l' if j == left else ''}>{escape(c)}</{tag}>"
            for j, c in enumerate(row)
        )

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    return f"<table><tr>{cells('th', head)}</tr>{body}</table>"


def _tables(result: DiffResult) -> str:
    parts = []
    for side, ranks in (("BASE", result.base_only_ranks), ("NEW", result.new_only_ranks)):
        if ranks:
            parts.append(f"<p>ranks only in {side}: {', '.join(map(str, ranks))}</p>")
    if result.ranks:
        rows = []
        for r in result.ranks:
            v = r.steps
            label = str(r.rank) if r.rank == r.new_rank else f"{r.rank}/{r.new_rank}"
            ci = (
                f"[{change_pct(v.ci_low_pct)}, {change_pct(v.ci_high_pct)}]"
                if v.ci_low_pct is not None
                else "-"
            )
            b = "-" if v.base_median_us is None else duration(v.base_median_us)
            n = "-" if v.new_median_us is None else duration(v.new_median_us)
            rows.append([label, b, n, change_pct(v.change_pct), ci, p_value(v.p_value), v.verdict])
        head = ["rank", "BASE", "NEW", "change", "95% CI", "p", "verdict"]
        parts += ["<h2>Step time per rank (medians)</h2>", _table(head, rows, 6)]
    if result.ranks and result.kernels:
        rows = [
            [
                str(r.rank),
                c.name,
                duration(c.base_us),
                duration(c.new_us),
                signed_duration(c.change_us),
            ]
            for r in result.ranks
            for c in r.breakdown
        ]
        head = ["rank", "per step", "BASE", "NEW", "change"]
        parts += ["<h2>GPU time per step, per rank</h2>", _table(head, rows, 1)]
    if result.kernels:
        rows = [
            [
                signed_duration(k.change_us),
                duration(k.base_us),
                duration(k.new_us),
                f"{k.base_count:.3g}->{k.new_count:.3g}",
                row_label(k.status, k.name, k.new_name),
            ]
            for k in result.kernels[:TABLE_TOP]
        ]
        head = ["change/step", "BASE/step", "NEW/step", "count/step", "name"]
        title = f"GPU activities, largest change first (top {TABLE_TOP})"
        parts += [f"<h2>{title}</h2>", _table(head, rows, 4)]
    if result.operators:
        rows = [
            [
                signed_duration(o.change_us),
                signed_duration(o.new_self_us - o.base_self_us),
                signed_duration(o.new_gpu_us - o.base_gpu_us),
                f"{o.base_count:.3g}->{o.new_count:.3g}",
                operator_label(o),
            ]
            for o in result.operators[:TABLE_TOP]
        ]
        head = ["change/step", "self CPU", "own GPU", "count/step", "operator"]
        title = f"Operators per step, self CPU + own GPU time (top {TABLE_TOP})"
        parts += [f"<h2>{title}</h2>", _table(head, rows, 4)]
    return "".join(parts)


def render_html(result: DiffResult, verdicts: Sequence[str]) -> str:
    """The page, as text; ``verdicts`` the three verdicts' lines, the one that gates first
    (the markdown's first line)."""
    v = result.verdict
    headline, *others = verdicts
    rest = "".join(f'<p class="other-verdict">{escape(line)}</p>' for line in others)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kinetrace diff: {escape(result.gating.verdict)}</title>"
        f"<style>{PAGE_STYLE}{_EXTRA_STYLE}</style></head><body>"
        f'<h1>kinetrace diff</h1><p class="verdict">{escape(headline)}</p>{rest}'
        "<h2>From BASE's median step to NEW's: the largest changes per step</h2>"
        f"{_waterfall_svg(result)}"
        "<h2>Step times of the job (each step its slowest rank), one dot a step</h2>"
        f"<figure>{_strip_svg(v)}<figcaption>{escape(_strip_caption(v))}</figcaption></figure>"
        f"{_tables(result)}</body></html>\n"
    )


def write_html(result: DiffResult, path: str | os.PathLike[str], verdicts: Sequence[str]) -> None:
    """Writes the page at ``path`` as ``summary --html`` writes its page (an existing file
    replaced only by a complete page)."""
    write_atomically(path, lambda: render_html(result, verdicts))
