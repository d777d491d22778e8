"""``kinetrace.ops`` (issue 39): ``rules="tracelens"`` gives TraceLens's own figures on the
real traces it was run on (``../shared/notes/tracelens-ref``, TraceLens 171dd74): the same
instance rows of its family tables, the same FLOPs and bytes, the same kernel time;
``rules="exact"`` counts each operator once. (The exact figures of each family are tested
in Rust, ``src/tools/ops/exact.rs``, on a trace whose figures are worked by hand.)"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from support.real import REAL_DIR, require_real

REF_DIR = REAL_DIR.parent / "notes" / "tracelens-ref"


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
    rows = kinetrace.ops(real / "TraceLens" / trace, rules="tracelens")
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
    exact = kinetrace.ops(path)
    tracelens = kinetrace.ops(path, rules="tracelens")
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
    modelled = {r["uid"] for r in exact if r["table"] != "unmodelled"}
    assert modelled <= {r["uid"] for r in tracelens}
    # Every GPU activity under an operator is in one exact row: none twice.
    kernels = [k for r in exact for k in r["kernel_uids"]]
    assert len(kernels) == len(set(kernels)) > 0


def test_unknown_rules_and_files_that_are_not_traces_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rules must be 'exact' or 'tracelens'"):
        kinetrace.ops(tmp_path / "t.json", rules="hta")  # type: ignore[arg-type]
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X",')
    with pytest.raises(kinetrace.TraceFormatError):
        kinetrace.ops(bad)
    with pytest.raises(OSError):
        kinetrace.ops(tmp_path / "absent.json", rules="tracelens")
