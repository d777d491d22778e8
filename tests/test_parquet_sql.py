"""The SQL of ``docs/analysis.md`` gives the figures of ``kinetrace summary``: every figure's
query, read out of the page, run on DuckDB over the Parquet dataset of each real trace of
``../shared/traces`` (``kinetrace.to_parquet``) and on Spark in local mode over a few of
them (all of them in the slow set), and on the eight ranks of one DLRM job as one dataset
(the steps across ranks); and on traces made to reach the edges of the rules. Every row is
compared exactly with ``kinetrace.summarize`` under the ``exact`` rules."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import kinetrace
from support import sql
from support.real import DLRM_RANKS, REAL_TRACES, real_params, require_real, trace_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The page's figures, each compared with the summary's.
FIGURES = (
    "temporal_breakdown",
    "kernel_types",
    "kernels",
    "comm_comp_overlap_pct",
    "idle_time",
    "rank_steps",
    "steps",
)

#: The page's figures compared with ``kinetrace.ops``' groups instead of the summary's.
OPS_FIGURES = ("op_groups",)

#: The traces Spark runs on in the default set: communication kernels overlapping
#: computation on five streams; MTIA's categories on twelve streams. The eight DLRM ranks
#: (one dataset) and the made traces (a rank without GPU activity among them) have their own
#: tests; every real trace is in the slow set.
SPARK_TRACES = (
    "hta/trace_filter__sampled_rank-0",
    "hta/mtia_inference_trace__mtia_inference_rank_0",
)

Rows = list[tuple[Any, ...]]

#: The columns of each figure's rows that are times, in ns in the page's rows, in µs in the
#: summary's.
TIMES = {
    "temporal_breakdown": (1, 2, 3, 4),
    "kernel_types": (2,),
    "kernels": (4, 5, 6, 7),
    "comm_comp_overlap_pct": (),
    "idle_time": (2, 3, 4),
    "rank_steps": (2,),
    "steps": (3, 5),
}


def in_us(figure: str, rows: Rows) -> Rows:
    """The page's rows of ``figure`` with their times in µs as the summary gives them: the
    double nearest to ns / 1000 (Python's int / int is rounded so; a µs double's * 1000 is
    not always the ns: from 2^53 ns on doubles are more than 1 ns apart)."""
    return [tuple(v / 1000 if i in TIMES[figure] else v for i, v in enumerate(row)) for row in rows]


def expected(summary: dict[str, Any]) -> dict[str, Rows]:
    """Each figure of ``summary`` (``Summary.to_json()``) as the page's query returns it:
    the same columns (times in µs), in the query's order."""
    ranks = summary["ranks"]
    return {
        "temporal_breakdown": [
            (
                r["rank"],
                t["idle_time_us"],
                t["compute_time_us"],
                t["non_compute_time_us"],
                t["kernel_time_us"],
            )
            for r in ranks
            for t in [r["temporal_breakdown"]]
        ],
        "kernel_types": sorted(
            (r["rank"], label, us) for r in ranks for label, us in r["kernel_types"].items()
        ),
        "kernels": [
            (
                r["rank"],
                k["name"],
                k["type"],
                k["count"],
                k["sum_us"],
                k["mean_us"],
                k["min_us"],
                k["max_us"],
            )
            for r in ranks
            for k in r["kernels"]
        ],
        "comm_comp_overlap_pct": [(r["rank"], r["comm_comp_overlap_pct"]) for r in ranks],
        "idle_time": sorted(
            (r["rank"], int(stream), i["host_wait_us"], i["kernel_wait_us"], i["other_us"])
            for r in ranks
            for stream, i in r["idle_time"].items()
        ),
        "rank_steps": [(r["rank"], s["name"], s["dur_us"]) for r in ranks for s in r["steps"]],
        "steps": [
            (
                s["name"],
                s["ranks"],
                s["slowest_rank"],
                s["slowest_us"],
                s["fastest_rank"],
                s["fastest_us"],
                # The page divides the ns, the summary the µs doubles (three roundings, not
                # one): a few ulps apart at most.
                None if s["ratio"] is None else pytest.approx(s["ratio"], rel=1e-15, abs=0),
            )
            for s in summary["steps"]
        ],
    }


