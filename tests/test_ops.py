"""``kinetrace.ops`` and ``kinetrace ops``: ``rules="tracelens"`` gives
TraceLens's own figures on the real traces it was run on (``../shared/notes/tracelens-ref``,
TraceLens 171dd74): the same instance rows of its family tables, the same FLOPs and bytes,
the same kernel time; ``rules="exact"`` counts each operator once. The roofline of a row is
checked on a hand-worked trace, the groups' ranking, the GPU found in real traces, the
command line on a real trace and ``--json``'s keys against docs/ops.md. (The exact figures
of each family are tested in Rust, ``src/tools/ops/exact.rs``, on a trace whose figures are
worked by hand; the GPU lookups in ``src/tools/ops/peaks.rs`` and ``roofline.rs``.)"""

from __future__ import annotations

import bisect
import dataclasses
import gzip
import itertools
import json
import math
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace import OpRow, _kinetrace
from kinetrace._cli.ops import WIDTH
from kinetrace._tools.ops import Rules
from support.big import write_big_trace
from support.cli import run
from support.interrupts import Sigint, assert_prompt
from support.real import REAL_DIR, real_params, real_trace, require_real

REF_DIR = REAL_DIR.parent / "notes" / "tracelens-ref"
ROOT = Path(__file__).resolve().parent.parent
OWLV2_H100 = Path("TraceLens") / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz"


def _references() -> list[Any]:
    index = REF_DIR / "index.json"
    if not index.is_file():
        return [
            pytest.param(
                None, None, id="no-reference", marks=pytest.mark.skip(reason=f"{index} is absent")
            )
        ]
    traces = json.loads(index.read_text())["traces"]
    return [pytest.param(trace, entry["json"] + ".gz", id=trace) for trace, entry in traces.items()]


def _key(table: str, bwd: bool, uid: int) -> tuple[str, bool, int]:
    return (table, bwd, uid)


@pytest.mark.parametrize(("trace", "ref_file"), _references())
def test_tracelens_rules_give_tracelens_rows(trace: str, ref_file: str) -> None:
    real = require_real()
    with gzip.open(REF_DIR / ref_file) as f:
        reference = [
            r for r in json.load(f) if r["level"] == "instance" and r["table"] != "unified"
        ]
    expected = {_key(r["table"], r["bwd"], r["UID"]): r for r in reference}
    rows = kinetrace.ops(real / "TraceLens" / trace, rules="tracelens").rows
    got = {_key(r["table"], r["bwd"], r["uid"]): r for r in rows}
    assert len(got) == len(rows)
    assert sorted(got) == sorted(expected)
    for key, r in got.items():
        ref = expected[key]
        assert r["name"] == ref["name"]
        assert r["flops"] is not None
        assert math.isclose(r["flops"], ref["GFLOPS"] * 1e9, rel_tol=1e-9, abs_tol=0), key
        if ref["Data Moved (MB)"] is None:
            assert r["bytes"] is None, key
        else:
            assert r["bytes"] is not None
            assert math.isclose(r["bytes"], ref["Data Moved (MB)"] * 2**20, rel_tol=1e-9), key
        # Both sum the same float intervals in the same order: equal, not close.
        assert r["kernel_time_us"] == ref["Kernel Time (µs)"], key
        assert r["kernel_uids"] == ref["kernel_uids"], key
        # The exact figure: TraceLens's float ends at ~4e12 µs are 2^-11 µs (~0.5 ns) apart,
        # so it is off by at most ~1 ns per interval summed.
        slack = 1e-3 * max(1, len(r["kernel_uids"]))
        assert abs(r["kernel_time_ns"] / 1e3 - r["kernel_time_us"]) <= slack, key


def test_exact_rules_count_each_operator_once() -> None:
    """On a ViT trace: TraceLens counts every layer norm twice (``layer_norm`` and the
    ``native_layer_norm`` inside it); ``exact`` once. The GEMM FLOPs rule is the same."""
    path = (
        require_real()
        / "TraceLens"
        / "h100"
        / "google_owlv2-large-patch14-ensemble__1016001.json.gz"
    )
    exact = kinetrace.ops(path).rows
    tracelens = kinetrace.ops(path, rules="tracelens").rows
    names = [r["name"] for r in exact]
    assert "aten::native_layer_norm" not in names
    assert (
        names.count("aten::layer_norm")
        == [r["name"] for r in tracelens].count("aten::layer_norm")
        > 0
    )
    tl_gemm = {r["uid"]: r for r in tracelens if r["table"] == "GEMM"}
    gemm = [r for r in exact if r["table"] == "GEMM"]
    assert len(gemm) == len(tl_gemm)
    for r in gemm:
        assert r["flops"] == tl_gemm[r["uid"]]["flops"]
        assert r["kernel_time_us"] == tl_gemm[r["uid"]]["kernel_time_us"]
    # TraceLens's families are modelled where TraceLens models them; the exact rules'
    # memory-bound ones (softmax, gelu, ...) besides.
    modelled = {r["uid"] for r in exact if r["table"] != "unmodelled"}
    tl_uids = {r["uid"] for r in tracelens}
    beyond = {r["name"] for r in exact if r["uid"] in modelled - tl_uids}
    assert "aten::_softmax" in beyond and not beyond & {r["name"] for r in tracelens}
    # Every GPU activity under an operator is in one exact row: none twice.
    kernels = [k for r in exact for k in r["kernel_uids"]]
    assert len(kernels) == len(set(kernels)) > 0


GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime"}


def _launched_under_operators(events: list[dict[str, Any]]) -> set[int]:
    """The GPU activities (event indices) whose launch runs inside a CPU operator: the
    launch of an activity is the first runtime call (file order) with its ``correlation``,
    as ``summary`` reads it, whatever its flow says; inside means within the operator's
    span on its thread, ending at most 1 µs after it (a child's time may bleed so far)."""
    ops: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    first_call: dict[int, dict[str, Any]] = {}
    activities: list[tuple[int, int]] = []
    for i, e in enumerate(events):
        if e.get("ph") != "X" or "dur" not in e or "ts" not in e:
            continue
        cat, args = e.get("cat"), e.get("args") or {}
        correlation = args.get("correlation") if isinstance(args, dict) else None
        if cat == "cpu_op":
            ops.setdefault((e.get("pid"), e.get("tid")), []).append(
                (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            )
        elif cat in RUNTIME_CATS and isinstance(correlation, int) and correlation != -1:
            first_call.setdefault(correlation, e)
        elif cat in GPU_CATS and isinstance(correlation, int) and correlation != -1:
            activities.append((i, correlation))

    # Per thread the operators' starts, sorted, and the latest end among those started so far.
    reach: dict[tuple[Any, Any], tuple[list[float], list[float]]] = {}
    for thread, spans in ops.items():
        spans.sort()
        ends = list(itertools.accumulate((e for _, e in spans), max))
        reach[thread] = ([s for s, _ in spans], ends)

    def inside(call: dict[str, Any]) -> bool:
        start = float(call["ts"])
        end = start + float(call["dur"])
        starts, ends = reach.get((call.get("pid"), call.get("tid")), ([], []))
        before = bisect.bisect_right(starts, start)
        return before > 0 and end <= ends[before - 1] + 1.0

    return {i for i, c in activities if c in first_call and inside(first_call[c])}


@pytest.mark.parametrize("path", real_params())
def test_every_launched_activity_is_in_one_exact_row(path: Path) -> None:
    """Issue 48: a GPU activity whose launch runs in an operator is in exactly one row of
    the exact rules, its flow written right or not (MI300's ``hipMemsetAsync`` memsets
    carry two flow ends and no start): rows and ``summary`` read one set of launches; and
    ``coverage`` splits the rows' GPU time."""
    found = kinetrace.ops(path)
    rows = list(found.rows)
    in_rows = [k for r in rows for k in r["kernel_uids"]]
    assert len(in_rows) == len(set(in_rows))
    assert set(in_rows) == _launched_under_operators(real_trace(path)["traceEvents"])
    # So the coverage's four parts split the rows' time, and the modelled part is the
    # modelled rows' (collectives aside: they are never modelled here).
    c = found.coverage
    assert c is not None
    parts = c["modelled_us"] + c["unmodelled_us"] + c["without_shapes_us"] + c["collectives_us"]
    assert parts == pytest.approx(sum(r["kernel_time_ns"] for r in rows) / 1e3, abs=1e-3)
    modelled = sum(r["kernel_time_ns"] for r in rows if r["table"] != "unmodelled") / 1e3
    assert c["modelled_us"] == pytest.approx(modelled, abs=1e-3)
    with_shapes = c["modelled_us"] + c["unmodelled_us"]
    share = None if with_shapes == 0 else c["modelled_us"] / with_shapes
    assert found.modelled_share == pytest.approx(share)


@pytest.mark.parametrize(
    ("trace", "before", "now"),
    [
        # The attention's softmax held half of OWLv2's GPU time.
        (OWLV2_H100, 0.535, 0.999),
        (
            Path("TraceLens") / "mi300" / "ddp_resnet18_no_pool" / "train_resnet18.json.gz",
            0.942,
            0.999,
        ),
        (Path("amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"), 0.814, 0.943),
        (Path("hta") / "mtia_trace_single_rank__mtia_rank_0.json.gz", 0.848, 0.925),
        (Path("new") / "SwitchTransformers" / "trace.json", 0.952, 0.982),
    ],
    ids=["owlv2-h100", "resnet18-mi300", "minitoy-mi250", "mtia", "switch-transformers"],
)
def test_memory_bound_operators_have_models(trace: Path, before: float, now: float) -> None:
    """Issue 48: the exact rules model the memory-bound operators that take GPU time
    (softmax, activations, fills, pooling, losses, ...): the modelled share of these traces
    rose from ``before`` (TraceLens's families alone) to at least ``now``."""
    path = require_real() / trace
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    share = kinetrace.ops(path).modelled_share
    assert share is not None and share >= now > before


def test_unknown_rules_and_files_that_are_not_traces_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rules must be 'exact' or 'tracelens'"):
        kinetrace.ops(tmp_path / "t.json", rules="hta")  # type: ignore[arg-type]
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X",')
    with pytest.raises(kinetrace.TraceFormatError):
        kinetrace.ops(bad)
    with pytest.raises(OSError):
        kinetrace.ops(tmp_path / "absent.json", rules="tracelens")


#: One addmm (bf16, [64, 128] x [128, 256] + bias [256]) that ran 2 µs on device 0, an
#: H100 SXM; and one mul (bf16, [1024, 1024] x 2) of 10 µs, twice.
ROOF_TRACE = {
    "deviceProperties": [
        {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045215232, "numSms": 132}
    ],
    "traceEvents": [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10,
            "args": {
                "Input Dims": [[256], [64, 128], [128, 256], [], []],
                "Input type": [
                    "c10::BFloat16",
                    "c10::BFloat16",
                    "c10::BFloat16",
                    "Scalar",
                    "Scalar",
                ],
                "Concrete Inputs": ["", "", "", "1", "1"],
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"correlation": 1},
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 1},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 100},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 100,
            "dur": 2,
            "args": {"correlation": 1, "device": 0},
        },
    ]
    + [
        ev
        for i, ts in ((2, 20), (3, 40))
        for ev in (
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mul",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 10,
                "args": {
                    "Input Dims": [[1024, 1024], [1024, 1024]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 1,
                "args": {"correlation": i},
            },
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": ts + 1},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 0, "tid": 7, "ts": 100 * i},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "mul",
                "pid": 0,
                "tid": 7,
                "ts": 100 * i,
                "dur": 10,
                "args": {"correlation": i, "device": 0},
            },
        )
    ],
}


