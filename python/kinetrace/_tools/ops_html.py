"""The ``kinetrace ops --html`` page: one self-contained file (no script, no network): a
log-log roofline chart drawn here as SVG (the GPU's memory slope and one flat roof per
precision among the groups; one point per group with a roofline, its area proportional to
the group's GPU time, coloured by family), the groups it cannot place, then the table of
groups ranked by the time they could save, as the terminal shows it. Written through
:func:`kinetrace._tools.summary_html.write_atomically`, as ``summary --html``'s page."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from html import escape

from kinetrace._text import duration
from kinetrace._tools.ops import OpGroup, OpsReport
from kinetrace._tools.summary_html import PAGE_STYLE, SVG_NS, write_atomically

__all__ = [
    "Axes",
    "coverage_line",
    "gpu_line",
    "plotted",
    "render_html",
    "roofs",
    "shapes_text",
    "unplotted_reason",
    "write_ops_html",
]

#: The chart: its size and the plot area's margins, pixels.
WIDTH, HEIGHT = 900, 520
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50
#: The radius of the point of the group with the most GPU time; the others' areas in
#: proportion to their time (no floor: a 1 px outline keeps the smallest visible).
R_MAX = 18.0

#: One colour per family (``OpRow.table``), the table's order.
FAMILY_COLOURS = {
    "GEMM": "#3b7dd8",
    "CONV": "#1f4e99",
    "SDPA": "#8e44ad",
    "InferenceAttention": "#c06fd6",
    "UnaryElementwise": "#e8a33d",
    "BinaryElementwise": "#d9622b",
    "Normalization": "#2e9e6a",
    "RMSNorm": "#7cc49b",
    "Reduce": "#b5443b",
    "RoPE": "#8c6d31",
    "Softmax": "#c2185b",
    "Indexing": "#5d6d7e",
}
OTHER_COLOUR = "#777777"

#: What the ops page adds to the pages' common style.
_EXTRA_STYLE = """
svg .grid { stroke: #e3e5e8; } svg .axis { stroke: #555; }
svg .roof { stroke: #222; stroke-width: 2; } svg .point { stroke: #222; fill-opacity: 0.75; }
.legend span { display: inline-block; width: 11px; height: 11px; margin: 0 4px 0 14px; }
td.name { font-family: monospace; text-align: left; word-break: break-all; }
"""


def shapes_text(text: str | None) -> str:
    """The non-empty input shapes of an ``input_dims`` text: ``(16,64)(64,32)``."""
    if text is None:
        return "-"
    try:
        shapes = [s for s in json.loads(text) if s != []]
    except ValueError:
        return text
    return "".join(
        f"({','.join(str(d) for d in s)})" if isinstance(s, list) else "" for s in shapes
    )


def coverage_line(found: OpsReport) -> str | None:
    """``modelled: 53.2% of the GPU time of operators with shapes (...)``, what it leaves
    out in brackets; None without a split (``tracelens`` rules)."""
    c = found.coverage
    if c is None:
        return None
    share = c["modelled_share"]
    head = "modelled: none of" if share is None else f"modelled: {share:.1%} of"
    with_shapes = c["modelled_us"] + c["unmodelled_us"]
    return (
        f"{head} the GPU time of operators with shapes ({duration(with_shapes)}); "
        f"left out: {duration(c['without_shapes_us'])} without shapes, "
        f"{duration(c['collectives_us'])} collectives"
    )


def gpu_line(found: OpsReport) -> str:
    """``GPU: LABEL (KEY, from WHERE)``, or ``GPU: none``."""
    if found.gpu is None:
        return "GPU: none"
    where = "--gpu" if found.gpu_from == "--gpu" else f"deviceProperties {found.device_name!r}"
    return f"GPU: {found.gpu['label']} ({found.gpu['key']}, from {where})"


def plotted(g: OpGroup) -> bool:
    """Whether the chart has a point for ``g``: it has a roofline (a peak, FLOPs and GPU
    time) and both coordinates are positive (log axes)."""
    return g.roof_pct is not None and (g.flops_per_byte or 0) > 0 and (g.tflops_s or 0) > 0


def unplotted_reason(g: OpGroup, found: OpsReport) -> str:
    """Why the chart has no point for ``g``."""
    if found.gpu is None:
        return "no GPU"
    if g.flops is None:
        return "not modelled" if g.table == "unmodelled" else "no FLOPs model"
    if g.peak_tflops is None:
        return "no peak for its precision"
    if g.time_us <= 0:
        return "no GPU time"
    if not g.bytes:
        return "no bytes (intensity undefined)"
    return "no FLOPs (not on a log axis)"


def roofs(found: OpsReport) -> list[tuple[str, float]]:
    """(precision, peak TFLOPS) of each precision the groups are measured at, highest
    first."""
    seen = {g.precision: g.peak_tflops for g in found.groups if g.precision and g.peak_tflops}
    return sorted(seen.items(), key=lambda item: (-item[1], item[0]))


def _decades(values: list[float], default: tuple[int, int]) -> tuple[int, int]:
    """The powers of ten around ``values`` (at least two decades)."""
    if not values:
        return default
    low = math.floor(math.log10(min(values)))
    high = math.ceil(math.log10(max(values)))
    return (low - 1, high + 1) if high - low < 2 else (low, high)


@dataclass(frozen=True)
class Axes:
    """The chart's log-log axes: x from 10^``x0`` to 10^``x1`` FLOPs/byte, y from 10^``y0``
    to 10^``y1`` TFLOPS/s, over the plot area of :data:`WIDTH` x :data:`HEIGHT`."""

    x0: int
    x1: int
    y0: int
    y1: int

    def x(self, value: float) -> float:
        return LEFT + (math.log10(value) - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        plot_h = HEIGHT - TOP - BOTTOM
        return TOP + plot_h - (math.log10(value) - self.y0) / (self.y1 - self.y0) * plot_h


def _axes(points: list[OpGroup], peaks: list[tuple[str, float]], bandwidth: float) -> Axes:
    ridges = [peak / bandwidth for _, peak in peaks]
    xs = [g.flops_per_byte or 0.0 for g in points] + ridges
    ys = [g.tflops_s or 0.0 for g in points] + [peak for _, peak in peaks]
    return Axes(*_decades(xs, (-1, 3)), *_decades(ys, (-2, 3)))


def _tick_label(exp: int) -> str:
    return format(10.0**exp, "g") if -3 <= exp <= 4 else f"1e{exp}"


def _grid(ax: Axes) -> list[str]:
    """The decade lines, their labels and the axis titles."""
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    parts = []
    for exp in range(ax.x0, ax.x1 + 1):
        x = ax.x(10.0**exp)
        parts.append(f'<line class="grid x" data-exp="{exp}" x1="{x:.2f}" y1="{TOP}" ')
        parts.append(f'x2="{x:.2f}" y2="{bottom}"/>')
        parts.append(f'<text x="{x:.2f}" y="{bottom + 14}" text-anchor="middle">')
        parts.append(f"{_tick_label(exp)}</text>")
    for exp in range(ax.y0, ax.y1 + 1):
        y = ax.y(10.0**exp)
        parts.append(f'<line class="grid y" data-exp="{exp}" x1="{LEFT}" y1="{y:.2f}" ')
        parts.append(f'x2="{right}" y2="{y:.2f}"/>')
        parts.append(f'<text x="{LEFT - 5}" y="{y + 4:.2f}" text-anchor="end">')
        parts.append(f"{_tick_label(exp)}</text>")
    parts.append(f'<path class="axis" fill="none" d="M{LEFT},{TOP}V{bottom}H{right}"/>')
    middle = (LEFT + right) / 2
    parts.append(f'<text x="{middle}" y="{HEIGHT - 8}" text-anchor="middle">')
    parts.append("arithmetic intensity (FLOPs/byte)</text>")
    parts.append(f'<text transform="translate(14,{(TOP + bottom) / 2}) rotate(-90)" ')
    parts.append('text-anchor="middle">achieved TFLOPS/s</text>')
    return parts


def _roof_lines(ax: Axes, peaks: list[tuple[str, float]], bandwidth: float) -> list[str]:
    """The memory slope (y = bandwidth x intensity, up to the highest roof's ridge) and a
    flat roof per precision from its ridge point on, each labelled."""
    x_min, x_max, y_min = 10.0**ax.x0, 10.0**ax.x1, 10.0**ax.y0
    start = max(x_min, y_min / bandwidth)
    top = peaks[0][1]
    ridge = min(top / bandwidth, x_max)
    parts = []
    if ridge > start:
        parts.append(
            f'<line class="roof memory" data-tbs="{bandwidth}" x1="{ax.x(start):.2f}" '
            f'y1="{ax.y(start * bandwidth):.2f}" x2="{ax.x(ridge):.2f}" '
            f'y2="{ax.y(ridge * bandwidth):.2f}"/>'
        )
        # On a log-log chart the slope is one decade up per decade right: its screen angle.
        angle = math.degrees(math.atan2(ax.y(1.0) - ax.y(10.0), ax.x(10.0) - ax.x(1.0)))
        lx, ly = ax.x(start) + 8, ax.y(start * bandwidth) - 8
        parts.append(
            f'<text class="roof-label" transform="translate({lx:.2f},{ly:.2f}) '
            f'rotate({-angle:.2f})">{escape(f"{bandwidth:g} TB/s")}</text>'
        )
    for precision, peak in peaks:
        x1 = max(peak / bandwidth, x_min)
        y = ax.y(peak)
        parts.append(
            f'<line class="roof compute" data-precision="{escape(precision)}" '
            f'data-tflops="{peak}" x1="{ax.x(x1):.2f}" y1="{y:.2f}" '
            f'x2="{WIDTH - RIGHT}" y2="{y:.2f}"/>'
        )
        parts.append(
            f'<text class="roof-label" x="{WIDTH - RIGHT - 4}" y="{y - 5:.2f}" '
            f'text-anchor="end">{escape(f"{precision} {peak:g} TFLOPS")}</text>'
        )
    return parts


def _tooltip(g: OpGroup) -> str:
    name = g.name + (" (bwd)" if g.bwd else "")
    save = "-" if g.saveable_us is None else duration(g.saveable_us)
    return "\n".join(
        [
            name,
            f"dims {shapes_text(g.input_dims)}",
            f"types {g.input_type or '-'}",
            f"{g.table}, {g.count:,} x, GPU time {duration(g.time_us)}, saveable {save}",
            f"{g.flops_per_byte or 0:.3g} FLOPs/byte, {g.tflops_s or 0:.3g} TFLOPS/s",
            f"{g.roof_pct or 0:.1f}% of roof ({g.precision} {g.peak_tflops:g} TFLOPS, "
            f"{g.bound}-bound)",
        ]
    )


def _points(ax: Axes, points: list[OpGroup]) -> list[str]:
    """One circle per group, the largest drawn first so none hides a smaller one."""
    most = max((g.time_us for g in points), default=1.0)
    parts = []
    for g in sorted(points, key=lambda g: -g.time_us):
        r = R_MAX * math.sqrt(g.time_us / most)
        colour = FAMILY_COLOURS.get(g.table, OTHER_COLOUR)
        parts.append(
            f'<circle class="point" data-table="{escape(g.table)}" '
            f'cx="{ax.x(g.flops_per_byte or 1.0):.2f}" cy="{ax.y(g.tflops_s or 1.0):.2f}" '
            f'r="{r:.3f}" fill="{colour}"><title>{escape(_tooltip(g))}</title></circle>'
        )
    return parts


def _chart(found: OpsReport) -> str:
    """The SVG roofline chart, or why there is none."""
    points = [g for g in found.groups if plotted(g)]
    peaks = roofs(found) if found.gpu is not None else []
    if found.gpu is None:
        why = found.note or "no GPU was found"
        return f"<p>No roofs: {escape(why)}. No group has a roofline to plot.</p>"
    bandwidth = found.gpu["bandwidth_tbs"]
    ax = _axes(points, peaks, bandwidth)
    parts = [f'<svg xmlns="{SVG_NS}" width="{WIDTH}" height="{HEIGHT}">', *_grid(ax)]
    if peaks:
        parts += _roof_lines(ax, peaks, bandwidth)
    parts += _points(ax, points)
    parts.append("</svg>")
    families = sorted({g.table for g in points}, key=list(FAMILY_COLOURS).index)
    legend = "".join(
        f'<span style="background:{FAMILY_COLOURS[t]}"></span>{escape(t)}' for t in families
    )
    note = "" if peaks else "<p>No group has a peak for its precision: no flat roof.</p>"
    return "".join(parts) + f'<p class="legend">{legend}</p>{note}'


def _unplotted(found: OpsReport) -> str:
    left = sorted((g for g in found.groups if not plotted(g)), key=lambda g: -g.time_us)
    if not left:
        return ""
    items = "".join(
        f'<li><span class="name">{escape(g.name + (" (bwd)" if g.bwd else ""))}</span> '
        f"{escape(shapes_text(g.input_dims))}: {escape(duration(g.time_us))} "
        f"({escape(unplotted_reason(g, found))})</li>"
        for g in left
    )
    return f"<h2>Groups not on the chart ({len(left):,})</h2><ul>{items}</ul>"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _table(found: OpsReport) -> str:
    """The groups ranked by saveable time, the terminal's columns."""
    head = (
        '<tr><th class="l">operator</th><th class="l">dims</th><th>count</th><th>time</th>'
        '<th>save</th><th>TFLOP/s</th><th>TB/s</th><th>roof</th><th class="l">bound</th></tr>'
    )
    rows = []
    for g in found.groups:
        pct = "-" if g.roof_pct is None else f"{g.roof_pct:.0f}%"
        cells = (
            f'<td class="name">{escape(g.name + (" (bwd)" if g.bwd else ""))}</td>'
            f'<td class="l" title="{escape(g.input_type or "-")}">'
            f"{escape(shapes_text(g.input_dims))}</td>"
            f"<td>{g.count:,}</td><td>{escape(duration(g.time_us))}</td>"
            f"<td>{'-' if g.saveable_us is None else escape(duration(g.saveable_us))}</td>"
            f"<td>{_num(g.tflops_s, '.1f')}</td><td>{_num(g.tbs, '.2f')}</td>"
            f'<td>{pct}</td><td class="l">{escape(g.bound or "-")}</td>'
        )
        rows.append(f"<tr>{cells}</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(found: OpsReport) -> str:
    """The page, as text."""
    trace = found.label
    time_us = sum(g.time_us for g in found.groups)
    save = sum(g.saveable_us or 0.0 for g in found.groups)
    note = f"<p>note: {escape(found.note)}</p>" if found.note else ""
    line = coverage_line(found)
    coverage = "" if line is None else f"<p>{escape(line)}</p>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kinetrace ops: {escape(trace)}</title>"
        f"<style>{PAGE_STYLE}{_EXTRA_STYLE}</style></head><body>"
        f"<h1>kinetrace ops: {escape(trace)} ({escape(found.rules)} rules)</h1>"
        f"<p>{escape(gpu_line(found))}</p>{note}{coverage}"
        f"<p>{len(found.rows):,} operator rows in {len(found.groups):,} groups; GPU time "
        f"{escape(duration(time_us))}"
        + ("" if found.gpu is None else f", {escape(duration(save))} saveable at the roofline")
        + "</p><h2>Roofline (log-log; a point per group, its area its GPU time)</h2>"
        f"{_chart(found)}{_unplotted(found)}"
        "<h2>Groups by GPU time saveable at the roofline</h2>"
        f"{_table(found)}</body></html>\n"
    )


def write_ops_html(found: OpsReport, path: str | os.PathLike[str]) -> None:
    """Writes ``kinetrace ops --html``'s page of ``found`` at ``path``, atomically: an
    existing file is replaced only by a complete page (as ``summary --html``'s)."""
    write_atomically(path, lambda: render_html(found))
