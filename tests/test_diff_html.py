"""``kinetrace diff --html`` (docs/diff.md): the page of real CPU profiles made here and of
constructed GPU traces, read back with ``html.parser`` (the verdict first, one waterfall bar
per contributor between the two ends, one dot per step sample, names escaped), loaded in
headless Chromium, and written as ``summary --html`` writes (a temporary renamed over the
destination) with the exit status the command has without it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace._cli import status
from kinetrace._cli.diff import verdict_texts
from kinetrace._text import duration
from kinetrace._tools import diff_html
from kinetrace._tools.diff_ops import OperatorChange
from support import chromium
from support.aftermath import temp_files
from support.cli import run
from support.profiles import sides_in_turns

#: Profiles per side and recorded steps in each: 18 samples a side, enough for a verdict.
RUNS = 3
STEPS = 6
#: NEW adds one product of 2x the size (8x one product's FLOPs) to ten: ~+80% a step, a
#: regression far above any noise of this machine.
MMS, SIZE, EXTRA = 10, 160, 320


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""


class Page(HTMLParser):
    """Every element with its attributes and the text directly inside it (unescaped)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1].text += data

    def find(self, tag: str, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.elements
            if e.tag == tag and (cls is None or e.attrs.get("class") == cls)
        ]

    def titles(self, tag: str, cls: str) -> list[str]:
        """The tooltip of each ``tag.cls``: the ``title`` element right after it."""
        out = []
        for i, e in enumerate(self.elements):
            if e.tag == tag and e.attrs.get("class") == cls:
                assert self.elements[i + 1].tag == "title"
                out.append(self.elements[i + 1].text)
        return out


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """BASE and NEW, each a folder of RUNS profiles, made in turns (base, new, ...)."""
    return sides_in_turns(
        tmp_path_factory.mktemp("diffhtml"), runs=RUNS, steps=STEPS, mms=MMS, size=SIZE, extra=EXTRA
    )


