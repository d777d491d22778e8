"""``kinetrace parquet`` / ``to_parquet`` / ``export_parquet``: the dataset of every real
trace holds every event exactly once, with its fields and args, as the source states them
(read back with pyarrow, compared with the source parsed by Python's ``json`` with exact
decimals); damaged sources, existing folders and rank clashes are refused with nothing left
behind. The SQL over the dataset is ``tests/test_parquet_sql.py``'s."""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace import _kinetrace
from support import cli
from support.real import REAL_DIR, real_params, real_text, require_real

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (requirements-dev.txt) is absent")
ds = pytest.importorskip("pyarrow.dataset", reason="pyarrow (requirements-dev.txt) is absent")

TABLES = ("events", "flows", "tracks", "meta")

DOCS = Path(__file__).resolve().parents[1] / "docs" / "parquet.md"


def read_table(root: Path, table: str) -> list[dict[str, Any]]:
    """Every row of ``root/table`` as pyarrow reads the Hive-partitioned folder."""
    dataset = ds.dataset(root / table, format="parquet", partitioning="hive")
    rows: list[dict[str, Any]] = dataset.to_table().to_pylist()
    return rows


def ns(value: Any) -> int | None:
    """µs as JSON states them, in whole ns (floored), exactly."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        return None
    return int((Decimal(value) * 1000).to_integral_value(rounding="ROUND_FLOOR"))


def split_ids(value: Any) -> tuple[int | None, str | None]:
    """(``pid``, ``pid_text``) as the dataset keeps a ``pid``/``tid``."""
    if value is None:
        return None, None
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    if isinstance(value, str):
        return None, value
    return None, json.dumps(value)


def leftovers(parent: Path) -> list[str]:
    """Temporary folders of a conversion left in ``parent``."""
    return [n for n in os.listdir(parent) if n.startswith(".kinetrace") or "kinetrace" in n]


def expected(trace: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """The source's elements by table and index in ``traceEvents``."""
    out: dict[str, dict[int, dict[str, Any]]] = {"events": {}, "flows": {}, "tracks": {}}
    for i, ev in enumerate(trace["traceEvents"]):
        if ev.get("ph") == "M":
            out["tracks"][i] = ev
        elif ev.get("ph") in ("s", "t", "f") and "id" in ev:
            out["flows"][i] = ev
        else:
            out["events"][i] = ev
    return out


def assert_row_is_event(row: dict[str, Any], ev: dict[str, Any], base: int) -> None:
    assert row["ph"] == ev["ph"]
    assert row["name"] == ev.get("name")
    assert row["cat"] == ev.get("cat")
    ts = ns(ev.get("ts"))
    assert row["ts_ns"] == (None if ts is None else base + ts)
    assert row["dur_ns"] == ns(ev.get("dur"))
    assert (row["pid"], row["pid_text"]) == split_ids(ev.get("pid"))
    assert (row["tid"], row["tid_text"]) == split_ids(ev.get("tid"))
    args = row["args"]
    assert (None if args is None else json.loads(args, parse_float=Decimal)) == ev.get("args")


@pytest.mark.parametrize("path", real_params())
def test_every_real_trace_as_tables(path: Path, tmp_path: Path) -> None:
    """Each event once with its fields and args; flows and metadata apart; time order."""
    text = real_text(path)
    try:
        trace = json.loads(text, parse_float=Decimal)
    except ValueError:
        trace = None
    out = tmp_path / "dataset"
    if trace is None or not isinstance(trace, dict):
        with pytest.raises(kinetrace.TraceFormatError):
            kinetrace.to_parquet(path, out)
        assert not out.exists() and leftovers(tmp_path) == []
        return
    result = kinetrace.to_parquet(path, out)
    want = expected(trace)
    (rank,) = result.ranks
    assert (rank.events, rank.flows, rank.tracks) == tuple(len(want[t]) for t in want)
    (meta,) = read_table(out, "meta")
    base = int(trace.get("baseTimeNanoseconds", 0))
    assert meta["base_time_ns"] == base and meta["kinetrace_schema"] == 2
    assert (meta["events"], meta["flows"], meta["tracks"]) == (rank.events, rank.flows, rank.tracks)
    assert meta["rank"] == rank.rank
    header = json.loads(meta["header"], parse_float=Decimal) if meta["header"] else {}
    assert header == {k: v for k, v in trace.items() if k != "traceEvents"}
    for table in ("events", "flows", "tracks"):
        rows = read_table(out, table)
        assert sorted(r["seq"] for r in rows) == sorted(want[table])
        times = [(r["ts_ns"] is not None, r["ts_ns"] or 0, r["seq"]) for r in rows]
        assert times == sorted(times), f"{table}: rows not in time order"
        for row in rows:
            assert row["rank"] == rank.rank
            assert_row_is_event(row, want[table][row["seq"]], base)


