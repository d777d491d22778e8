"""``kinetrace ops --html`` / ``kinetrace.write_ops_html``: the page of a real H100 trace
(TraceLens's OWLv2) and of a CPU profile made here (no GPU: no roofs) parsed as HTML; the
roofline chart's points counted against the report's groups, the roofs and a point placed
where the GPU's peaks and the group's rates put them on the drawn log axes; names with
``<`` and ``&`` escaped; both pages in headless Chromium; the command line's atomic write,
and existing destinations treated as ``summary --html`` treats them."""

from __future__ import annotations

import copy
import dataclasses
import errno
import itertools
import json
import math
import os
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch

import kinetrace
from kinetrace._cli.ops import COLUMNS, RATES
from kinetrace._text import duration
from kinetrace._tools import ops_html
from kinetrace._tools.ops import OpGroup, OpsReport
from support import chromium
from support.cli import run
from support.real import real_path
from test_ops import OWLV2_H100, ROOF_TRACE

#: A name an operator (or a kernel) may well have, with every character HTML gives a meaning.
WEIRD = 'my::op<float, 2>&"co" <b>'

#: Elements without an end tag: HTML's void ones, and the SVG shapes the page closes with
#: ``/>`` (html.parser reports those as start-end tags).
VOID = {"meta", "br", "img", "hr", "link", "input"}


@dataclasses.dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = dataclasses.field(default_factory=list)


