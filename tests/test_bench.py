"""The benchmark: ``kinetrace demo`` (``kinetrace._bench``) times every peer through the call its
users make, and ``benches/benchlib.py`` records runs, draws them and compares their ratios."""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path

import pytest

import kinetrace
from kinetrace import _bench
from kinetrace._cli import main

BENCHES = Path(__file__).resolve().parent.parent / "benches"
sys.path.insert(0, str(BENCHES))
import benchlib  # noqa: E402


def test_demo_times_each_peer_through_its_own_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--iterations", "30", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    # torch's real .json.gz path, on a profile of its own, and said so in the table.
    assert "prof.export_chrome_trace(path) on a profile of its own" in table
    assert "gzip writelines, level 9" in table
    assert "use_python_export=True" in table
    for name in (
        "stock.json",
        "stock.json.gz",
        "torch_python.json",
        "torch_python.json.gz",
        "kinetrace.w1.json",
        "kinetrace.w1.json.gz",
    ):
        report = kinetrace.check_trace(tmp_path / name)
        assert report.valid, (name, report.errors)
    with gzip.open(tmp_path / "stock.json.gz") as f:
        stock = json.load(f)
    with open(tmp_path / "stock.json") as f:
        assert len(json.load(f)["traceEvents"]) == len(stock["traceEvents"])


def test_every_profile_holds_the_same_workload(tmp_path: Path) -> None:
    recorded = []

    def record():
        prof = _bench.record_workload(20)
        recorded.append(prof)
        return prof

    rows = _bench.compare(record, str(tmp_path), worker_counts=(1,), extra_levels=())
    # one shared profile plus one per stock row: torch saves a result only once
    assert len(recorded) == 3
    counts = {r.activities for r in rows}
    assert len(counts) == 1 and counts.pop() == 20 * 6
    by_key = {(r.exporter, r.fmt): r for r in rows}
    assert set(by_key) == {
        ("accessor floor", "-"),
        ("stock C++", "json"),
        ("stock C++", "json.gz"),
        ("torch Python", "json"),
        ("torch Python", "json.gz"),
        ("kinetrace", "json"),
        ("kinetrace", "json.gz"),
    }
    assert all(r.how and r.seconds > 0 for r in rows)
    speedup = by_key[("kinetrace", "json.gz")].ratios["speedup vs stock C++"]
    stock, ours = by_key[("stock C++", "json.gz")], by_key[("kinetrace", "json.gz")]
    assert speedup == pytest.approx(stock.seconds / ours.seconds)


def test_stock_torch_is_not_timed_through_kinetrace(tmp_path: Path) -> None:
    with kinetrace.installed_context():
        with pytest.raises(RuntimeError, match="install"):
            _bench.compare(lambda: _bench.record_workload(5), str(tmp_path))


def test_measure_handler_block(tmp_path: Path) -> None:
    prof = _bench.record_workload(5)
    handler = kinetrace.tensorboard_trace_handler(tmp_path)
    blocked, done = benchlib.measure_handler_block(handler, prof)
    assert 0 < blocked <= done
    assert len(list(tmp_path.iterdir())) == 1


def _run(date: str, speedup: float, handler_torch: float = 1.0) -> dict:
    return {
        "iterations": 100,
        "repeat": 1,
        "machine": {"cpus": 2, "python": "3.11", "torch": "2.15.0", "date": date},
        "workloads": {
            "shapes": {
                "options": {"record_shapes": True},
                "activities": 600,
                "rows": [
                    {
                        "exporter": "accessor floor",
                        "fmt": "-",
                        "seconds": 0.1,
                        "size": None,
                        "note": "",
                        "ratios": {"x floor": 1.0},
                    },
                    {
                        "exporter": "stock C++",
                        "fmt": "json.gz",
                        "seconds": 0.4 * speedup,
                        "size": 1000,
                        "note": "",
                        "ratios": {"x floor": 4.0 * speedup},
                        "how": "prof.export_chrome_trace(path)",
                    },
                    {
                        "exporter": "kinetrace",
                        "fmt": "json.gz",
                        "seconds": 0.4,
                        "size": 1000,
                        "note": "1 worker, level 7",
                        "ratios": {"x floor": 4.0, "speedup vs stock C++": speedup},
                        "how": "kinetrace.export_chrome_trace(prof, path)",
                    },
                ],
            }
        },
        "handler": [
            {"handler": "torch handler", "fmt": "json", "blocked_s": handler_torch, "done_s": 1.0},
            {"handler": "kinetrace handler", "fmt": "json", "blocked_s": 1.0, "done_s": 1.0},
        ],
    }