def test_typed_args_and_extra_members(tmp_path: Path) -> None:
    """The typed columns take the args as docs/parquet.md says; other members go to
    ``extra``; a flow end names the event it binds to."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "host"}},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 2,
            "ts": 10.5,
            "dur": 3.25,
            "args": {"correlation": 7, "External id": "12", "stream": 7.5},
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 1, "tid": 2, "ts": 10.5},
        {
            "ph": "X",
            "cat": "kernel",
            "name": 'k\u00e9"q',
            "pid": 0,
            "tid": "stream 7",
            "ts": 1.000001,
            "dur": 2,
            "tts": 5,
            "cname": "good",
            "args": {
                "correlation": 7,
                "stream": 7,
                "device": 0,
                "grid": [1, 2, 3],
                "block": [4, 1, 1],
                "Input Dims": [[2, 3]],
                "Collective name": "allreduce",
                "In msg nelems": 10,
                "Out msg nelems": "11.00",
                "Group size": 2,
                "dtype": "Float",
                "Process Group Name": "0",
                "stream_": 9,
            },
        },
        {
            "ph": "f",
            "bp": "e",
            "cat": "ac2g",
            "name": "ac2g",
            "id": 7,
            "pid": 0,
            "tid": "stream 7",
            "ts": 1.000001,
        },
        {"ph": "i", "name": "no args", "pid": "Spans", "tid": 1.5, "ts": 0, "s": "t"},
        {
            "ph": "X",
            "name": "args twice",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 1,
            "args": {"stream": 3, "device": 1},
            "args_": {"stream": 4},
        },
    ]
    src = tmp_path / "rank3.json"
    # A key written twice (the kernel's "stream"): the typed column takes the last.
    text = json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1000000})
    src.write_text(text.replace('"stream_"', '"stream"').replace('"args_"', '"args"'))
    out = tmp_path / "ds"
    (rank,) = kinetrace.to_parquet(src, out).ranks
    assert (rank.rank, rank.rank_from) == (3, "file name")
    rows = {r["seq"]: r for r in read_table(out, "events")}
    assert [r["seq"] for r in read_table(out, "events")] == [5, 3, 1, 6]  # time order
    twice = rows[6]  # an args object written twice: the last, as a viewer reads it
    assert (twice["stream"], twice["device"], twice["args"]) == (4, None, '{"stream": 4}')
    runtime, kernel, instant = rows[1], rows[3], rows[5]
    assert (runtime["ts_ns"], runtime["dur_ns"]) == (1010500, 3250)
    assert (runtime["correlation"], runtime["external_id"]) == (7, 12)
    assert runtime["stream"] is None  # not a whole number
    assert kernel["name"] == 'k\u00e9"q' and kernel["ts_ns"] == 1001000
    assert (kernel["tid"], kernel["tid_text"]) == (None, "stream 7")
    assert (kernel["stream"], kernel["device"]) == (9, 0)  # of a key written twice, the last
    assert kernel["args"].count('"stream"') == 2  # args as written
    assert (kernel["grid"], kernel["block"], kernel["input_dims"]) == (
        "[1, 2, 3]",
        "[4, 1, 1]",
        "[[2, 3]]",
    )
    assert (kernel["collective_name"], kernel["dtype"], kernel["process_group_name"]) == (
        "allreduce",
        "Float",
        "0",
    )
    assert (kernel["in_msg_nelems"], kernel["out_msg_nelems"], kernel["group_size"]) == (10, 11, 2)
    assert json.loads(kernel["extra"]) == {"tts": 5, "cname": "good"}
    assert runtime["extra"] is None and runtime["grid"] is None
    assert (instant["pid"], instant["pid_text"], instant["tid_text"]) == (None, "Spans", "1.5")
    assert instant["args"] is None and json.loads(instant["extra"]) == {"s": "t"}
    flows = {r["seq"]: r for r in read_table(out, "flows")}
    assert (flows[2]["id"], flows[2]["event_seq"], flows[2]["bp"]) == ("7", 1, None)
    assert (flows[4]["id"], flows[4]["event_seq"], flows[4]["bp"]) == ("7", 3, "e")
    (track,) = read_table(out, "tracks")
    assert (track["name"], track["value"], track["pid"]) == ("process_name", "host", 1)


def small_trace(path: Path, rank: int | None = None) -> Path:
    header: dict[str, Any] = {} if rank is None else {"distributedInfo": {"rank": rank}}
    event = {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    path.write_text(json.dumps({**header, "traceEvents": [event]}))
    return path


def test_a_damaged_source_leaves_nothing(tmp_path: Path) -> None:
    good = small_trace(tmp_path / "a.json", rank=0)
    bad = tmp_path / "b.json"
    bad.write_text('{"distributedInfo": {"rank": 1}, "traceEvents": [{"ph": "X", "ts": 1},')
    out = tmp_path / "ds"
    with pytest.raises(kinetrace.TraceFormatError) as info:
        kinetrace.to_parquet([good, bad], out)
    assert info.value.path == str(bad) and info.value.offset is not None
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]
    assert cli.run("parquet", good, bad, "-o", out) == 1
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]


def test_an_existing_folder_is_replaced_only_when_forced_and_a_dataset(tmp_path: Path) -> None:
    src = small_trace(tmp_path / "t.json")
    out = tmp_path / "ds"
    kinetrace.to_parquet(src, out)
    with pytest.raises(FileExistsError):
        kinetrace.to_parquet(src, out)
    assert cli.run("parquet", src, "-o", out) == 1
    stale = out / "events" / "rank=0" / "stale.parquet"
    stale.write_bytes(b"")
    assert cli.run("parquet", src, "-o", out, "--force") == 0
    assert not stale.exists() and (out / "_kinetrace.json").is_file()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a kinetrace dataset"):
        kinetrace.to_parquet(src, precious, force=True)
    assert os.listdir(precious) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    kinetrace.to_parquet(src, empty, force=True)
    assert (empty / "_kinetrace.json").is_file()
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".")) == []


def test_two_sources_of_one_rank_are_refused(tmp_path: Path) -> None:
    a = small_trace(tmp_path / "a.json", rank=2)
    b = small_trace(tmp_path / "b.json", rank=2)
    with pytest.raises(ValueError, match="are both rank 2"):
        kinetrace.to_parquet([a, b], tmp_path / "ds")
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]


def test_a_cancelled_conversion_leaves_nothing(tmp_path: Path) -> None:
    src = small_trace(tmp_path / "t.json")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(KeyboardInterrupt):
        kinetrace.to_parquet(src, tmp_path / "ds", cancel=cancel)
    assert sorted(os.listdir(tmp_path)) == ["t.json"]


def test_the_eight_ranks_as_one_dataset(tmp_path: Path) -> None:
    folder = REAL_DIR / "param" / "dlrm_kineto"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    result = kinetrace.to_parquet(folder, tmp_path / "ds")
    assert sorted(r.rank for r in result.ranks) == list(range(8))
    assert sorted(os.listdir(tmp_path / "ds" / "events")) == [f"rank={r}" for r in range(8)]
    rows = read_table(tmp_path / "ds", "events")
    for r in result.ranks:
        assert sum(1 for row in rows if row["rank"] == r.rank) == r.events


def test_export_parquet_holds_what_the_exported_trace_holds(tmp_path: Path) -> None:
    """A profile straight to a dataset equals the dataset of its exported ``.json``."""
    torch = pytest.importorskip("torch")
    with torch.profiler.profile() as prof:
        for _ in range(20):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8)).relu()
    kinetrace.export_chrome_trace(prof, tmp_path / "trace.json")
    via_json = kinetrace.to_parquet(tmp_path / "trace.json", tmp_path / "via-json")
    direct = kinetrace.export_parquet(prof, tmp_path / "direct")
    (a,), (b,) = via_json.ranks, direct.ranks
    assert (a.events, a.flows, a.tracks) == (b.events, b.flows, b.tracks) and a.events > 40
    assert b.source == "<profile>"
    for table in ("events", "flows", "tracks"):
        assert read_table(tmp_path / "via-json", table) == read_table(tmp_path / "direct", table)
    with pytest.raises(FileExistsError):
        kinetrace.export_parquet(prof, tmp_path / "direct")
    assert sorted(os.listdir(tmp_path)) == ["direct", "trace.json", "via-json"]


def documented_columns() -> dict[str, dict[str, str]]:
    """Each table's columns and their types (``INT64``, ``STRING``, ``DOUBLE``, ``BOOLEAN``)
    as docs/parquet.md states them: the tables of ``events``, ``flows`` and ``ops`` (a flows
    row without a type is "as in ``events``"), the prose of ``tracks`` and ``meta``."""
    text = DOCS.read_text()
    tables: dict[str, dict[str, str]] = {}
    for table in ("events", "flows", "ops"):
        section = text.split(f"### `{table}`\n", 1)[1].split("\n### ", 1)[0]
        columns: dict[str, str] = {}
        for line in section.splitlines():
            if not line.startswith("| `"):
                continue
            cells = [c.strip() for c in line.strip("|").split("|")]
            for name in re.findall(r"`([a-z_]+)`", cells[0]):
                columns[name] = cells[1] or tables["events"][name]
        tables[table] = columns
    ints, strs = "INT64", "STRING"
    tables["tracks"] = {
        **{n: ints for n in ("seq", "pid", "tid", "ts_ns", "dur_ns")},
        **{n: strs for n in ("ph", "name", "cat", "pid_text", "tid_text", "value")},
        **{n: strs for n in ("args", "extra")},
    }
    tracks = text.split("### `tracks`\n", 1)[1].split("\n### ", 1)[0]
    assert set(tables["tracks"]) == set(re.findall(r"`([a-z_]+)`[\s,.(]", tracks)) - {
        "process_name",
        "thread_name",
        "process_sort_index",
        "thread_sort_index",
        "process_labels",
    }, tracks
    meta = text.split("### `meta`\n", 1)[1]
    assert "`base_time_ns` (INT64)" in meta and "(INT64: the rows" in meta
    tables["meta"] = {
        **{n: ints for n in ("base_time_ns", "events", "flows", "tracks")},
        **{n: ints for n in ("json_bytes", "kinetrace_schema")},
        **{n: strs for n in ("source", "rank_from", "schema_version", "device_properties")},
        **{n: strs for n in ("distributed_info", "header")},
    }
    return tables


#: Each documented type as Parquet stores it: (physical, logical, converted type).
PARQUET_TYPES = {
    "INT64": ("INT64", "NONE", "NONE"),
    "STRING": ("BYTE_ARRAY", "STRING", "UTF8"),
    "DOUBLE": ("DOUBLE", "NONE", "NONE"),
    "BOOLEAN": ("BOOLEAN", "NONE", "NONE"),
}


def test_parquet_types_and_metadata_are_the_documented_ones(tmp_path: Path) -> None:
    """Every column of every table has the Parquet type docs/parquet.md gives it: INT64 a
    plain INT64 (no timestamp or other logical type), STRING a BYTE_ARRAY annotated UTF-8;
    only ``seq`` required; ``rank`` not in the files; each file's key-value metadata holds
    ``kinetrace.schema`` with the documented version."""
    version = re.search(r"holds `kinetrace\.schema = (\d+)`", DOCS.read_text())
    assert version is not None and f"## Layout (schema version {version[1]})" in DOCS.read_text()
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 1.5, "dur": 2},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 2, "ts": 2},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    kinetrace.to_parquet(src, tmp_path / "ds")
    for table, columns in documented_columns().items():
        (path,) = (tmp_path / "ds" / table / "rank=0").glob("*.parquet")
        parquet = pq.ParquetFile(path)
        got = {}
        for i in range(len(parquet.schema)):
            column = parquet.schema.column(i)
            got[column.name] = (
                column.physical_type,
                column.logical_type.type,
                column.converted_type,
                column.max_definition_level,
            )
        want = {
            name: PARQUET_TYPES[kind] + (0 if name == "seq" else 1,)
            for name, kind in columns.items()
        }
        assert got == want, table
        assert parquet.metadata.metadata == {b"kinetrace.schema": version[1].encode()}, table
    (meta,) = read_table(tmp_path / "ds", "meta")
    assert meta["kinetrace_schema"] == int(version[1])


def test_export_parquets_fifo_folder_is_a_temporary_swept_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export_parquet``'s private folder (its FIFO, in the system's temporary directory)
    is named as every temporary is: one a killed export left there (a dead process's folder
    holding its FIFO) is removed by the next ``export_parquet``, whose own folder is gone
    when it returns."""
    torch = pytest.importorskip("torch")
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    probe = _kinetrace.create_temporary_dir(system_tmp, "probe")
    host = probe.name.split(".")[-3]  # .probe.{pid}.{host}.{random}.kinetrace-tmp
    probe.rmdir()
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    killed = system_tmp / f".kinetrace.{dead}.{host}.0123456789abcdef.kinetrace-tmp"
    killed.mkdir(mode=0o700)
    os.mkfifo(killed / "trace.json", 0o600)
    with torch.profiler.profile() as prof:
        torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    result = kinetrace.export_parquet(prof, tmp_path / "ds")
    assert result.events > 0
    # (torch keeps a folder of its own there too)
    assert [n for n in os.listdir(system_tmp) if n.endswith(".kinetrace-tmp")] == []