class Page(HTMLParser):
    """A page parsed by html.parser, every element kept with its text (its descendants'
    too); tags must nest properly, each closed by its own end tag."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.stack: list[Element] = []
        self.doctype = ""
        self.feed(text)
        self.close()
        assert self.stack == [], [e.tag for e in self.stack]

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def _element(self, tag: str, attrs: list[tuple[str, str | None]]) -> Element:
        element = Element(tag, {k: v or "" for k, v in attrs})
        if self.stack:
            self.stack[-1].children.append(element)
        self.elements.append(element)
        return element

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = self._element(tag, attrs)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._element(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1].tag == tag, (tag, [e.tag for e in self.stack])
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for element in self.stack:
            element.text += data

    def find(self, tag: str, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.elements
            if e.tag == tag and (cls is None or cls in e.attrs.get("class", "").split())
        ]


def _with_roof(groups: list[OpGroup]) -> list[OpGroup]:
    """The groups the chart must place, from the report's own figures: a roofline (a peak,
    FLOPs, GPU time) and FLOPs and bytes above zero (log axes)."""
    return [g for g in groups if g.roof_pct is not None and g.flops and g.bytes and g.time_us]


def _scale(page: Page, axis: str) -> tuple[float, float, float, float]:
    """(exponent, pixel) of the lowest and highest decade line of ``axis``."""
    lines = page.find("line", "grid")
    ticks = sorted(
        (int(e.attrs["data-exp"]), float(e.attrs[f"{axis}1"]))
        for e in lines
        if axis in e.attrs["class"].split()
    )
    assert len(ticks) >= 3
    # Decades are evenly spaced: a log axis, not a linear one.
    steps = {round(b[1] - a[1], 1) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1, steps
    return (*ticks[0], *ticks[-1])


def _to_px(scale: tuple[float, float, float, float], value: float) -> float:
    e0, p0, e1, p1 = scale
    return p0 + (math.log10(value) - e0) / (e1 - e0) * (p1 - p0)


def _to_value(scale: tuple[float, float, float, float], px: float) -> float:
    e0, p0, e1, p1 = scale
    return float(10 ** (e0 + (px - p0) / (p1 - p0) * (e1 - e0)))


def _self_contained(text: str) -> None:
    assert "<script" not in text and "src=" not in text and "href=" not in text
    assert "url(" not in text and "@import" not in text
    assert "http" not in text.replace("http://www.w3.org/2000/svg", "")


@pytest.fixture(scope="module")
def owlv2() -> OpsReport:
    return kinetrace.ops(real_path(str(OWLV2_H100)))


def test_real_trace_one_point_per_group_with_a_roofline(owlv2: OpsReport) -> None:
    text = ops_html.render_html(owlv2)
    page = Page(text)
    _self_contained(text)
    assert page.doctype == "DOCTYPE html"
    title = next(e for e in page.find("head")[0].children if e.tag == "title")
    assert title.text == f"kinetrace ops: {OWLV2_H100.name}"
    (h1,) = page.find("h1")
    assert OWLV2_H100.name in h1.text and "exact rules" in h1.text
    assert "GPU: NVIDIA H100 SXM5 80GB (h100-sxm" in page.find("body")[0].text
    (svg,) = page.find("svg")
    assert svg.attrs["xmlns"] == "http://www.w3.org/2000/svg"
    groups = _with_roof(owlv2.groups)
    points = page.find("circle", "point")
    # The trace has groups with GPU time and no roofline (unmodelled, integer copies).
    assert 0 < len(points) == len(groups) < len(owlv2.groups)
    assert sorted(p.attrs["data-table"] for p in points) == sorted(g.table for g in groups)
    # Area in proportion to GPU time.
    most = max(g.time_us for g in groups)
    r_most = max(float(p.attrs["r"]) for p in points)
    areas = sorted((float(p.attrs["r"]) / r_most) ** 2 for p in points)
    assert areas == pytest.approx(sorted(g.time_us / most for g in groups), abs=1e-4)
    # One colour per family.
    colours = {p.attrs["data-table"]: p.attrs["fill"] for p in points}
    assert len(set(colours.values())) == len(colours) >= 3
    # Every group not on the chart is listed under it.
    assert len(page.find("li")) == len(owlv2.groups) - len(groups)
    # The table: every group, ranked as the report ranks them, the terminal's columns.
    headers = [th.text for th in page.find("th")]
    assert headers == ["operator", *(h for h, _ in COLUMNS + RATES)]
    assert {len(tr.children) for tr in page.find("tr")} == {len(headers)}
    names = [td.text for td in page.find("td", "name")]
    assert names == [g.name + (" (bwd)" if g.bwd else "") for g in owlv2.groups]


def test_real_trace_roofs_and_points_where_the_peaks_put_them(owlv2: OpsReport) -> None:
    page = Page(ops_html.render_html(owlv2))
    assert owlv2.gpu is not None
    peaks, bandwidth = owlv2.gpu["peaks_tflops"], owlv2.gpu["bandwidth_tbs"]
    assert (peaks["bf16"], peaks["fp32"], bandwidth) == (989.5, 67.0, 3.35)
    xs, ys = _scale(page, "x"), _scale(page, "y")
    flat = {e.attrs["data-precision"]: e for e in page.find("line", "compute")}
    # A flat roof per precision the groups run at: bf16 GEMMs, fp32 elementwise.
    assert set(flat) == {g.precision for g in owlv2.groups if g.precision} == {"bf16", "fp32"}
    for precision, line in flat.items():
        peak = peaks[precision]
        # Drawn at the peak's height on the decade lines' scale, from its ridge point on.
        assert float(line.attrs["y1"]) == float(line.attrs["y2"])
        assert float(line.attrs["y1"]) == pytest.approx(_to_px(ys, peak), abs=0.02)
        assert _to_value(xs, float(line.attrs["x1"])) == pytest.approx(peak / bandwidth, rel=1e-3)
    (slope,) = page.find("line", "memory")
    for end in "12":
        x = _to_value(xs, float(slope.attrs[f"x{end}"]))
        y = _to_value(ys, float(slope.attrs[f"y{end}"]))
        assert y / x == pytest.approx(bandwidth, rel=1e-3)  # TFLOPS/s = TB/s x FLOPs/byte
    # The slope meets the highest roof at its ridge.
    assert _to_value(ys, float(slope.attrs["y2"])) == pytest.approx(989.5, rel=1e-3)
    # The group with the most GPU time: its point at its intensity and achieved rate.
    big = max(_with_roof(owlv2.groups), key=lambda g: g.time_us)
    point = max(page.find("circle", "point"), key=lambda p: float(p.attrs["r"]))
    assert big.flops_per_byte and big.tflops_s and big.roof_pct
    assert _to_value(xs, float(point.attrs["cx"])) == pytest.approx(big.flops_per_byte, rel=1e-3)
    assert _to_value(ys, float(point.attrs["cy"])) == pytest.approx(big.tflops_s, rel=1e-3)
    tip = point.children[0].text.splitlines()
    assert tip[0] == big.name and tip[1] == f"dims {ops_html.shapes_text(big.input_dims)}"
    assert tip[2] == f"types {big.input_type}"
    assert f"GPU time {duration(big.time_us)}" in tip[3]
    # The attention's softmax, memory-bound, against the vector units' fp32 peak.
    assert big.name == "aten::_softmax" and big.precision == "fp32"
    assert tip[5].startswith(f"{big.roof_pct:.1f}% of roof (fp32 {big.peak_tflops:g} TFLOPS")


def _weird_trace(tmp_path: Path) -> Path:
    """ROOF_TRACE (an addmm and two muls on an H100) and an operator no model covers, named
    :data:`WEIRD`, that launched a kernel itself."""
    trace = copy.deepcopy(ROOF_TRACE)
    trace["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": WEIRD, "pid": 1, "tid": 1, "ts": 60, "dur": 10},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 61,
            "dur": 1,
            "args": {"correlation": 9},
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 1, "tid": 1, "ts": 61},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 900},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k<&>",
            "pid": 0,
            "tid": 7,
            "ts": 900,
            "dur": 5,
            "args": {"correlation": 9, "device": 0},
        },
    ]
    path = tmp_path / "weird.json"
    path.write_text(json.dumps(trace))
    return path


def test_names_are_escaped(tmp_path: Path) -> None:
    found = kinetrace.ops(_weird_trace(tmp_path))
    assert [g.name for g in found.groups] == ["aten::mul", "aten::addmm", WEIRD]
    # The plotted groups too: the first one renamed, as a model-covered operator could be.
    renamed = dataclasses.replace(found.groups[0], name=WEIRD)
    found = dataclasses.replace(found, groups=[renamed, *found.groups[1:]])
    text = ops_html.render_html(found)
    assert WEIRD not in text and "<b>" not in text
    page = Page(text)
    assert [td.text for td in page.find("td", "name")] == [WEIRD, "aten::addmm", WEIRD]
    (listed,) = page.find("li")
    assert listed.text.startswith(WEIRD + " ") and "(not modelled)" in listed.text
    tips = [p.children[0].text.splitlines()[0] for p in page.find("circle", "point")]
    assert sorted(tips) == sorted([WEIRD, "aten::addmm"])
    assert not page.find("b")


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile of matrix products and adds on the CPU, shapes recorded: operator rows
    without GPU time and without deviceProperties."""
    path = tmp_path_factory.mktemp("cpu") / "cpu.json"
    x = torch.rand(64, 64)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with kinetrace.profile(activities=cpu, record_shapes=True) as prof:
        for _ in range(3):
            torch.mm(x, x)
            torch.add(x, x)
    prof.export_chrome_trace(str(path))
    return path


