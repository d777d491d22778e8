"""``kinetrace diff``'s operators and renames (docs/diff.md): real CPU profiles made here (an
added matrix product is the first operator row, with its shapes; a trace against itself
changes nothing), own GPU time and self time on a hand-made GPU trace, and the rename rule
on real kernel names and constructed ones, in linear time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace import _kinetrace
from kinetrace._cli import status
from kinetrace._cli.diff import WIDTH
from kinetrace._tools.diff_names import family, pair_renames
from kinetrace._tools.summary import SummaryWarning
from support.big import write_big_trace
from support.cli import run
from support.interrupts import Sigint, assert_prompt
from support.profiles import sides_in_turns
from support.real import real_params

#: Profiles per side and recorded steps in each.
RUNS = 3
STEPS = 6
#: torch.mm calls of SIZE x SIZE per step; NEW adds one of EXTRA x EXTRA, 1.9 times the
#: others' FLOPs together, so that no noise of theirs (measured up to ~30% between two
#: profiles on 2 busy cores) can outrank it.
MMS = 10
SIZE = 192
EXTRA = 512


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """BASE and NEW, RUNS profiles each, made in turns (the machine's drift shared)."""
    return sides_in_turns(
        tmp_path_factory.mktemp("diffops"), runs=RUNS, steps=STEPS, mms=MMS, size=SIZE, extra=EXTRA
    )


def test_the_added_operator_comes_first_with_its_shapes(profiles, capsys):
    base, new = profiles
    ops = kinetrace.diff(base, new, runs=True).operators
    top = ops[0]
    assert (top.name, top.input_dims, top.status) == (
        "aten::mm",
        f"[[{EXTRA},{EXTRA}],[{EXTRA},{EXTRA}]]",
        "new",
    ), ops[:3]
    assert (top.base_count, top.new_count) == (0, 1)
    assert top.change_us > 0 and top.new_self_us > 0 and top.new_gpu_us == 0
    # The product of every step is there on both sides, once per call.
    same = next(o for o in ops if o.input_dims == f"[[{SIZE},{SIZE}],[{SIZE},{SIZE}]]")
    assert (same.base_count, same.new_count, same.status) == (MMS, MMS, "")
    assert run("diff", "--runs", base, new) == status.DONE
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    first = lines[lines.index(next(x for x in lines if x.startswith("Operators"))) + 2]
    assert first.endswith(f"(new) aten::mm [[{EXTRA},{EXTRA}],[{EXTRA},{EXTRA}]]"), first


def test_a_trace_against_itself_changes_no_operator(profiles):
    base, _ = profiles
    ops = kinetrace.diff(base, base, runs=True).operators
    assert ops and all(o.change_us == 0 and o.status == "" for o in ops)
    assert all(o.base_self_us == o.new_self_us for o in ops)


def test_a_damaged_trace_gives_its_operators_up_to_the_damage(profiles, tmp_path):
    """``summarize`` warns and reads as far as it can; the operators' pass reads as far."""
    base, _ = profiles
    text = (base / "run0.json").read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 2 // 3])
    with pytest.warns(SummaryWarning, match="cut.json"):
        ops = kinetrace.diff(cut, cut).operators
    assert ops and all(o.change_us == 0 for o in ops)


# --- own GPU time and self time, on a trace made by hand ----------------------------------


def _ev(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _gpu_trace(path: Path, kernel: str, op: str) -> Path:
    """Six steps: ``aten::linear`` [0, 40] holding ``aten::addmm`` [5, 25], which launches
        ``kernel`` (30 µs on the GPU), and ``op`` [50, 60] launching an 8 µs kernel of its name
    (as Triton's are)."""
    events = []
    for i in range(6):
        t, corr = 100 * i, 10 * i
        dims = {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}
        events += [
            _ev(f"ProfilerStep#{i}", "user_annotation", t, 90),
            _ev("aten::linear", "cpu_op", t, 40, **dims),
            _ev("aten::addmm", "cpu_op", t + 5, 20, **dims),
            _ev("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=corr),
            {
                "ph": "s",
                "cat": "ac2g",
                "name": "ac2g",
                "id": corr,
                "pid": 1,
                "tid": 1,
                "ts": t + 10,
            },
            {
                "ph": "f",
                "cat": "ac2g",
                "name": "ac2g",
                "id": corr,
                "pid": 0,
                "tid": 7,
                "ts": t + 12,
                "bp": "e",
            },
            {**_ev(kernel, "kernel", t + 12, 30, tid=7, correlation=corr, stream=7), "pid": 0},
            _ev(op, "cpu_op", t + 50, 10),
            _ev("cudaLaunchKernel", "cuda_runtime", t + 51, 2, correlation=corr + 1),
            {
                "ph": "s",
                "cat": "ac2g",
                "name": "ac2g",
                "id": corr + 1,
                "pid": 1,
                "tid": 1,
                "ts": t + 51,
            },
            {
                "ph": "f",
                "cat": "ac2g",
                "name": "ac2g",
                "id": corr + 1,
                "pid": 0,
                "tid": 7,
                "ts": t + 60,
                "bp": "e",
            },
            {
                **_ev(op, "kernel", t + 60, 8, tid=7, correlation=corr + 1, stream=7),
                "pid": 0,
            },
        ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_gpu_time_is_charged_to_the_innermost_operator(tmp_path):
    one = _gpu_trace(tmp_path / "a.json", "k", "triton_poi_fused_add_0")
    ops = {o.name: o for o in kinetrace.diff(one, one).operators}
    linear, addmm = ops["aten::linear"], ops["aten::addmm"]
    # linear: 40 µs less addmm's 20; its kernel is addmm's own, not linear's too.
    assert (linear.base_self_us, linear.base_gpu_us, linear.top_kernel) == (20, 0, "")
    assert (addmm.base_self_us, addmm.base_gpu_us, addmm.top_kernel) == (20, 30, "k")
    assert addmm.input_dims == "[[4,4],[4,4]]" and addmm.input_type == '["float","float"]'


def test_shapes_printed_over_lines_key_as_on_one_line_in_diff_and_ops(tmp_path):
    """Issue 48: the operators' input texts are put in one form where they are read, so a
    trace that prints them over several lines (``json.dumps(indent=...)``) gives the keys of
    one that does not, in ``diff`` and ``ops`` alike."""
    one_line = _gpu_trace(tmp_path / "a.json", "k", "triton_poi_fused_add_0")
    indented = tmp_path / "b.json"
    indented.write_text(json.dumps(json.loads(one_line.read_text()), indent=2))
    assert "[\n" in indented.read_text()
    changes = {
        (o.name, o.input_dims, o.input_type): o
        for o in kinetrace.diff(one_line, indented).operators
    }
    addmm = changes["aten::addmm", "[[4,4],[4,4]]", '["float","float"]']
    assert (addmm.base_count, addmm.new_count, addmm.change_us) == (1, 1, 0)
    assert len(changes) == 3
    groups = {(g.name, g.input_dims, g.input_type) for g in kinetrace.ops(indented).groups}
    assert ("aten::addmm", "[[4,4],[4,4]]", '["float","float"]') in groups


def test_renamed_kernels_and_operators_pair(tmp_path):
    base = _gpu_trace(tmp_path / "a.json", "void k<float, 128>(int)", "triton_poi_fused_add_0")
    new = _gpu_trace(tmp_path / "b.json", "void k<float, 256>(int)", "triton_poi_fused_add_3")
    result = kinetrace.diff(base, new)
    kernels = {k.name: k for k in result.kernels}
    k = kernels["void k<float, 128>(int)"]
    assert (k.status, k.new_name, k.base_count, k.new_count) == (
        "renamed",
        "void k<float, 256>(int)",
        1,
        1,
    )
    assert "void k<float, 256>(int)" not in kernels
    # The Triton kernel, named as its operator, is renamed with it (_0 / _3 stripped).
    assert kernels["triton_poi_fused_add_0"].new_name == "triton_poi_fused_add_3"
    op = next(o for o in result.operators if o.name == "triton_poi_fused_add_0")
    assert (op.status, op.new_name, op.change_us) == ("renamed", "triton_poi_fused_add_3", 0)
    assert len(result.operators) == 3


# --- the rename rule ------------------------------------------------------------------------

#: Kernel names of two builds of one ResNet-50 workload (../shared/traces: kineto's
#: tb_plugin sample and the newer pytorch-kineto one): the same kernels renamed.
THRESHOLD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl"
    "<float>({}&, float, float)::{{lambda(float, float)#1}}, at::detail::Array<char*, 3> >"
    "(int, at::native::threshold_kernel_impl<float>({}&, float, float)::{{lambda(float, "
    "float)#1}}, at::detail::Array<char*, 3>)"
)
CLAMP = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "clamp_min_scalar_kernel_impl(at::TensorIterator&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::"
    "clamp_min_scalar_kernel_impl(at::TensorIterator&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2>)"
)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            THRESHOLD.format("at::TensorIteratorBase", "at::TensorIteratorBase"),
            THRESHOLD.format("at::TensorIterator", "at::TensorIterator"),
        ),
        ("volta_sgemm_64x64_nn", "volta_sgemm_128x64_nn"),
        ("void foo<float, 128>(int, float const*)", "void foo<float, 256>(int, float const*)"),
        ("void foo<float, 128> __launch_bounds__(256)(int)", "void foo<float, 64>(int)"),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_12"),
        ("cutlass_80_tensorop_gemm_3fa9c2d17b", "cutlass_80_tensorop_gemm_0b1e22c4d9"),
        ("fmha_kernel_0x1f", "fmha_kernel_0x2a"),
    ],
)
def test_one_family(a, b):
    assert family(a) == family(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (THRESHOLD.format("at::TensorIterator", "at::TensorIterator"), CLAMP),
        ("void foo<float>(int)", "void foo<c10::Half>(int)"),
        ("volta_sgemm_64x64_nn", "volta_sgemm_64x64_nt"),
        ("aten::mm", "aten::bmm"),
        ("triton_poi_fused_add_0", "triton_poi_fused_mul_0"),
        ("kernel_cafe", "kernel_beef"),  # words, not hashes: no digit
    ],
)
def test_different_families(a, b):
    assert family(a) != family(b)