@pytest.fixture
def roof_trace(tmp_path: Path) -> Path:
    path = tmp_path / "roof.json"
    path.write_text(json.dumps(ROOF_TRACE))
    return path


def test_roofline_of_a_hand_worked_row(roof_trace: Path) -> None:
    found = kinetrace.ops(roof_trace)
    assert found.gpu is not None and found.gpu["key"] == "h100-sxm" and found.note is None
    gemm = found.rows[0]
    # FLOPs 2 M N K + M N = 2 * 64 * 256 * 128 + 64 * 256 = 4,210,688; bytes (bf16) A 16 KiB,
    # B 64 KiB, out 32 KiB, bias 512 B = 115,200.
    assert (gemm["name"], gemm["flops"], gemm["bytes"]) == ("aten::addmm", 4210688, 115200)
    assert gemm["precision"] == "bf16" and gemm["peak_tflops"] == 989.5
    assert gemm["time_us"] == 2.0
    assert math.isclose(gemm["tflops_s"], 4210688 / 2e-6 / 1e12)  # 2.105 TFLOPS/s
    assert math.isclose(gemm["tbs"], 115200 / 2e-6 / 1e12)  # 0.0576 TB/s
    assert math.isclose(gemm["flops_per_byte"], 4210688 / 115200)  # 36.55
    # I x W = 36.55 * 3.35 = 122.4 TFLOPS < 989.5: memory bound, at 115,200 B / 3.35 TB/s
    # = 0.0344 µs of the 2 µs: 1.72 % of the roofline.
    assert gemm["bound"] == "memory"
    assert math.isclose(gemm["roof_tflops"], 4210688 / 115200 * 3.35)
    assert math.isclose(gemm["roof_time_us"], 115200 / 3.35e6)
    assert math.isclose(gemm["roof_pct"], 100 * 115200 / 3.35e6 / 2)
    assert math.isclose(gemm["roof_pct"], 100 * gemm["tflops_s"] / gemm["roof_tflops"])
    # The mul: elementwise, at the fp32 vector peak whatever its dtype.
    assert found.rows[1]["precision"] == "fp32" and found.rows[1]["peak_tflops"] == 67.0