def test_cpu_profile_page_says_why_there_are_no_roofs(cpu_trace: Path) -> None:
    found = kinetrace.ops(cpu_trace)
    assert found.gpu is None and found.note and "no deviceProperties" in found.note
    assert {g.name for g in found.groups} >= {"aten::mm", "aten::add"}
    text = ops_html.render_html(found)
    _self_contained(text)
    page = Page(text)
    assert f"No roofs: {found.note}" in page.find("body")[0].text
    assert page.find("circle") == [] and page.find("line") == []
    assert len(page.find("li")) == len(found.groups)
    assert all(li.text.endswith("(no GPU)") for li in page.find("li"))
    assert len(page.find("td", "name")) == len(found.groups)


_PROBE = """{
  svgs: document.querySelectorAll('svg').length,
  bad: Array.from(document.querySelectorAll('svg')).filter(function (s) {
    return s.namespaceURI !== 'http://www.w3.org/2000/svg'; }).length,
  points: document.querySelectorAll('svg circle.point').length,
  roofs: document.querySelectorAll('svg line.roof').length,
  // Every label drawn whole inside the chart: the boxes the browser measured.
  clipped: Array.from(document.querySelectorAll('svg text')).filter(function (t) {
    const box = t.getBBox(), svg = t.ownerSVGElement, m = t.getCTM();
    const x = box.x * m.a + box.y * m.c + m.e, y = box.x * m.b + box.y * m.d + m.f;
    const w = Math.abs(box.width * m.a) + Math.abs(box.height * m.c);
    const h = Math.abs(box.width * m.b) + Math.abs(box.height * m.d);
    return x < 0 || y < 0 || x + w > svg.width.baseVal.value ||
      y + h > svg.height.baseVal.value;
  }).map(function (t) { return t.textContent; }),
  rows: document.querySelectorAll('table tr').length}"""


