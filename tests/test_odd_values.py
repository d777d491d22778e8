"""The readers of existing traces on real traces whose events hold odd values where numbers,
names and argument lists belong (a string for ``ts``, a huge ``dur``, ``args`` that is a list,
``Input Dims`` of the wrong shape, a number where an event belongs, a ``deviceProperties``
that is not a list...): ``summary``, ``diff`` (exact and HTA's rules), ``ops`` (exact and
TraceLens's rules) and ``check``, through the library and the command line with every
renderer, either answer or fail with a clear error (``TraceFormatError`` or ``ValueError``
with a message; exit status 0, 1 or 3), never a panic or another exception. The bytes
themselves damaged at random are ``test_repair``'s and ``test_array_format``'s."""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kinetrace
from kinetrace import _cli
from support.real import REAL_DIR, real_text

#: Two small real traces: ROCm with steps, kernels and memcpys; and a torch.compile one
#: with Triton kernels and the GEMMs ``ops`` computes a roofline for.
SAMPLES = [
    REAL_DIR / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    REAL_DIR / "TraceLens" / "torch_compile_triton" / "trace.json.gz",
]

#: The keys edited on an event, and in its ``args``.
EVENT_KEYS = ["ts", "dur", "name", "ph", "cat", "pid", "tid", "args", "id", "s", "bp"]
ARG_KEYS = [
    "correlation", "External id", "stream", "device", "Input Dims", "Input type",
    "Concrete Inputs", "Input Strides", "Sequence number", "Ev Idx", "grid", "block",
]  # fmt: skip
TOP_KEYS = ["deviceProperties", "distributedInfo", "traceEvents", "displayTimeUnit"]

#: Values where numbers, texts and lists belong.
ODD = [
    None, True, -1, 0, 2**70, -(2**70), 1e308, -0.0, 1.5e-300, 1.0000001, "", "x", "12",
    "\u0000", [], {}, [1, 2], {"a": 1}, [[-1, 2**40]], [[]], [[1.5, 2]], [["a"]],
    [[2**63, 2**63], [2**63, 2**63]], [[0, 0], [0, 0]], ["c10::BFloat16", "float"],
    [[4096, 4096], [4096, 4096], []],
]  # fmt: skip

edit = st.one_of(
    st.tuples(st.just("set"), st.integers(0), st.sampled_from(EVENT_KEYS), st.sampled_from(ODD)),
    st.tuples(st.just("arg"), st.integers(0), st.sampled_from(ARG_KEYS), st.sampled_from(ODD)),
    st.tuples(st.just("drop"), st.integers(0), st.sampled_from(EVENT_KEYS), st.none()),
    st.tuples(st.just("insert"), st.integers(0), st.none(), st.sampled_from(ODD)),
    st.tuples(st.just("twice"), st.integers(0), st.none(), st.none()),
    st.tuples(st.just("top"), st.integers(0), st.sampled_from(TOP_KEYS), st.sampled_from(ODD)),
)


def _edited(trace: dict[str, Any], edits: list[tuple[str, int, Any, Any]]) -> dict[str, Any]:
    trace = copy.deepcopy(trace)
    for how, at, key, value in edits:
        events = trace.get("traceEvents")
        if how == "top":
            trace[key] = copy.deepcopy(value)
            continue
        if not isinstance(events, list) or not events:
            continue
        at %= len(events)
        event = events[at]
        if how == "insert":
            events.insert(at, copy.deepcopy(value))
        elif not isinstance(event, dict):
            continue
        elif how == "set":
            event[key] = copy.deepcopy(value)
        elif how == "arg" and isinstance(event.setdefault("args", {}), dict):
            event["args"][key] = copy.deepcopy(value)
        elif how == "drop":
            event.pop(key, None)
        elif how == "twice":
            events.append(copy.deepcopy(event))
    return trace


def _cli_status(*argv: str | Path) -> int:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = _cli.main([str(a) for a in argv])
    text = err.getvalue()
    assert "panick" not in text.lower() and "Traceback" not in text, text
    assert status in (0, 1, 3), (argv, status, text)
    assert status != 1 or text.strip(), (argv, "a failure without a message")
    return status


def _answers_or_fails_clearly(call: Any) -> None:
    """``call`` returns or raises a clear error; its warnings (a trace read up to a broken
    event) are ``SummaryWarning``s, each with its message."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
        except (kinetrace.TraceFormatError, ValueError) as exc:
            assert str(exc).strip(), f"{type(exc).__name__} without a message"
    for w in caught:
        assert issubclass(w.category, kinetrace.SummaryWarning), w
        assert str(w.message).strip(), w


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.parent.name)
@given(edits=st.lists(edit, min_size=1, max_size=6), gz=st.booleans())
def test_odd_values_answer_or_fail_clearly(
    tmp_path_factory: pytest.TempPathFactory,
    sample: Path,
    edits: list[tuple[str, int, Any, Any]],
    gz: bool,
) -> None:
    if not sample.is_file():
        pytest.skip(f"{sample} is missing")
    original = json.loads(real_text(sample))
    folder = tmp_path_factory.mktemp("odd")
    base = folder / "base.json"
    base.write_bytes(real_text(sample))
    text = json.dumps(_edited(original, edits)).encode()
    odd = folder / ("odd.json.gz" if gz else "odd.json")
    odd.write_bytes(gzip.compress(text) if gz else text)

    _answers_or_fails_clearly(lambda: kinetrace.summarize(odd))
    _answers_or_fails_clearly(lambda: kinetrace.diff(base, odd).to_json())
    _answers_or_fails_clearly(lambda: kinetrace.diff(odd, base, rules="hta"))
    _answers_or_fails_clearly(lambda: kinetrace.ops(odd))
    _answers_or_fails_clearly(lambda: kinetrace.ops(odd, rules="tracelens"))
    _answers_or_fails_clearly(lambda: kinetrace.check_trace(odd))
    _cli_status("summary", odd, "--html", folder / "s.html")
    _cli_status("diff", base, odd, "--markdown", "--html", folder / "d.html")
    _cli_status("diff", odd, base, "--json", "--fail-above", "1")
    _cli_status("ops", odd, "--html", folder / "o.html")
    _cli_status("ops", odd, "--rules", "tracelens", "--json")