def test_groups_ranked_by_the_time_they_could_save(roof_trace: Path) -> None:
    groups = kinetrace.ops(roof_trace).groups
    # The two muls: 1 Mi FLOPs, 6 MiB each at 3.35 TB/s = 1.878 µs of 10: 8.12 µs
    # saveable each; the addmm 2 - 0.0344 = 1.966 µs.
    assert [(g.name, g.count) for g in groups] == [("aten::mul", 2), ("aten::addmm", 1)]
    mul = groups[0]
    assert (mul.time_us, mul.mean_us, mul.median_us, mul.min_us, mul.max_us) == (
        20.0,
        10.0,
        10.0,
        10.0,
        10.0,
    )
    at_roof = 2 * 3 * 2**21 / 3.35e6
    assert math.isclose(mul.roof_time_us or 0, at_roof)
    assert math.isclose(mul.saveable_us or 0, 20 - at_roof)
    assert mul.bound == "memory" and mul.flops == 2**20 and mul.bytes == 3 * 2**21
    assert math.isclose(groups[1].saveable_us or 0, 2 - 115200 / 3.35e6)
    # No GPU: no roofline, the same rates.
    plain = tmp_copy_without_devices(roof_trace)
    found = kinetrace.ops(plain)
    assert found.gpu is None and "no deviceProperties" in (found.note or "")
    assert all(g.saveable_us is None and g.roof_pct is None for g in found.groups)
    assert found.rows[0]["tflops_s"] == kinetrace.ops(roof_trace).rows[0]["tflops_s"]
    # --gpu overrides the trace's: an A100 SXM 40GB's 1.555 TB/s.
    a100 = kinetrace.ops(roof_trace, gpu="a100-sxm4-40gb")
    assert a100.gpu is not None and a100.gpu_from == "--gpu"
    assert math.isclose(a100.groups[0].roof_time_us or 0, 2 * 3 * 2**21 / 1.555e6)
    with pytest.raises(ValueError, match="unknown GPU 'h300'; known: v100-sxm2-32gb, "):
        kinetrace.ops(roof_trace, gpu="h300")


def tmp_copy_without_devices(path: Path) -> Path:
    trace = json.loads(path.read_text())
    del trace["deviceProperties"]
    out = path.with_name("plain.json")
    out.write_text(json.dumps(trace))
    return out


@pytest.mark.parametrize(
    ("trace", "key"),
    [
        (OWLV2_H100, "h100-sxm"),
        (Path("TraceLens") / "b200" / "eager_trace.json.gz", "b200"),
        # Its kernels ran on device 2; the one deviceProperties entry is id 0.
        (
            Path("TraceLens") / "mi300" / "google_owlv2-large-patch14-ensemble__1016001.json.gz",
            "mi300x",
        ),
    ],
)
def test_the_gpu_of_real_traces(trace: Path, key: str) -> None:
    found = kinetrace.ops(require_real() / trace)
    assert found.gpu is not None and found.gpu["key"] == key, found.note
    assert any(r["roof_pct"] is not None for r in found.rows)


def test_cli_table_on_a_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("ops", require_real() / OWLV2_H100) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert "GPU: NVIDIA H100 SXM5 80GB (h100-sxm" in out
    start = next(i for i, line in enumerate(lines) if line.startswith("operator")) + 1
    table = lines[start:]
    assert len(table) == 10
    # The attention's softmax (16 x 5185 x 5185, memory-bound: half the GPU time) and the
    # GEMMs (bmm of the attention, addmm of the MLP) are where the time is to save.
    assert table[0].startswith("aten::_softmax")
    assert sum(line.startswith(("aten::bmm", "aten::addmm")) for line in table[:5]) >= 3
    # The save column, from the right: NUMBER UNIT TFLOP/s TB/s roof bound.
    scale = {"ms": 1e3, "us": 1.0, "s": 1e6}
    saves = [float(t[-6]) * scale[t[-5]] for t in (line.split() for line in table)]
    assert saves == sorted(saves, reverse=True)


def _documented_keys() -> dict[str, set[str]]:
    """The key lists of docs/ops.md's ``--json`` section: ``- WHERE: `a`, `b`, ...``."""
    text = (ROOT / "docs" / "ops.md").read_text()
    section = text.split("`--json` prints one object")[1].split("\n## ")[0]
    lists: dict[str, set[str]] = {}
    for item in section.split("\n- ")[1:]:
        where, _, keys = item.partition(":")
        lists[where.split("`")[1] if "`" in where else where] = set(
            re.findall(r"`([a-z_]+)`", keys)
        )
    return lists