def _step_durations(folder: Path) -> list[float]:
    """Every ProfilerStep slice's ``dur`` in the folder's traces, read here from the JSON."""
    out = []
    for path in sorted(folder.iterdir()):
        events = json.loads(path.read_text())["traceEvents"]
        out += [e["dur"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    return out


def test_page_of_real_profiles(sides, tmp_path, capsys):
    base, new = sides
    page = tmp_path / "diff.html"
    assert run("diff", "--runs", base, new, "--markdown", "--html", page) == status.DONE
    markdown_first = capsys.readouterr().out.splitlines()[0]
    doc = Page(page.read_text(encoding="utf-8"))
    # The verdict first: the page's first paragraph is the markdown's first line.
    assert markdown_first == "**kinetrace diff**: " + doc.find("p")[0].text
    # (Which verdict is test_diff's concern: three runs a side can come out "unknown" on a
    # machine busy enough; the page shows whichever it is.) CPU profiles: the CPU's gates,
    # the GPU's and the counts' follow.
    assert doc.find("p")[0].text.startswith("job step time (gates): ")
    others = [p.text for p in doc.find("p", "other-verdict")]
    assert others[0].startswith("job GPU time per step: none")
    # The added product is the one count that changed, exact: its FLOPs (2 x n^3 each).
    flops = f"FLOPs {MMS * 2 * SIZE**3:,} -> {MMS * 2 * SIZE**3 + 2 * EXTRA**3:,}"
    assert others[1] == f"counts per step: 1 changed on 1 rank (more work per step in NEW): {flops}"
    # One dot per step sample on each side, the very durations the traces hold.
    result = kinetrace.diff(base, new, runs=True)
    v = result.verdict
    assert sorted(v.base_step_us) == sorted(_step_durations(base))
    assert sorted(v.new_step_us) == sorted(_step_durations(new))
    for side, samples in (("base", v.base_step_us), ("new", v.new_step_us)):
        dots = doc.titles("circle", f"sample-{side}")
        assert len(dots) == len(samples) == RUNS * STEPS
        assert sorted(dots) == sorted(f"{side.upper()} step: {duration(s)}" for s in samples)
    assert len(doc.find("line", "median")) == 2
    caption = doc.find("figcaption")[0].text
    assert f"[{v.ci_low_pct:+.1f}%, {v.ci_high_pct:+.1f}%]" in caption
    # A CPU profile has no GPU activities: the waterfall goes from BASE's median step to
    # NEW's through the operators (the added product first, with its shapes), the rest of
    # the step last; the bars add up.
    assert doc.titles("rect", "wf-end") == [
        f"BASE median step: {duration(v.base_median_us)}",
        f"NEW median step: {duration(v.new_median_us)}",
    ]
    # The added product is a bar whatever the load did to the others (measured beside a
    # loaded CI run: an unchanged product's bar above it), and it adds time.
    steps = diff_html.contributors(result)
    added = [c for c in steps if c.name.startswith(f"(new) aten::mm [[{EXTRA},{EXTRA}],")]
    assert len(added) == 1 and added[0].change_us > 0
    assert steps[-1].name.startswith("rest of the step")
    assert len(doc.titles("rect", "wf-up") + doc.titles("rect", "wf-down")) == len(steps)
    total = sum(c.change_us for c in steps)
    assert v.base_median_us + total == pytest.approx(v.new_median_us)


def _kernel(name: str, ts: float, dur: float) -> dict[str, object]:
    return {
        "ph": "X",
        "name": name,
        "cat": "kernel",
        "ts": ts,
        "dur": dur,
        "pid": 0,
        "tid": 7,
        "args": {"stream": 7},
    }


#: Kernel names of the constructed traces: µs per step in BASE and NEW (0: absent).
KERNELS = {
    "void gemm<float, 128>(a&b)": (40, 70),
    "k1 <&> x": (30, 10),
    **{f"small<{i}>": (5, 5 + i) for i in range(1, 10)},
    "gone&kernel": (8, 0),
}


def _gpu_trace(path: Path, side: int) -> Path:
    """Eight steps of 200 µs; in each the kernels of KERNELS one after the other."""
    events: list[dict[str, object]] = []
    for i in range(8):
        ts = 300.0 * i
        step = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}
        events.append({**step, "name": f"ProfilerStep#{i}", "ts": ts, "dur": 200 + 40 * side})
        t = ts + 1
        for name, durs in KERNELS.items():
            if durs[side]:
                events.append(_kernel(name, t, durs[side]))
                t += durs[side]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_waterfall_bars_and_escaped_names(tmp_path):
    base = _gpu_trace(tmp_path / "base.json", 0)
    new = _gpu_trace(tmp_path / "new.json", 1)
    result = kinetrace.diff(base, new)
    page = tmp_path / "diff.html"
    assert run("diff", base, new, "--html", page) == status.DONE
    text = page.read_text(encoding="utf-8")
    for raw in ("gemm<float", "<&>", "small<3>", "gone&kernel", "(a&b)"):
        assert raw not in text
    doc = Page(text)
    # Changed names by |change|: k1 -20, gemm +30, small<9..1> +9..+1, gone -8, the rest.
    changed = sorted(
        ((n, b - a) for n, (a, b) in KERNELS.items() if b != a), key=lambda c: -abs(c[1])
    )
    top = changed[: diff_html.WATERFALL_TOP]
    names = [("(gone) " if n == "gone&kernel" else "") + n for n, _ in top]
    others = sum(c for _, c in changed[diff_html.WATERFALL_TOP :])
    steps = doc.titles("rect", "wf-up") + doc.titles("rect", "wf-down")
    # One bar per contributor: the top 8, the other names, GPU idle, the rest; both ends.
    assert len(steps) == diff_html.WATERFALL_TOP + 3
    assert len(doc.find("rect", "wf-end")) == 2
    bars = {t.rsplit(": ", 1)[0]: t.rsplit(": ", 1)[1] for t in steps}
    for name, (_, change) in zip(names, top, strict=True):
        sign = "-" if change < 0 else "+"
        assert bars[name] == sign + duration(abs(change)), name
    n_others = len(changed) - diff_html.WATERFALL_TOP
    assert bars[f"{n_others} other GPU activities"] == "+" + duration(others)
    assert set(bars) - set(names) == {
        f"{n_others} other GPU activities",
        "GPU idle",
        "rest of the step (CPU, overlap, slowest rank)",
    }
    # The bars add up: BASE's median plus every contributor is NEW's median.
    v = result.verdict
    total = sum(c.change_us for c in diff_html.contributors(result))
    assert v.base_median_us + total == pytest.approx(v.new_median_us)
    # The names in the tables as well, escaped and whole.
    cells = {e.text for e in doc.find("td", "l")}
    assert {"k1 <&> x", "void gemm<float, 128>(a&b)", "(gone) gone&kernel"} <= cells


def _op(name: str, change_us: float, **kw: object) -> OperatorChange:
    values: dict[str, Any] = {
        "name": name,
        "input_dims": "[[64,64],[64,64]]",
        "input_type": '["float","float"]',
        "base_count": 1.0,
        "new_count": 1.0,
        "base_self_us": 10.0,
        "new_self_us": 10.0,
        "base_gpu_us": 10.0,
        "new_gpu_us": 10.0 + change_us,
        "change_us": change_us,
        "status": "",
        "new_name": "",
        "top_kernel": "void gemm<float>",
    }
    return OperatorChange(**{**values, **kw})


def test_operators_come_first_where_the_result_has_them(tmp_path):
    """With operators, the waterfall's names are theirs, with shapes, types and top kernel
    (GPU activities would count their GPU time twice); the operators' table follows."""
    base = _gpu_trace(tmp_path / "base.json", 0)
    new = _gpu_trace(tmp_path / "new.json", 1)
    ops = (
        _op("aten::mm<&>", 25.0),
        _op("aten::add", -5.0, status="renamed", new_name="aten::add_", top_kernel=""),
    )
    result = replace(kinetrace.diff(base, new), operators=ops)
    names = [c.name for c in diff_html.contributors(result)]
    mm = 'aten::mm<&> [[64,64],[64,64]] ["float","float"] -> void gemm<float>'
    add = '(renamed) aten::add => aten::add_ [[64,64],[64,64]] ["float","float"]'
    assert names == [mm, add, "rest of the step (CPU, overlap, slowest rank)"]
    doc = Page(diff_html.render_html(result, verdict_texts(result)))
    assert doc.titles("rect", "wf-up")[0] == f"{mm}: +" + duration(25.0)
    assert {mm, add} <= {e.text for e in doc.find("td", "l")}


def test_page_loads_in_chromium(sides, tmp_path):
    chromium.require_browser()
    base, new = sides
    cpu = tmp_path / "cpu.html"
    assert run("diff", "--runs", base, new, "--html", cpu) == status.DONE
    gpu = tmp_path / "gpu.html"
    b, n = _gpu_trace(tmp_path / "b.json", 0), _gpu_trace(tmp_path / "n.json", 1)
    assert run("diff", b, n, "--html", gpu) == status.DONE
    for page, dots in ((cpu, 2 * RUNS * STEPS), (gpu, 16)):
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        seen = chromium.probe(page, tmp_path)
        assert seen["errors"] == [], seen
        assert seen["svgs"] == 2 and seen["bad"] == 0 and seen["widths"], seen
        assert seen["clipped"] == [], seen["clipped"]
        assert seen["circles"] == dots, seen


def test_cli_writes_atomically_with_the_same_status(sides, tmp_path, capsys, monkeypatch):
    base, new = sides
    out = tmp_path / "out"
    out.mkdir()
    page = out / "diff.html"
    page.write_text("old page")
    os.link(page, out / "old.html")
    # The status with --fail-above 5 is whatever the verdict gives (a regression, but three
    # runs a side can come out "~" on a machine busy enough): --html must not change it.
    slower = kinetrace.diff(base, new, runs=True).regression(5)
    for args, expected in (
        ([], status.DONE),
        (["--fail-above", "5"], status.REGRESSION if slower else status.DONE),
        (["--fail-above", "1000"], status.DONE),
    ):
        assert run("diff", "--runs", base, new, *args) == expected
        plain = capsys.readouterr().out
        assert run("diff", "--runs", base, new, *args, "--html", page) == expected
        assert capsys.readouterr().out == plain
        assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # Renamed over the destination, never written into it: the old file's other name
    # keeps the old text; no temporary is left.
    assert (out / "old.html").read_text() == "old page"
    assert temp_files(out) == []
    # A page that fails half way through its writing (a lone surrogate has no UTF-8) leaves
    # the destination as it was and no temporary.
    before = page.read_bytes()

    def broken(result: object, verdicts: object) -> str:
        return "<!DOCTYPE html>" + "x" * 100_000 + "\ud800"

    monkeypatch.setattr(diff_html, "render_html", broken)
    assert run("diff", "--runs", base, new, "--html", page) == status.FAILED
    assert page.read_bytes() == before
    assert temp_files(out) == []