def mismatches(engine: sql.Engine, summary: dict[str, Any]) -> dict[str, tuple[Rows, Rows]]:
    """figure -> (the page's rows, the summary's) for every figure where they differ."""
    want = expected(summary)
    out = {}
    for figure in FIGURES:
        got = in_us(figure, engine.rows(figure))
        if got != want[figure]:
            out[figure] = (got, want[figure])
    return out


def assert_figures(engine: sql.Engine, summary: dict[str, Any]) -> None:
    for figure, (got, want) in mismatches(engine, summary).items():
        # The first figure that differs, with pytest's diff of its rows.
        assert got == want, f"{engine.name}: figure {figure}"


Build = Callable[[Sequence[Path]], Path]


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The Parquet dataset of some traces, built once per test session."""
    built: dict[tuple[Path, ...], Path] = {}

    def build(paths: Sequence[Path]) -> Path:
        key = tuple(paths)
        if key not in built:
            out = tmp_path_factory.mktemp("parquet") / "DIR"
            kinetrace.to_parquet(list(paths), out)
            built[key] = out
        return built[key]

    return build


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One Spark session for the test session (it takes seconds to start)."""
    session = sql.start_spark(tmp_path_factory.mktemp("spark"))
    yield session
    sql.stop_spark(session)


def summary_of(paths: Sequence[Path]) -> dict[str, Any]:
    result: dict[str, Any] = kinetrace.summarize(list(paths)).to_json()
    return result


def test_the_page_has_a_query_for_every_figure() -> None:
    found = sql.blocks()
    assert sorted(name for kind, name in found if kind == "figure") == sorted(FIGURES + OPS_FIGURES)
    assert {name for kind, name in found if kind == "open"} == {"duckdb", "spark", "pyspark"}


@pytest.mark.parametrize("path", real_params())
def test_duckdb_gives_the_summary_figures(path: Path, dataset: Build) -> None:
    with sql.duckdb_engine(dataset([path])) as engine:
        assert_figures(engine, summary_of([path]))


def _spark_params() -> list[Any]:
    return [
        p
        if p.id in SPARK_TRACES or p.id == "no-real-traces"
        else pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.slow])
        for p in real_params()
    ]


def test_the_spark_traces_are_there() -> None:
    require_real()
    assert set(SPARK_TRACES) <= {trace_id(p) for p in REAL_TRACES}


@pytest.mark.parametrize("path", _spark_params())
def test_spark_gives_the_summary_figures(path: Path, dataset: Build, spark: SparkSession) -> None:
    assert_figures(sql.spark_engine(spark, dataset([path])), summary_of([path]))


def _dlrm() -> list[Path]:
    require_real()
    assert len(DLRM_RANKS) == 8
    return DLRM_RANKS


def test_eight_ranks_in_one_dataset_on_duckdb(dataset: Build) -> None:
    summary = summary_of(_dlrm())
    # The steps across ranks are put to the test only where every rank has them.
    assert summary["steps"] and {s["ranks"] for s in summary["steps"]} == {8}
    with sql.duckdb_engine(dataset(_dlrm())) as engine:
        assert_figures(engine, summary)


def test_eight_ranks_in_one_dataset_on_spark(dataset: Build, spark: SparkSession) -> None:
    assert_figures(sql.spark_engine(spark, dataset(_dlrm())), summary_of(_dlrm()))


#: A string ``_EXACT + text`` is written as the number ``text`` (a float would be rounded).
_EXACT = "exact number: "

#: A time in µs: a float (at most 3 decimals: ``json`` writes it as exact text) or ``_EXACT``.
Us = float | str


def _dump(obj: Any) -> str:
    return re.sub(f'"{_EXACT}([-0-9.eE+]+)"', r"\1", json.dumps(obj))


def _event(name: str, ts: Us | None, dur: Us | None, cat: str | None, **args: Any) -> Any:
    """An ``X`` event."""
    event: dict[str, Any] = {"ph": "X", "name": name, "pid": 1, "tid": 1}
    event |= {"cat": cat} if cat is not None else {}
    event |= {"ts": ts} if ts is not None else {}
    event |= {"dur": dur} if dur is not None else {}
    return event | ({"args": args} if args else {})