def test_json_keys_are_the_documented_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("ops", require_real() / OWLV2_H100, "--json", "--rules", "tracelens") == 0
    found = json.loads(capsys.readouterr().out)
    documented = _documented_keys()
    assert set(found) == documented["top level"]
    assert set(found["gpu"]) == documented["gpu"]
    assert set(found["rows"][0]) == documented["rows"]
    assert set(found["groups"][0]) == documented["groups"]
    assert found["rules"] == "tracelens" and any(r["bwd"] is False for r in found["rows"])
    assert found["coverage"] is None and found["modelled_share"] is None
    assert run("ops", require_real() / OWLV2_H100, "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found["coverage"]) == documented["coverage"]
    assert found["modelled_share"] == found["coverage"]["modelled_share"]


DLRM_RANKS = Path("param") / "dlrm_kineto"


def test_a_folder_of_ranks_is_each_rank_read_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder of an 8-rank job: its rows are each rank's own report's (rank by rank, the
    ranks `summary` gives the files), its groups count the instances of every rank, and
    the files read at once give what one at a time gives."""
    folder = require_real() / DLRM_RANKS
    found = kinetrace.ops(folder, threads=2)
    summary = kinetrace.summarize(folder)
    assert found.sources == tuple(r.source for r in summary.ranks)
    assert found.ranks == tuple(r.rank for r in summary.ranks) == tuple(range(8))
    expected: list[OpRow] = []
    for source, rank in zip(found.sources, found.ranks, strict=True):
        alone = kinetrace.ops(source)
        assert alone.ranks == (rank,) and alone.rows
        expected += alone.rows
    assert list(found.rows) == expected
    assert {r["rank"] for r in found.rows} == set(range(8))
    counts: dict[tuple[str, bool, str | None, str | None], int] = {}
    for r in expected:
        key = (r["name"], r["bwd"], r["input_dims"], r["input_type"])
        counts[key] = counts.get(key, 0) + 1
    assert {(g.name, g.bwd, g.input_dims, g.input_type): g.count for g in found.groups} == counts
    assert list(kinetrace.ops(folder, threads=1).rows) == expected
    assert found.label.endswith("and 7 more ranks")
    assert run("ops", folder, "-j", "2") == 0
    assert capsys.readouterr().out.startswith(found.label + "\n")
    # Two files of one rank: refused, as summary and merge refuse them.
    first = folder / os.path.basename(found.sources[0])
    for name in ("a.json", "b.json"):
        shutil.copy(first, tmp_path / name)
    with pytest.raises(ValueError, match=r"are both rank 0: give ops one rank's file at a time"):
        kinetrace.ops(tmp_path)


def test_ctrl_c_while_the_ranks_are_read(tmp_path: Path) -> None:
    """Ctrl-C reaches ops while its readers are busy (two ~60 MB ranks read at once, 20 ms
    in): a prompt KeyboardInterrupt, not a wait for every read."""
    for rank in range(2):
        write_big_trace(tmp_path / f"r{rank}.json", 60 << 20, rank=rank, world_size=2)
    with Sigint().installed() as sigint:
        sigint.after(0.02)
        latency = sigint.expect(lambda: kinetrace.ops(tmp_path, threads=2))
    assert_prompt(latency)


@pytest.mark.parametrize("rules", ["exact", "tracelens"])
def test_rows_json_is_json_dumps_of_each_row(rules: Rules) -> None:
    """``--json``'s rows, made natively without a dict, are the text ``json.dumps`` gives
    each row's dict: floats in exponent form too (the DLRM job's tiny rates, 4e-06 TFLOPS/s),
    escaped strings, lists, nulls; a report whose rows are a plain list gives the same."""
    for source in (require_real() / OWLV2_H100, require_real() / DLRM_RANKS):
        found = kinetrace.ops(source, rules=rules)
        expected = ",\n  ".join(json.dumps(r) for r in found.rows)
        assert ",\n  ".join(found.rows_json(chunk=7)) == expected
        assert "e-0" in expected or source != require_real() / DLRM_RANKS
        plain = dataclasses.replace(found, rows=list(found.rows))
        assert ",\n  ".join(plain.rows_json(chunk=7)) == expected
    rows = kinetrace.ops(require_real() / DLRM_RANKS, rules=rules).rows
    assert isinstance(rows, _kinetrace.OpRows) and isinstance(rows, Sequence)
    last = rows.json_text(len(rows) - 1, 10**9)
    assert rows.json_text(5, 3) == "" and last.count('"uid": ') == 1
