"""The ``kinetrace summary --html`` page: one self-contained file (no script, no network),
its charts SVG drawn here: the temporal breakdown per rank as stacked bars, the top GPU
activities, and step time per rank as a heat map."""

from __future__ import annotations

import os
from collections.abc import Callable
from html import escape

from kinetrace import _kinetrace
from kinetrace._text import duration
from kinetrace._tools.summary import RankSummary, Summary, top_kernels

__all__ = ["PAGE_STYLE", "SVG_NS", "render_html", "svg_label", "write_atomically", "write_html"]

#: Colours of compute, non-compute and idle time.
COLOURS = ("#3b7dd8", "#e8a33d", "#c9ccd1")
LEGEND = ("compute", "non-compute", "idle")
TOP = 15
SVG_NS = "http://www.w3.org/2000/svg"
WIDTH = 900
LABEL_W = 120

#: The pages' common style (summary, diff and ops pages).
PAGE_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
svg text { font: 11px system-ui, sans-serif; fill: #222; }
svg text.label { font: 11px monospace; }
table { border-collapse: collapse; } td, th { padding: 2px 8px; text-align: right; }
th { border-bottom: 1px solid #999; } td.l, th.l { text-align: left; }
"""


def _temporal_svg(ranks: tuple[RankSummary, ...]) -> str:
    bar, gap = (14, 4) if len(ranks) <= 64 else (6, 1)
    plot_w = WIDTH - LABEL_W - 20
    height = len(ranks) * (bar + gap) + 30
    parts = [f'<svg xmlns="{SVG_NS}" width="{WIDTH}" height="{height}">']
    for i, r in enumerate(ranks):
        t = r.temporal_breakdown
        y = i * (bar + gap)
        parts.append(
            f'<text x="{LABEL_W - 6}" y="{y + bar - 3}" text-anchor="end">rank {r.rank}</text>'
        )
        x = float(LABEL_W)
        values = (t.compute_time_us, t.non_compute_time_us, t.idle_time_us)
        for name, colour, us in zip(LEGEND, COLOURS, values, strict=True):
            w = plot_w * us / t.kernel_time_us if t.kernel_time_us > 0 else 0.0
            tip = escape(f"rank {r.rank} {name}: {duration(us)}")
            parts.append(
                f'<rect x="{x:.2f}" y="{y}" width="{max(w, 0):.2f}" height="{bar}" '
                f'fill="{colour}"><title>{tip}</title></rect>'
            )
            x += max(w, 0)
    y = len(ranks) * (bar + gap) + 14
    for k, (name, colour) in enumerate(zip(LEGEND, COLOURS, strict=True)):
        x = LABEL_W + k * 120
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 16}" y="{y}">{name}</text>')
    parts.append("</svg>")
    return "".join(parts)


#: The width of one character of an 11 px monospace label (0.6 em in the monospace fonts
#: browsers use): a label's width is known before the browser draws it.
CHAR_W = 6.6


def svg_label(text: str, x: float, y: float, room: float) -> str:
    """A right-aligned label ending at ``x`` that fits in ``room`` pixels to its left: cut
    with an ellipsis inside the chart where it is longer, the whole text in its tooltip."""
    fits = max(int(room // CHAR_W), 2)
    shown = text if len(text) <= fits else text[: fits - 1] + "\u2026"
    return (
        f'<text class="label" x="{x}" y="{y}" text-anchor="end">'
        f"<title>{escape(text)}</title>{escape(shown)}</text>"
    )


def _kernels_svg(summary: Summary) -> str:
    kernels = top_kernels(summary.ranks, TOP)
    if not kernels:
        return "<p>No GPU activities.</p>"
    most = kernels[0].sum_us or 1.0
    bar, gap, label_w = 16, 4, 420
    plot_w = WIDTH - label_w - 100
    parts = [f'<svg xmlns="{SVG_NS}" width="{WIDTH}" height="{len(kernels) * (bar + gap)}">']
    for i, k in enumerate(kernels):
        y = i * (bar + gap)
        w = max(plot_w * k.sum_us / most, 0.0)
        parts.append(svg_label(k.name, label_w - 6, y + bar - 4, label_w - 10))
        tip = escape(f"{k.name}\n{k.type}, {k.count:,} x, total {duration(k.sum_us)}")
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{w:.2f}" height="{bar}" fill="{COLOURS[0]}">'
            f"<title>{tip}</title></rect>"
        )
        parts.append(
            f'<text x="{label_w + w + 4:.2f}" y="{y + bar - 4}">{escape(duration(k.sum_us))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _heat_colour(frac: float) -> str:
    """White (the fastest rank of a step) to red (the slowest)."""
    g = round(255 - 200 * frac)
    return f"rgb(255,{g},{g})"


def _steps_svg(summary: Summary) -> str:
    names = [s.name for s in summary.steps]
    if not names:
        return "<p>No ProfilerStep in these traces.</p>"
    cell_w = max(8, min(60, (WIDTH - LABEL_W) // len(names)))
    cell_h = 14 if len(summary.ranks) <= 64 else 5
    spread = {s.name: s for s in summary.steps}
    width = LABEL_W + cell_w * len(names) + 10
    height = cell_h * len(summary.ranks) + 20
    parts = [f'<svg xmlns="{SVG_NS}" width="{width}" height="{height}">']
    for j, name in enumerate(names):
        short = name.removeprefix("ProfilerStep")
        parts.append(f'<text x="{LABEL_W + j * cell_w + 2}" y="12">{escape(short)}</text>')
    for i, r in enumerate(summary.ranks):
        y = 16 + i * cell_h
        parts.append(
            f'<text x="{LABEL_W - 6}" y="{y + cell_h - 3}" text-anchor="end">rank {r.rank}</text>'
        )
        durs: dict[str, float] = {}
        for step in r.steps:
            durs.setdefault(step.name, step.dur_us)
        for j, name in enumerate(names):
            if name not in durs:
                continue
            s = spread[name]
            span = s.slowest_us - s.fastest_us
            frac = (durs[name] - s.fastest_us) / span if span > 0 else 0.0
            tip = escape(f"rank {r.rank} {name}: {duration(durs[name])}")
            parts.append(
                f'<rect x="{LABEL_W + j * cell_w}" y="{y}" width="{cell_w - 1}" '
                f'height="{cell_h - 1}" '
                f'fill="{_heat_colour(frac)}"><title>{tip}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts)


def render_html(summary: Summary) -> str:
    """The page, as text."""
    n = len(summary.ranks)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kinetrace summary: {n} rank{'s' if n != 1 else ''}</title>"
        f"<style>{PAGE_STYLE}</style></head><body>"
        f"<h1>kinetrace summary ({escape(summary.rules)} rules): "
        f"{n} rank{'s' if n != 1 else ''}</h1>"
        "<h2>Temporal breakdown per rank (share of the GPU span)</h2>"
        f"{_temporal_svg(summary.ranks)}"
        f"<h2>Top {TOP} GPU activities (all ranks, total time)</h2>{_kernels_svg(summary)}"
        "<h2>Step time per rank (white: fastest rank of the step, red: slowest)</h2>"
        f"{_steps_svg(summary)}</body></html>\n"
    )


def write_html(summary: Summary, path: str | os.PathLike[str]) -> None:
    """Writes the page at ``path`` (:func:`write_atomically`)."""
    write_atomically(path, lambda: render_html(summary))


def write_atomically(path: str | os.PathLike[str], render: Callable[[], str]) -> None:
    """Writes the text ``render()`` returns at ``path`` through a temporary file beside it,
    named as every temporary is (``docs/security.md``): an existing file is replaced only by
    a complete page, and the temporary of a run killed outright is removed by the next run
    there. ``render`` runs once the temporary exists (``ops --html``'s page uses it too)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.fsdecode(_kinetrace.create_temporary(directory, os.path.basename(path)))
    try:
        # The file create_temporary made, never a link put in its place since.
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, "w", encoding="utf-8") as f:
            f.write(render())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
