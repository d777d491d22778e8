"""The SQL of ``docs/analysis.md``, read out of the page itself (so the page is what the tests
run) and run on DuckDB or on Spark in local mode over a ``kinetrace parquet`` dataset.

The page marks each fenced ``sql`` block with a first line ``-- open: ENGINE`` (the
statements that open ``DIR``), ``-- view: NAME`` (a view the figures use) or ``-- figure:
NAME`` (one figure of ``kinetrace summary``); a ``python`` block ``# open: pyspark`` opens
``DIR`` from PySpark. Spark needs Java and pyspark: where either is
missing its tests skip with the reason, or fail where ``KINETRACE_REQUIRE_CONSUMERS`` is set
(as for the other consumers, :mod:`support.consumers`).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import pytest

from support.consumers import REQUIRE, consumer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DOC",
    "Engine",
    "blocks",
    "duckdb_engine",
    "spark_engine",
    "start_spark",
    "statements",
    "stop_spark",
]

#: The page whose SQL the tests run.
DOC = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"

_BLOCK = re.compile(
    r"^```(?:sql\n-- |python\n# )(open|view|figure): (\S+)\n(.*?)^```$", re.M | re.S
)


def blocks(doc: Path = DOC) -> dict[tuple[str, str], str]:
    """(kind, name) -> the code of each marked block of ``doc``, in the page's order."""
    found: dict[tuple[str, str], str] = {}
    for kind, name, sql in _BLOCK.findall(doc.read_text(encoding="utf-8")):
        assert (kind, name) not in found, f"{doc.name}: two blocks '-- {kind}: {name}'"
        found[kind, name] = sql
    return found


def statements(sql: str) -> list[str]:
    """The statements of a block (the page's SQL has no ``;`` inside a literal)."""
    return [s.strip() for s in sql.split(";") if s.strip()]


def _opening(engine: str, directory: Path, doc: Path) -> list[str]:
    """The page's statements that open ``DIR`` on ``engine``, with ``directory`` as DIR."""
    sql = blocks(doc)["open", engine]
    text = directory.resolve().as_posix()
    # The path goes inside the page's SQL string literals.
    assert "'" not in text, text
    assert "'DIR/" in sql, f"{doc.name}: the {engine} opening names no 'DIR/...' path"
    return statements(sql.replace("'DIR/", f"'{text}/"))


def _views(doc: Path) -> list[str]:
    return [s for (kind, _), sql in blocks(doc).items() if kind == "view" for s in statements(sql)]


def _figure(name: str, doc: Path) -> str:
    (sql,) = statements(blocks(doc)["figure", name])
    return sql


class Engine(Protocol):
    """A dataset opened by the page's statements on one engine, with its views made."""

    name: str

    def rows(self, figure: str) -> list[tuple[Any, ...]]:
        """The rows of the page's query for ``figure``, as Python values, in its order."""
        ...


class _DuckDB:
    name = "duckdb"

    def __init__(self, directory: Path, doc: Path) -> None:
        duckdb = consumer("duckdb")
        self._doc = doc
        self._con = duckdb.connect()
        for statement in _opening("duckdb", directory, doc) + _views(doc):
            self._con.execute(statement)

    def rows(self, figure: str) -> list[tuple[Any, ...]]:
        return list(self._con.execute(_figure(figure, self._doc)).fetchall())

    def rows_of(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of any query over the page's views (``events``, ``flows``, ...)."""
        return list(self._con.execute(query).fetchall())

    def close(self) -> None:
        self._con.close()


@contextmanager
def duckdb_engine(directory: Path, doc: Path = DOC) -> Iterator[_DuckDB]:
    """The dataset at ``directory`` opened in a new in-memory DuckDB."""
    engine = _DuckDB(directory, doc)
    try:
        yield engine
    finally:
        engine.close()


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE):
        pytest.fail(f"{REQUIRE} is set, but {reason}", pytrace=False)
    pytest.skip(reason)


#: The first pyspark release whose queries close their sockets.
_PYSPARK = (4, 2)


def start_spark(scratch: Path) -> SparkSession:
    """A Spark session in local mode for the whole test session (end it with
    :func:`stop_spark`): two cores, two shuffle partitions (the default, 200, is for
    clusters), no web UI, its warehouse and scratch files in ``scratch`` (Spark's defaults
    are folders in the working directory and /tmp, left behind)."""
    if shutil.which("java") is None:
        _unavailable("no java on PATH for Spark (Debian: apt-get install openjdk-17-jre-headless)")
    version = consumer("pyspark").__version__
    if tuple(int(part) for part in version.split(".")[:2]) < _PYSPARK:
        # Older ones leave a socket to the JVM open after each collect(): a ResourceWarning,
        # an error under the suite's filterwarnings, in every test.
        _unavailable(f"pyspark {version} leaks a socket per query; pyspark>=4.2 does not")
    sql = consumer("pyspark.sql")
    spark: SparkSession = (
        sql.SparkSession.builder.master("local[2]")
        .appName("kinetrace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.local.dir", str(scratch / "local"))
        # Local mode needs no network: the driver listens on the loopback only.
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    # Spark's log (the JVM's stderr) says WARN for what local mode does by design.
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark(spark: SparkSession) -> None:
    """Stops ``spark`` and ends its JVM, which pyspark otherwise keeps (600 MB) until Python
    exits, for the rest of the test run."""
    spark.stop()
    context = consumer("pyspark").SparkContext
    gateway = context._gateway
    if gateway is None:
        return
    gateway.shutdown()
    # The JVM exits when its stdin (a pipe from this process) closes.
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=60)
    context._gateway = context._jvm = None


class _Spark:
    name = "spark"

    def __init__(self, spark: SparkSession, directory: Path, doc: Path, pyspark: bool) -> None:
        self._spark = spark
        self._doc = doc
        # Temporary views belong to the session: those of the dataset opened before go, so
        # that only the page's opening can make the views its queries read.
        for table in spark.catalog.listTables():
            if table.isTemporary:
                spark.catalog.dropTempView(table.name)
        if pyspark:
            code = blocks(doc)["open", "pyspark"]
            exec(code, {"spark": spark, "DIR": directory.resolve().as_posix()})
            opening = []
        else:
            opening = _opening("spark", directory, doc)
        for statement in opening + _views(doc):
            self._sql(statement)

    def _sql(self, statement: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._spark.sql(statement).collect()]

    def rows(self, figure: str) -> list[tuple[Any, ...]]:
        return self._sql(_figure(figure, self._doc))


def spark_engine(
    spark: SparkSession, directory: Path, doc: Path = DOC, *, pyspark: bool = False
) -> Engine:
    """The dataset at ``directory`` opened in ``spark`` (see :func:`start_spark`) by the
    page's Spark SQL statements, or by its PySpark code where ``pyspark``."""
    return _Spark(spark, directory, doc, pyspark)