#: Real traces with GPUs of the peaks table (``tests/test_ops.py``'s): their ``ops`` table.
OPS_TRACES = (
    Path("TraceLens") / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz",
    Path("TraceLens") / "b200" / "eager_trace.json.gz",
)

#: The ``ops`` columns that are ``kinetrace.ops``' row keys of the same name; ``family`` is
#: its ``table``.
OPS_SAME = ("uid", "name", "bwd", "flops", "bytes", "kernel_time_ns", "input_dims", "input_type")


@pytest.mark.parametrize("trace", OPS_TRACES, ids=str)
def test_the_ops_table_is_kinetrace_ops_rows(trace: Path, tmp_path: Path) -> None:
    """The ``ops`` table holds ``kinetrace.ops``' rows (``exact`` rules) in its order, with
    its GPU, each row's peak and the GPU's bandwidth; the dataset is of schema version 2."""
    path = require_real() / trace
    report = kinetrace.ops(path)
    kinetrace.to_parquet(path, tmp_path / "ds")
    table = read_table(tmp_path / "ds", "ops")
    assert report.gpu is not None and len(report.rows) > 100
    got = [(*(r[k] for k in OPS_SAME), r["family"], r["device"]) for r in table]
    want = [(*(r[k] for k in OPS_SAME), r["table"], r["device"]) for r in report.rows]
    assert got == want
    peaks = {(r["gpu"], r["precision"], r["peak_tflops"], r["bandwidth_tbs"]) for r in table}
    bandwidth = report.gpu["bandwidth_tbs"]
    assert peaks == {
        (report.gpu["key"], r["precision"], r["peak_tflops"], bandwidth) for r in report.rows
    }
    assert {r["rank"] for r in table} == {0}
    (meta,) = read_table(tmp_path / "ds", "meta")
    assert meta["kinetrace_schema"] == 2
    marker = json.loads((tmp_path / "ds" / "_kinetrace.json").read_text())
    assert marker["schema"] == 2