def test_pairs_by_time_within_a_key_leftovers_unpaired():
    gone = {"sgemm_64x64_nn": 5.0, "sgemm_32x128_nn": 9.0, "relu_0": 1.0}
    new = {"sgemm_128x64_nn": 3.0, "other": 2.0}
    assert pair_renames(gone, new, key=family) == [("sgemm_32x128_nn", "sgemm_128x64_nn")]


def test_linear_time():
    """10^5 names (5·10^4 a side, every one paired) and long pathological names. Measured on
    2 busy cores: 1.5 to 2.3 s for the names, at most 0.07 s for each 10^5-character name (a
    scan quadratic in the name takes minutes on those); bounds 5x and 14x that."""
    half = 50_000
    gone = {f"void k{i % 997}<float, {i}>(int, float*)": float(i) for i in range(half)}
    new = {f"void k{i % 997}<float, {i + 1}>(int, float*)": float(i) for i in range(half)}
    start = time.perf_counter()
    assert len(pair_renames(gone, new, key=family)) == half
    assert time.perf_counter() - start < 12.0
    for name in [
        "<" * 100_000,
        "(" * 50_000 + ")" * 50_000,
        "_1" * 50_000,
        "1x" * 50_000,
        "_3fa9c2d17b" * 9_000,
        "9" * 100_000,
    ]:
        start = time.perf_counter()
        family(name)
        assert time.perf_counter() - start < 1.0, name[:20]


def test_ctrl_c_while_the_sides_are_read(tmp_path):
    """Ctrl-C reaches diff's one read of both sides (summaries and operators) while its
    readers are busy (a ~60 MB file a side, 20 ms in): a prompt KeyboardInterrupt, as for
    summary, not a wait for every read."""
    paths = [tmp_path / f"r{i}.json" for i in range(2)]
    for i, path in enumerate(paths):
        write_big_trace(path, 60 << 20, rank=i, world_size=2)
    with Sigint().installed() as sigint:
        sigint.after(0.02)
        latency = sigint.expect(lambda: _kinetrace.diff_read([[p] for p in paths], 2))
    assert_prompt(latency)


@pytest.mark.parametrize("path", real_params())
def test_the_diffs_summary_of_a_real_trace_is_summarizes(path: Path) -> None:
    """``diff`` makes each file's summary of the attribution's records (one record set for
    the figures and the operators): on every real trace it equals ``summarize``'s."""
    (ranks,), _, _ = _kinetrace.diff_read([[path]], 2)
    assert ranks == _kinetrace.summarize([str(path)], "exact", 2)