def test_pages_load_in_chromium(owlv2: OpsReport, cpu_trace: Path, tmp_path: Path) -> None:
    browser = chromium.require_browser()
    real = chromium.load(browser, ops_html.render_html(owlv2), tmp_path, _PROBE)
    assert real["errors"] == [] and real["resources"] == [] and real["bad"] == 0
    assert real["svgs"] == 1 and real["points"] == len(_with_roof(owlv2.groups))
    assert real["roofs"] == 3  # the memory slope, bf16 and fp32
    assert real["clipped"] == [], real["clipped"]
    assert real["rows"] == len(owlv2.groups) + 1
    cpu = kinetrace.ops(cpu_trace)
    plain = chromium.load(browser, ops_html.render_html(cpu), tmp_path, _PROBE)
    assert plain["errors"] == [] and plain["resources"] == []
    assert (plain["svgs"], plain["points"], plain["rows"]) == (0, 0, len(cpu.groups) + 1)


def test_cli_writes_the_page_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page goes to a temporary beside it, renamed over the old page once whole; the
    terminal report is printed as without ``--html``."""
    trace = _weird_trace(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    page = out / "page.html"
    page.write_text("old")
    seen: dict[str, Any] = {}
    render = ops_html.render_html

    def watched(found: OpsReport) -> str:
        seen["page"] = page.read_text()
        seen["files"] = sorted(os.listdir(out))
        return render(found)

    monkeypatch.setattr(ops_html, "render_html", watched)
    assert run("ops", trace, "--html", page) == 0
    assert "operator rows in" in capsys.readouterr().out
    (tmp,) = [n for n in seen["files"] if n != "page.html"]
    assert seen["page"] == "old" and tmp.startswith(".page.html.") and tmp.endswith("-tmp")
    assert os.listdir(out) == ["page.html"]
    assert page.read_text() == render(kinetrace.ops(trace))
    # --json and --html together: the JSON printed, the page written.
    monkeypatch.setattr(ops_html, "render_html", render)
    page.unlink()
    assert run("ops", trace, "--json", "--html", page) == 0
    assert json.loads(capsys.readouterr().out)["rules"] == "exact"
    assert page.read_text() == render(kinetrace.ops(trace))


def test_a_failed_write_leaves_the_old_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _weird_trace(tmp_path)
    page = tmp_path / "out" / "page.html"
    page.parent.mkdir()
    page.write_text("old")

    def full(found: OpsReport) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ops_html, "render_html", full)
    assert run("ops", trace, "--html", page) == 1
    assert "kinetrace ops: error: " in capsys.readouterr().err
    assert os.listdir(page.parent) == ["page.html"] and page.read_text() == "old"
    # The API writes the same way.
    with pytest.raises(OSError, match="No space"):
        kinetrace.write_ops_html(kinetrace.ops(trace), page)
    assert os.listdir(page.parent) == ["page.html"] and page.read_text() == "old"


def _file(path: Path) -> None:
    path.write_text("old")


def _directory(path: Path) -> None:
    path.mkdir()


def _under_a_file(path: Path) -> None:
    path.parent.rmdir()
    path.parent.write_text("a file")


@pytest.mark.parametrize("make", [_file, _directory, _under_a_file], ids=lambda f: f.__name__)
def test_existing_destinations_as_summary_html_treats_them(
    make: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ops --html`` and ``summary --html`` end alike on the same destination: a file
    replaced by the page (no ``--force`` needed), a directory or a path under a file
    refused with exit status 1 and left as it was."""
    trace = _weird_trace(tmp_path)
    outcomes = []
    for tool in ("summary", "ops"):
        dest = tmp_path / tool / "page.html"
        dest.parent.mkdir()
        make(dest)
        status = run(tool, trace, "--html", dest)
        err = capsys.readouterr().err
        state = (
            "page"
            if dest.is_file() and dest.read_text().startswith("<!DOCTYPE html>")
            else "dir"
            if dest.is_dir()
            else "absent"
            if not dest.exists()
            else dest.read_text()
        )
        outcomes.append((status, state, f"kinetrace {tool}: error: " in err))
    assert outcomes[0] == outcomes[1]
    assert (
        outcomes[1]
        == {
            _file: (0, "page", False),
            _directory: (1, "dir", True),
            _under_a_file: (1, "absent", True),
        }[make]
    )