def test_ratios_that_moved_are_marked(tmp_path: Path) -> None:
    lines, moved = benchlib.compare_with(_run("2026-01-01", 4.0), _run("2026-01-02", 4.4))
    assert moved == 0  # +10% is within the 25% a run may move
    assert not any("MOVED" in line for line in lines)
    assert any("speedup vs stock C++" in line and "+10%" in line for line in lines)

    lines, moved = benchlib.compare_with(
        _run("2026-01-01", 4.0), _run("2026-01-02", 2.0, handler_torch=2.0)
    )
    marked = [line for line in lines if line.endswith("<<< MOVED")]
    assert moved == len(marked) == 3
    assert any("speedup vs stock C++" in line and "-50%" in line for line in marked)
    assert any(line.startswith("handler json:") for line in marked)


def test_ratios_never_include_absolute_times() -> None:
    values = benchlib.ratios(_run("2026-01-01", 4.0))
    assert values["shapes: kinetrace json.gz (1 worker, level 7) speedup vs stock C++"] == 4.0
    assert "shapes: accessor floor - x floor" not in values
    assert values["handler json: torch blocked / kinetrace blocked"] == 1.0
    assert not any("seconds" in key for key in values)


def test_the_last_full_run_is_the_newest_by_its_date(tmp_path: Path) -> None:
    assert benchlib.last_full_run(tmp_path) is None
    (tmp_path / "bench-2core-2026-03-01.json").write_text(json.dumps(_run("2026-03-01", 1)))
    (tmp_path / "bench-8core-2026-02-01.json").write_text(json.dumps(_run("2026-02-01", 2)))
    no_date = _run("", 3)
    del no_date["machine"]["date"]
    (tmp_path / "bench-2core-2026-01-01.json").write_text(json.dumps(no_date))
    (tmp_path / "notes.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    found = benchlib.last_full_run(tmp_path)
    assert found is not None and found[0].name == "bench-2core-2026-03-01.json"


def test_the_committed_runs_are_readable() -> None:
    found = benchlib.last_full_run()
    assert found is not None
    path, payload = found
    assert benchlib.ratios(payload), path


def test_chart_tables_and_readme_block(tmp_path: Path) -> None:
    run = _run("2026-01-01", 4.0)
    run["workloads"]["stack"] = copy.deepcopy(run["workloads"]["shapes"])
    chart = tmp_path / "chart.svg"
    benchlib.write_chart(run, chart)
    svg = chart.read_text()
    assert svg.startswith("<?xml") and "<svg" in svg
    benchlib.write_chart(run, tmp_path / "again.svg")
    assert (tmp_path / "again.svg").read_text() == svg  # no dates or random ids inside

    tables = benchlib.markdown_tables(run)
    assert "| stock C++ | json.gz | 1.600 |" in tables
    assert "`kinetrace.export_chrome_trace(prof, path)`" in tables

    text = "a\n<!-- x:start -->\nold\n<!-- x:end -->\nb\n"
    assert benchlib.replace_between(text, "x", "new\n") == (
        "a\n<!-- x:start -->\nnew\n<!-- x:end -->\nb\n"
    )
    with pytest.raises(ValueError, match="no <!-- y:start -->"):
        benchlib.replace_between(text, "y", "new")


def test_kineto_writer_table_puts_each_figure_in_its_column(tmp_path: Path) -> None:
    """The comparison ``kinetrace demo`` prints on torch < 2.13 (it runs on any torch): its
    notes in the note column, no activity count where none was counted."""
    rows = _bench.compare_kineto_writer(lambda: _bench.record_workload(20), str(tmp_path))
    assert [(r.exporter, r.fmt) for r in rows] == [
        ("stock C++", "json"),
        ("stock C++", "json.gz"),
        ("kinetrace", "json"),
        ("kinetrace", "json.gz"),
    ]
    assert all(r.activities is None and r.how for r in rows)
    assert rows[0].note == "Kineto's writer"
    table = _bench.format_table(rows)
    stock_line = next(line for line in table.splitlines() if line.startswith("stock C++ "))
    assert stock_line.endswith("  Kineto's writer")
    assert "activities" not in table
