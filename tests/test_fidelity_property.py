"""Differential property tests against torch's Python exporter on random activity sets.

1. Valid input (names of any text, lone surrogates included; metadata fragments and header
   values that are strict JSON, in any spelling JSON allows): kinetrace writes torch's bytes,
   and reads each accessor only as often as needed.
2. Hostile input (NaN / Infinity, bad escapes, raw control characters, broken structure,
   random garbage): kinetrace's output is strict JSON, names and categories round-trip, and
   every fragment Python's strict parser accepts keeps its meaning.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import kinetrace
from support import BASE, TRIMONTH_NS
from support.fakes import PID, FakeActivity, FakeResult
from support.oracle import EXCLUDED_CATEGORIES, assert_reads, compare
from support.traces import (
    activity_events,
    is_strict_json,
    json_string_identity,
    normalize_strings,
    read_trace,
    strict_loads,
)

INT64 = st.integers(-(2**63), 2**63 - 1)

CATEGORY_NAMES = sorted(
    EXCLUDED_CATEGORIES
    | {
        "cpu_op",
        "user_annotation",
        "python_function",
        "gpu_user_annotation",
        "cpu_instant_event",
        "overhead",
        "cuda_sync",
        "cuda_profiler_range",
        "Trace",
    }
)

SPECIAL_CHARS = list('"\\/\n\r\t\b\f\x00\x01\x1f\x7f\x80\u2028\u2029\ufeff\ufffd\uffff😀')

#: Any character, lone surrogates included.
chars = st.one_of(
    st.characters(),
    st.characters(categories=["Cs"]),
    st.sampled_from(SPECIAL_CHARS),
)
texts = st.text(chars, max_size=12)
#: Text a UTF-8 file can hold raw (torch writes fragments and header values unescaped).
encodable_texts = st.text(st.one_of(st.characters(), st.sampled_from(SPECIAL_CHARS)), max_size=12)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)

WHITESPACE = st.text(st.sampled_from(" \t\n\r"), max_size=2)


def _escapes(ch: str) -> list[str]:
    """Every spelling JSON allows for one character inside a string."""
    c = ord(ch)
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "/": "\\/",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
    }
    if c > 0xFFFF:
        v = c - 0x10000
        hi, lo = 0xD800 | (v >> 10), 0xDC00 | (v & 0x3FF)
        return [ch, f"\\u{hi:04x}\\u{lo:04x}", f"\\u{hi:04X}\\u{lo:04X}"]
    options = [f"\\u{c:04x}", f"\\u{c:04X}"]
    if ch in short:
        options.append(short[ch])
    if c >= 0x20 and ch not in '"\\' and not 0xD800 <= c <= 0xDFFF:
        options.append(ch)  # raw
    return options


@st.composite
def json_string_text(draw: Any, s: str) -> str:
    return '"' + "".join(draw(st.sampled_from(_escapes(ch))) for ch in s) + '"'


@st.composite
def json_text(draw: Any, value: Any) -> str:
    """``value`` as JSON text in a randomly chosen valid spelling."""
    ws = lambda: draw(WHITESPACE)  # noqa: E731
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return draw(st.sampled_from([str(value), f"{value}e0", f"{value}.0", f"{value}E+00"]))
    if isinstance(value, float):
        return draw(st.sampled_from([repr(value), f"{value:.17e}", f"{value:.3E}"]))
    if isinstance(value, str):
        return draw(json_string_text(value))
    if isinstance(value, list):
        if not value:
            return "[" + ws() + "]"
        return "[" + ",".join(ws() + draw(json_text(v)) + ws() for v in value) + "]"
    assert isinstance(value, dict)
    if not value:
        return "{" + ws() + "}"
    return "{" + ",".join(members(draw, value)) + "}"


def members(draw: Any, d: dict[str, Any]) -> list[str]:
    return [
        draw(WHITESPACE)
        + draw(json_string_text(k))
        + draw(WHITESPACE)
        + ":"
        + draw(WHITESPACE)
        + draw(json_text(v))
        + draw(WHITESPACE)
        for k, v in d.items()
    ]


@st.composite
def valid_fragments(draw: Any) -> str:
    """A strict-JSON member list (or ""), the way Kineto or a user could spell it."""
    d = draw(st.dictionaries(texts, json_values, max_size=4))
    style = draw(st.sampled_from(["dumps", "compact", "indent", "unicode", "random"]))
    if style == "dumps":
        text = json.dumps(d)[1:-1]
    elif style == "compact":
        text = json.dumps(d, separators=(",", ":"))[1:-1]
    elif style == "indent":
        text = json.dumps(d, indent=draw(st.integers(0, 2)))[1:-1]
    elif style == "unicode":
        text = json.dumps(d, ensure_ascii=False)[1:-1]
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # raw lone surrogates: torch could not write the file
            text = json.dumps(d)[1:-1]
    else:
        text = ",".join(members(draw, d))
    if not text.strip():
        return ""
    assert is_strict_json("{" + text + "}"), text
    return text


@st.composite
def valid_header_values(draw: Any) -> str:
    value = draw(json_values)
    if draw(st.booleans()):
        return json.dumps(value)
    return draw(WHITESPACE) + draw(json_text(value)) + draw(WHITESPACE)


HOSTILE_TOKENS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "inf",
    "-inf",
    "\\",
    "\\x",
    "\\u12",
    "\\u",
    "\n",
    "\t",
    "\x01",
    "\x00",
    '"',
    "'",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "C:\\dir\\x",
    "\ud800",
    "01",
    "1.",
    ".5",
    "+1",
    "tru",
    "None",
    "True",
]


@st.composite
def hostile_fragments(draw: Any) -> str:
    kind = draw(st.sampled_from(["garbage", "mutated", "tokens", "valid"]))
    if kind == "garbage":
        return draw(st.text(chars, max_size=30))
    if kind == "tokens":
        return "".join(
            draw(st.lists(st.sampled_from([*HOSTILE_TOKENS, '"k"', '"v"', "1"]), max_size=12))
        )
    base = draw(valid_fragments())
    if kind == "valid":
        return base
    # Insert a few hostile tokens at random places of a valid fragment.
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(base)))
        base = base[:at] + draw(st.sampled_from(HOSTILE_TOKENS)) + base[at:]
    return base


@st.composite
def activity_sets(draw: Any, fragments: Any, header_values: Any) -> tuple[FakeResult, Any, Any]:
    # Anchor near a trimonth boundary so traces sometimes straddle it.
    anchor = BASE + draw(st.integers(-(10**10), 10**10))
    timestamps = st.one_of(
        st.integers(anchor - 10**9, anchor + 10**10),
        st.sampled_from([0, 1, -1, BASE, BASE - 1, 2**62, 2**63 - 1, -(2**63)]),
    )
    durations = st.one_of(
        st.integers(-(10**6), 10**9), st.sampled_from([0, -1, 999, 2**62, -(2**63), 2**63 - 1])
    )
    devices = st.one_of(st.sampled_from([PID, PID, 0, 1, 7, -1]), INT64)
    resources = st.one_of(st.sampled_from([PID, 0, 7, -7, 2**32 + 1, -(2**63), 2**63 - 1]), INT64)
    ids = st.one_of(st.just(0), st.integers(-3, 3), INT64)
    flow_ids = st.one_of(st.just(0), st.integers(-3, 5), st.integers(1, 2**63 - 1))
    categories = st.one_of(st.sampled_from(CATEGORY_NAMES), texts)

    acts: list[FakeActivity] = []
    for _ in range(draw(st.integers(0, 14))):
        acts.append(
            FakeActivity(
                name=draw(texts),
                type=draw(categories),
                device_id=draw(devices),
                resource_id=draw(resources),
                timestamp=draw(timestamps),
                duration=draw(durations),
                correlation_id=draw(ids),
                linked_correlation_id=draw(st.one_of(st.just(0), ids)),
                flow_id=draw(flow_ids),
                flow_type=draw(st.one_of(st.sampled_from([1, 2]), st.integers(-3, 2**40))),
                flow_start=draw(st.booleans()),
                metadata_json=draw(fragments),
            )
        )
    for act in acts:
        if act.peek("type") != "kernel":
            continue
        choice = draw(st.sampled_from(["none", "comms", "other", "listed"]))
        if choice == "comms":
            act.values["linked_activity"] = FakeActivity(
                name="record_param_comms", metadata_json=draw(fragments)
            )
        elif choice == "other":
            act.values["linked_activity"] = FakeActivity(
                name=draw(texts), metadata_json=draw(fragments)
            )
        elif choice == "listed":
            target = draw(st.sampled_from(acts))
            if draw(st.booleans()):
                target.values["name"] = "record_param_comms"
            act.values["linked_activity"] = target

    start = draw(st.one_of(st.none(), st.integers(anchor - TRIMONTH_NS, anchor)))
    result = FakeResult(acts, trace_start_ns=start)
    metadata = draw(st.one_of(st.none(), st.dictionaries(texts, header_values, max_size=3)))
    base = draw(
        st.one_of(
            st.just("auto"),  # the floor of the earliest time: nothing clamps
            st.just(BASE),  # a boundary inside the trace: earlier events clamp to 0
            st.integers(anchor - 10**9, anchor + 10**10),  # any base at all
        )
    )
    return result, metadata, base


@given(case=activity_sets(valid_fragments(), valid_header_values()))
def test_valid_input_is_byte_identical(tmp_path_factory, case):
    result, metadata, base = case
    directory = tmp_path_factory.mktemp("prop", numbered=True)
    compare(result, directory, metadata, base=base)
    assert_reads(result)


@given(case=activity_sets(valid_fragments(), valid_header_values()))
def test_valid_input_gzip_is_byte_identical(tmp_path_factory, case):
    result, metadata, base = case
    directory = tmp_path_factory.mktemp("propgz", numbered=True)
    compare(result, directory, metadata, base=base, name="t.json.gz", threads=2)


def _expected_args(act: FakeActivity) -> dict[str, Any] | None:
    """The args torch means to write when each part is strict JSON on its own (blank
    fragments dropped); None when some part is not."""
    v = act.values
    parts = []
    ext = v["linked_correlation_id"] or (
        v["correlation_id"] if v["type"] not in EXCLUDED_CATEGORIES else 0
    )
    if ext:
        parts.append(f'"External id": {ext}')
    frags = [v["metadata_json"]]
    linked = v["linked_activity"]
    if v["type"] == "kernel" and linked is not None and linked.peek("name") == "record_param_comms":
        frags.append(linked.peek("metadata_json"))
    for frag in frags:
        if frag and frag.strip(" \t\n\r"):
            if not is_strict_json("{" + frag + "}"):
                return None
            parts.append(frag)
    return strict_loads("{" + ",".join(parts) + "}")


RESERVED_KEYS = {
    "schemaVersion",
    "deviceProperties",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "traceEvents",
    "traceName",
}


@given(
    case=activity_sets(hostile_fragments(), st.one_of(valid_header_values(), hostile_fragments()))
)
def test_hostile_input_gives_strict_json(tmp_path_factory, case):
    result, metadata, base = case
    path = tmp_path_factory.mktemp("hostile", numbered=True) / "t.json"
    kinetrace.export_chrome_trace(
        result, path, metadata, base_time_ns=None if base == "auto" else base
    )
    data = read_trace(path)
    trace = strict_loads(data.decode("utf-8"))
    events = activity_events(trace)
    acts = result.activities
    assert len(events) == len(acts)
    for event, act in zip(events, acts, strict=True):
        assert event["name"] == json_string_identity(act.peek("name"))
        assert event["cat"] == json_string_identity(act.peek("type"))
        expected = _expected_args(act)
        if expected is not None:
            assert normalize_strings(event.get("args", {})) == normalize_strings(expected)
        elif "args" in event:
            assert isinstance(event["args"], dict)
    keys = [json_string_identity(k) for k in metadata or {}]
    for key, value in (metadata or {}).items():
        k = json_string_identity(key)
        if k in RESERVED_KEYS or keys.count(k) > 1:
            continue  # a duplicate key: the last one wins
        assert k in trace
        if is_strict_json(value):
            assert normalize_strings(trace[k]) == normalize_strings(strict_loads(value))
    for event in trace["traceEvents"]:
        for field in ("ts", "dur"):
            if field in event and not isinstance(event[field], str):
                assert math.isfinite(event[field])


def test_ci_runs_the_derandomized_profile() -> None:
    """Where ``CI`` is set (CI runs with ``CI=true``) and no profile is named, the properties
    run derandomized: a failure in CI fails again on rerun."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    probe = "import conftest, hypothesis; print(hypothesis.settings.default.derandomize)"
    seen = {}
    for ci in ("true", None):
        env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "CI")}
        if ci is not None:
            env["CI"] = ci
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=tests,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        seen[ci] = done.stdout.strip()
    assert seen == {"true": "True", None: "False"}