def _kernel(name: str, ts: Us, dur: Us, cat: str = "kernel", **args: Any) -> Any:
    return _event(name, ts, dur, cat, **args)


def _launch(ts: float, correlation: int) -> Any:
    return _event("cudaLaunchKernel", ts, 1, "cuda_runtime", correlation=correlation)


def _step(name: str, ts: float | None, dur: float | None, cat: str | None = "cpu_op") -> Any:
    return _event(name, ts, dur, cat)


def constructed(folder: Path) -> list[Path]:
    """Three ranks made to reach what the real traces do not: ties in the orders the rules
    name, the first of two launches, a name of two types, gaps and roundings on the edge."""
    ranks = [
        [
            _step("ProfilerStep#1", 0, 1000),
            _step("ProfilerStep#1", 1000, 5),  # a second slice: not the step's
            _step("ProfilerStep#1", 0, 9999, "gpu_user_annotation"),
            _step("ProfilerStep#2", 2000, 700, None),
            _launch(5, 1),
            _kernel("gemm", 10, 10, stream=7, correlation=1),
            # Both start at 30 after stream 7 is busy until 20: the shorter one first, whose
            # launch (25) makes the gap host_wait, though the other comes first in the file.
            _kernel("gemm", 30, 10, stream=7, correlation=3),
            _launch(25, 2),
            _kernel("relu", 30, 5, stream=7, correlation=2),
            # Two launches of correlation 4: the first in the file (30, not after the busy
            # end 40, so the 60 µs gap is other) is the one, not the later (95).
            _launch(30, 4),
            _launch(95, 4),
            _kernel("relu", 100, 10, stream=7, correlation=4),
            _kernel("relu", 200, 10, stream=7),  # no launch: other
            _kernel("relu", 215, 5, stream=7),  # no launch, under 30 µs: kernel_wait
            _kernel("relu", 400, 0, stream=7),
            _launch(400, 5),  # as stream 7's busy time ends, not after: the gap is other
            _kernel("relu", 500, 5, stream=7, correlation=5),
            _event("cudaLaunchKernel", None, 1, "cuda_runtime", correlation=6),  # no ts
            _launch(550, 6),  # the first launch with a time: host_wait
            _kernel("relu", 600, 5, stream=7, correlation=6),
            _kernel("gemm", 300, 10),  # no stream: -1
            _event("gemm", None, 5, "kernel", stream=7),  # no ts: no activity
            _kernel("Memcpy HtoD", 50, 10, stream=8),
            _kernel("dma_copy", 52, 3, stream=8),
            _kernel("mixed_a", 60, 1, stream=8),  # COMPUTATION first
            _kernel("mixed_a", 62, 1, "gpu_memcpy", stream=8),
            _kernel("mixed_b", 64, 1, "gpu_memset", stream=8),  # MEMORY first
            _kernel("mixed_b", 66, 1, stream=8),
            # 5 ns of 20 µs of communication overlapped: 2.5 hundredths of %, 2 to even.
            _kernel("ncclKernel_AllReduce", 1000, 20, stream=9),
            _kernel("gemm", 1019.995, 10, stream=10),
            _kernel("nccl_all_reduce", 1100, 10, stream=9),  # no "Kernel": COMPUTATION
        ],
        [
            _step("ProfilerStep#0", 0, 900),  # met before #3, though named after
            _step("ProfilerStep#1", 1000, 1000),
            _step("ProfilerStep#3", 3000, 800),
            _step("ProfilerStep#9", 5000, None),
            _kernel("ncclDevKernel_AllGather", 10, 7.001, stream=3),
            _kernel("ncclDevKernel_AllGather", 20, 7.002, stream=3),
            _kernel("gemm", 12, 30, stream=4),
            _kernel("gemm", 72, 8, stream=4),  # 30 µs after: other, not kernel_wait
            _kernel("tie", 90, 0.002, stream=4),  # mean 2.5 ns: 2, to even
            _kernel("tie", 91, 0.003, stream=4),
            {"ph": "X", "cat": "kernel", "ts": 95, "dur": 1, "args": {"stream": 4}},  # no name
        ],
        [_step("ProfilerStep#1", 0, 1000), _step("ProfilerStep#2", 2000, 0)],
    ]
    paths = []
    for rank, events in enumerate(ranks):
        header = {"distributedInfo": {"rank": rank}, "baseTimeNanoseconds": 1_700_000_000 * rank}
        path = folder / f"trace{rank}.json"
        path.write_text(_dump({**header, "traceEvents": events}), encoding="utf-8")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return constructed(tmp_path_factory.mktemp("edges"))


def test_edge_cases_on_duckdb(edges: list[Path], dataset: Build) -> None:
    summary = summary_of(edges)
    # What the traces were made to reach (the rest is the summary's to say).
    first, _, last = summary["ranks"]
    assert (first["comm_comp_overlap_pct"], last["comm_comp_overlap_pct"]) == (0.02, None)
    with sql.duckdb_engine(dataset(edges)) as engine:
        assert_figures(engine, summary)


def test_edge_cases_on_spark(edges: list[Path], dataset: Build, spark: SparkSession) -> None:
    """Opened by the page's PySpark lines (the other Spark tests use its SQL statements)."""
    assert_figures(sql.spark_engine(spark, dataset(edges), pyspark=True), summary_of(edges))


def test_integer_args_written_any_way_are_read_alike(tmp_path: Path, dataset: Build) -> None:
    """``stream`` and ``correlation`` as a number with a zero fraction or an exponent, or as
    a string with blanks: ``summary`` and the Parquet columns read them with one reader, so
    the SQL still gives the summary's figures; past 2^53 every digit counts."""
    big = 2**53 + 1  # a float would read ...992
    writings = [_EXACT + "7e0", " 7", _EXACT + "7.0", "7.00", _EXACT + "70e-1", 7]
    events = [_launch(90, big)]
    for i, stream in enumerate(writings):
        events.append(_kernel(f"k{i}", 10 + 10 * i, 5, stream=stream, correlation=i))
    # Stream 8 busy until 55, then the kernel of correlation 2^53 + 1, launched at 90: the
    # 45 µs gap is a host wait only where the launch is found by every digit.
    events.append(_kernel("first", 50, 5, stream=8))
    events.append(_kernel("big", 100, 5, stream=8, correlation=_EXACT + f"{big}.0"))
    path = tmp_path / "ints.json"
    path.write_text(_dump({"traceEvents": events}), encoding="utf-8")
    assert "7e0" in path.read_text() and '" 7"' in path.read_text()
    summary = summary_of([path])
    (rank,) = summary["ranks"]
    # One stream 7 (every writing) and stream 8, whose kernel found its launch (host wait).
    assert set(rank["idle_time"]) == {"7", "8"}, rank["idle_time"]
    assert rank["idle_time"]["8"]["host_wait_us"] == 45.0
    with sql.duckdb_engine(dataset([path])) as engine:
        assert_figures(engine, summary)
        streams = engine.rows_of(
            "SELECT DISTINCT stream FROM events WHERE cat = 'kernel' ORDER BY stream"
        )
        assert streams == [(7,), (8,)]
        assert engine.rows_of("SELECT correlation FROM events WHERE name = 'big'") == [(big,)]


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_means_past_2_to_the_53_ns_are_exact(
    engine: str, tmp_path: Path, dataset: Build, request: pytest.FixtureRequest
) -> None:
    """Past 2^53 ns (104 days) a DOUBLE is no longer every ns (nor is the summary's µs, so
    the page is held to the rules themselves here): the mean's division is corrected."""
    # 2^54 + 3 ns in all: 2^54 + 4 as a DOUBLE, whose third is a step above the exact one.
    durs = ["6004799503160.661", "6004799503160.661", "6004799503160.665"]
    events = [_kernel("long", 0, _EXACT + d, stream=7) for d in durs]
    path = tmp_path / "long.json"
    path.write_text(_dump({"traceEvents": events}), encoding="utf-8")
    ns = [int(Decimal(d) * 1000) for d in durs]
    total = sum(ns)
    assert math.floor(float(total) / 3) == total // 3 + 1
    # Python's round() of a Fraction: the nearest integer, ties to even.
    mean = round(Fraction(total, len(ns)))
    want = [(0, "long", "COMPUTATION", len(ns), total, mean, min(ns), max(ns))]
    if engine == "spark":
        spark = request.getfixturevalue("spark")
        assert sql.spark_engine(spark, dataset([path])).rows("kernels") == want
    else:
        with sql.duckdb_engine(dataset([path])) as duck:
            assert duck.rows("kernels") == want


def test_a_wrong_query_is_caught(dataset: Build, tmp_path: Path) -> None:
    """The comparison sees a query that is off: the page with NCCL kernels typed as
    computation gives other figures than the summary's."""
    page = sql.DOC.read_text(encoding="utf-8")
    assert page.count("'nccl%Kernel%'") == 1
    wrong = tmp_path / "analysis.md"
    wrong.write_text(page.replace("'nccl%Kernel%'", "'nccl%Kernel%x'"), encoding="utf-8")
    with sql.duckdb_engine(dataset(_dlrm()), doc=wrong) as engine:
        assert set(mismatches(engine, summary_of(_dlrm()))) == {
            "temporal_breakdown",
            "kernel_types",
            "kernels",
            "comm_comp_overlap_pct",
        }


#: Real traces with GPUs of the peaks table (``tests/test_ops.py``'s), for ``op_groups``:
#: DuckDB on each, Spark on the first in the default set (on all in the slow set).
OPS_TRACES = (
    Path("TraceLens") / "b200" / "eager_trace.json.gz",
    Path("TraceLens") / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz",
    Path("TraceLens") / "mi300" / "google_owlv2-large-patch14-ensemble__1016001.json.gz",
)


def _close(value: Any) -> Any:
    """A double of the page's arithmetic, equal to Python's to the last digits (the two
    compute in different orders)."""
    return pytest.approx(value, rel=1e-9, abs=0) if isinstance(value, float) else value


def _group_key(row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple("" if v is None else v for v in row[:4])


def ops_groups(path: Path) -> Rows:
    """``kinetrace.ops(path).groups`` as ``op_groups`` gives them (without ``rank`` and
    ``family``; times in µs); sorted by (name, bwd, input_dims, input_type)."""
    report = kinetrace.ops(path)
    assert report.gpu is not None, report.note
    out = []
    for g in report.groups:
        key = (g.name, g.bwd, g.input_dims, g.input_type)
        rates = (g.tflops_s, g.tbs, g.flops_per_byte, g.precision, g.peak_tflops)
        roofs = (g.roof_tflops, g.roof_pct, g.bound, g.roof_time_us, g.saveable_us)
        out.append((*key, g.count, g.time_us, g.flops, g.bytes, *rates, *roofs))
    return sorted(out, key=_group_key)


def page_groups(engine: sql.Engine) -> Rows:
    """The page's ``op_groups`` of a one-rank dataset as :func:`ops_groups` gives them, in
    the page's order."""
    out = []
    for row in engine.rows("op_groups"):
        assert row[0] == 0  # the rank
        name, _family, bwd, dims, types, count, time_ns, *rest = row[1:]
        *rest, roof_ns, saveable_ns = rest
        us = [None if v is None else v / 1000 for v in (roof_ns, saveable_ns)]
        out.append((name, bwd, dims, types, count, time_ns / 1000, *rest, *us))
    return out


def assert_groups(engine: sql.Engine, path: Path) -> None:
    page, want = page_groups(engine), ops_groups(path)
    assert len(page) == len(want) > 10
    assert sorted(page, key=_group_key) == [tuple(_close(v) for v in row) for row in want]
    # Ranked as the module ranks them: the most saveable first.
    first = max(want, key=lambda row: row[-1] or 0.0)
    assert _group_key(page[0]) == _group_key(first)


@pytest.mark.parametrize("trace", OPS_TRACES, ids=str)
def test_duckdb_gives_the_ops_groups(trace: Path, dataset: Build) -> None:
    path = require_real() / trace
    with sql.duckdb_engine(dataset([path])) as engine:
        assert_groups(engine, path)


@pytest.mark.parametrize(
    "trace",
    [OPS_TRACES[0], *(pytest.param(t, marks=pytest.mark.slow) for t in OPS_TRACES[1:])],
    ids=str,
)
def test_spark_gives_the_ops_groups(trace: Path, dataset: Build, spark: SparkSession) -> None:
    path = require_real() / trace
    assert_groups(sql.spark_engine(spark, dataset([path])), path)
