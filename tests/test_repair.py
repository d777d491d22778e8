"""``kinetrace repair`` / :func:`kinetrace.repair_trace`: the best loadable trace a damaged file
holds (truncated, corrupt gzip, broken strings, NaN, trailing data), and ``--untangle``, on
real traces, constructed damage and random damage."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kinetrace
from support import perfetto_rule
from support.cli import run
from support.interrupts import Sigint, assert_prompt
from support.real import (
    MISSING,
    REAL_DIR,
    event_spans,
    real_params,
    real_path,
    real_text,
    real_trace,
)
from support.traces import single_member_text, strict_loads

#: The real traces these tests damage, by short name (paths under ../shared/traces/hta).
REAL = {
    "amd_trace": "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "critical_path": "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "mtia": "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "ns_resolution": "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "triton": "triton_example__triton_example.json.gz",
}


def real(name: str) -> Path:
    """A real trace by its short name (:data:`REAL`); skips where the traces are absent."""
    return real_path(f"hta/{REAL[name]}")


def loads(path: Path) -> kinetrace.CheckReport:
    """The check of a repaired trace: no error (and strict JSON for Python too)."""
    report = kinetrace.check_trace(path)
    assert report.valid, report.errors
    data = path.read_bytes()
    strict_loads(single_member_text(data) if data[:2] == b"\x1f\x8b" else data)
    return report


def kinds(report: kinetrace.RepairReport) -> dict[str, int]:
    return {c.kind: c.count for c in report.changes}


# --- nothing to repair -------------------------------------------------------------------------


@pytest.mark.parametrize("path", real_params())
def test_a_trace_that_loads_is_copied_unchanged(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "out.json"
    assert run("repair", path, dst) == 0
    assert "nothing to repair" in capsys.readouterr().out
    assert dst.read_bytes() == real_text(path)
    report = kinetrace.repair_trace(path, tmp_path / "out.json.gz")
    assert report.nothing_to_repair and report.changes == ()
    assert single_member_text((tmp_path / "out.json.gz").read_bytes()) == real_text(path)
    assert report.events_written == kinetrace.check_trace(path).info.events
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.json.gz"]


# --- truncation --------------------------------------------------------------------------------


def assert_prefix_kept(
    text: bytes, cut: int, out: bytes, spans: list[tuple[int, int]] | None = None
) -> int:
    """Every event of ``text`` (at ``spans``) that ends before ``cut`` is in ``out``, byte
    for byte and in order, and nothing else is: returns how many."""
    spans = event_spans(text) if spans is None else spans
    complete = [text[a:b] for a, b in spans if b <= cut]
    at = 0
    for raw in complete:
        found = out.find(raw, at)
        assert found >= 0, (cut, raw[:80])
        at = found + len(raw)
    trace = strict_loads(out)
    assert len(trace["traceEvents"]) == len(complete), cut
    return len(complete)


@pytest.mark.parametrize("prefix", ["amd_trace", "critical_path", "mtia", "triton"])
def test_truncated_real_traces_keep_every_complete_event(prefix: str, tmp_path: Path) -> None:
    path = real(prefix)
    text = real_text(path)
    spans = event_spans(text)
    rng = random.Random(prefix)
    first = text.index(b'"traceEvents"')
    # Cuts anywhere, and around event boundaries (just before, at, just after an end).
    many = len(text) < 1_000_000  # the MB-sized trace: fewer cuts, each costs more
    cuts = {rng.randrange(first, len(text)) for _ in range(40 if many else 10)}
    for _, end in rng.sample(spans, min(15 if many else 4, len(spans))):
        cuts.update({end - 1, end, end + 1, end + 2})
    cuts.add(len(text) - 2)
    src, dst = tmp_path / "cut.json", tmp_path / "out.json"
    for cut in sorted(cuts):
        src.write_bytes(text[:cut])
        report = kinetrace.repair_trace(src, dst)
        loads(dst)
        kept = assert_prefix_kept(text, cut, dst.read_bytes(), spans)
        assert report.events_written == kept
        assert report.change("truncated") is not None, cut
    # Before "traceEvents": what is there is kept, and an empty traceEvents added.
    src.write_bytes(text[: first - 5])
    report = kinetrace.repair_trace(src, dst)
    assert {"truncated", "added_trace_events"} <= set(kinds(report))
    assert strict_loads(dst.read_bytes())["traceEvents"] == []


@pytest.mark.parametrize("prefix", ["critical_path", "ns_resolution"])
def test_truncated_gzip_keeps_what_decompresses(prefix: str, tmp_path: Path) -> None:
    text = real_text(real(prefix))
    blob = gzip.compress(text, compresslevel=6)
    src, dst = tmp_path / "cut.json.gz", tmp_path / "out.json"
    for fraction in (0.1, 0.5, 0.93):
        src.write_bytes(blob[: int(len(blob) * fraction)])
        assert not kinetrace.check_trace(src).valid
        report = kinetrace.repair_trace(src, dst)
        assert {"gzip_damage", "truncated"} <= set(kinds(report)), report.changes
        loads(dst)
        out = dst.read_bytes()
        # The events kept are the source's first ones, byte for byte.
        cut = report.json_bytes_read
        assert assert_prefix_kept(text, cut, out) > 0
    # A flipped bit in the CRC: all the text decompressed, so every event stays.
    bad = bytearray(blob)
    bad[-6] ^= 1
    src.write_bytes(bad)
    report = kinetrace.repair_trace(src, dst)
    assert set(kinds(report)) == {"gzip_damage"}
    assert dst.read_bytes() == text


# --- each repair -------------------------------------------------------------------------------

EVENT = '{"ph":"X","cat":"cpu_op","name":"NAME","pid":1,"tid":1,"ts":TS,"dur":2.5}'


def trace_text(names: list[str]) -> str:
    events = [EVENT.replace("NAME", n).replace("TS", str(10 * i)) for i, n in enumerate(names)]
    return '{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + '\n], "x": 1}\n'


def test_strings_are_repaired(tmp_path: Path) -> None:
    text = trace_text(['q"uote', "C:\\dir", "tab\there", "ok"]).encode()
    text = text.replace(b"ok", b"o\xffk")
    src, dst = tmp_path / "s.json", tmp_path / "d.json"
    src.write_bytes(text)
    report = kinetrace.repair_trace(src, dst)
    assert kinds(report) == {
        "escaped_quotes": 1,
        "escaped_backslashes": 1,
        "escaped_control_characters": 1,
        "replaced_invalid_utf8": 1,
    }
    names = [e["name"] for e in strict_loads(dst.read_bytes())["traceEvents"]]
    assert names == ['q"uote', "C:\\dir", "tab\there", "o\ufffdk"]
    first = report.change("escaped_quotes").examples[0]
    assert first.event_index == 0 and text[first.offset : first.offset + 1] == b'"'
    assert src.read_bytes() == text  # never modified


def test_numbers_commas_and_shapes_are_repaired(tmp_path: Path) -> None:
    src, dst = tmp_path / "s.json", tmp_path / "d.json"
    cases = {
        # NaN/Infinity become strings, as kinetrace's export writes them.
        '{"traceEvents": [{"ph":"C","ts":1,"name":"c","args":{"v":NaN,"w":-Infinity}}]}': (
            {"non_finite_numbers": 2},
            {"v": "NaN", "w": "-Infinity"},
        ),
        '{"traceEvents": [{"ph":"X","ts":1,"dur":2,"name":"a","args":{"v":[1,],}},]}': (
            {"commas": 3},
            {"v": [1]},
        ),
    }
    for text, (want, args) in cases.items():
        src.write_text(text)
        report = kinetrace.repair_trace(src, dst)
        assert kinds(report) == want, text
        assert strict_loads(dst.read_bytes())["traceEvents"][0]["args"] == args
    src.write_text('[{"ph":"i","ts":1,"name":"a","s":"g"}]')
    assert kinds(kinetrace.repair_trace(src, dst)) == {"wrapped_array": 1}
    assert len(loads(dst).finding("no_phase") or ()) == 0
    src.write_text('{"traceEvents": []}\n{"traceEvents": [1, 2]}')
    assert kinds(kinetrace.repair_trace(src, dst)) == {"trailing_data": 1}
    assert dst.read_text() == '{"traceEvents": []}\n'
    src.write_text('{"traceEvents": [1, {"ph":"B","ts":1}, "x"]}')
    assert kinds(kinetrace.repair_trace(src, dst)) == {"dropped_elements": 2}
    loads(dst)


def test_unrepairable_events_are_dropped(tmp_path: Path) -> None:
    text = trace_text(["a", "b", "c", "d"])
    lines = text.split("\n")
    lines[2] = lines[2].replace('"pid":1,', '"pid" 1,')  # a missing colon: not repaired
    src, dst = tmp_path / "s.json", tmp_path / "d.json"
    src.write_text("\n".join(lines))
    report = kinetrace.repair_trace(src, dst)
    assert kinds(report) == {"dropped_events": 1}
    assert report.change("dropped_events").examples[0].event_index == 1
    names = [e["name"] for e in strict_loads(dst.read_bytes())["traceEvents"]]
    assert names == ["a", "c", "d"]


def test_gzip_members_become_one(tmp_path: Path) -> None:
    text = real_text(real("amd_trace"))
    src, dst = tmp_path / "m.json.gz", tmp_path / "d.json.gz"
    src.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:]))
    report = kinetrace.repair_trace(src, dst)
    assert kinds(report) == {"gzip_members": 2}
    assert zlib.decompress(dst.read_bytes(), 31) == text  # what one-member readers see


# --- untangling --------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["critical_path", "mtia", "ns_resolution"])
def test_untangle_shows_every_complete_event(prefix: str, tmp_path: Path) -> None:
    path = real(prefix)
    source = real_trace(path)
    before = kinetrace.check_trace(path).finding("overlapping_slices")
    assert before is not None
    dst = tmp_path / "untangled.json"
    report = kinetrace.repair_trace(path, dst, untangle=True)
    assert kinds(report)["moved_slices"] == before.count
    after = loads(dst)
    assert after.finding("overlapping_slices") is None
    trace = strict_loads(dst.read_bytes())
    events = trace["traceEvents"]
    assert perfetto_rule.dropped(events) == []

    # Every event is there, only moved events (and their flow ends) have a new tid; the
    # lanes' metadata events are new.
    def identity(e: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in e.items() if k != "tid"}, sort_keys=True)

    threads = {(json.dumps(e.get("pid")), json.dumps(e.get("tid"))) for e in source["traceEvents"]}
    new = [e for e in events if (json.dumps(e.get("pid")), json.dumps(e.get("tid"))) not in threads]
    lanes = [e for e in new if e["ph"] == "M"]
    assert sorted(map(identity, source["traceEvents"])) == sorted(
        identity(e) for e in events if e not in lanes
    )
    names = [e for e in lanes if e["name"] == "thread_name"]
    assert len(names) == kinds(report)["added_lanes"]
    assert all(" (overlap " in e["args"]["name"] for e in names)
    assert sum(e["ph"] == "X" for e in new) == before.count
    # Flows follow their event: as many pairs as before.
    assert after.info.flows_paired == kinetrace.check_trace(path).info.flows_paired
    for key in ("traceName", "schemaVersion"):
        assert trace[key] == source[key]


def test_untangle_names_lanes_after_their_thread(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "X", "name": "k1", "cat": "kernel", "pid": 0, "tid": 7, "ts": 3, "dur": 3.776},
        {"ph": "X", "name": "k2", "cat": "kernel", "pid": 0, "tid": 7, "ts": 5, "dur": 2},
        {"ph": "f", "id": 1, "cat": "ac2g", "pid": 0, "tid": 7, "ts": 5, "bp": "e"},
        {"ph": "s", "id": 1, "cat": "ac2g", "pid": 1, "tid": 1, "ts": 1},
    ]
    src, dst = tmp_path / "s.json", tmp_path / "d.json"
    src.write_text(json.dumps({"traceEvents": events}))
    assert run("repair", "--untangle", src, dst) == 0
    out = strict_loads(dst.read_bytes())["traceEvents"]
    moved = next(e for e in out if e.get("name") == "k2")
    flow = next(e for e in out if e["ph"] == "f")
    assert moved["tid"] == flow["tid"] == 8
    assert {"ph": "M", "name": "thread_name", "pid": 0, "tid": 8,
            "args": {"name": "stream 7 (overlap 1)"}} in out  # fmt: skip


# --- random damage -----------------------------------------------------------------------------

_SAMPLE_PATH = REAL_DIR / "hta" / REAL["amd_trace"]
#: Damaged at random below; a stand-in where the real traces are absent (the test skips).
_SAMPLE = real_text(_SAMPLE_PATH) if _SAMPLE_PATH.is_file() else b'{"traceEvents": []}'

_SPECIALS = b'{}[]",:\\ \n\t0123456789.-eENaI\x00\x01\x80\xc3\xff'


@pytest.mark.skipif(not _SAMPLE_PATH.is_file(), reason=MISSING)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(_SAMPLE) - 1), st.integers(0, 2), st.sampled_from(_SPECIALS)),
        min_size=1,
        max_size=6,
    ),
    cut=st.one_of(st.none(), st.integers(0, len(_SAMPLE))),
    gz=st.booleans(),
    untangle=st.booleans(),
)
def test_random_damage_never_crashes_nor_writes_an_invalid_trace(
    tmp_path_factory, edits, cut, gz, untangle
) -> None:
    data = bytearray(_SAMPLE)
    for at, how, byte in edits:
        at = min(at, len(data) - 1)
        if how == 0:
            data[at] = byte
        elif how == 1:
            del data[at]
        else:
            data.insert(at, byte)
    if cut is not None:
        data = data[:cut]
    blob = gzip.compress(bytes(data)) if gz else bytes(data)
    d = tmp_path_factory.mktemp("damage")
    src, dst = d / "s.json", d / "d.json"
    src.write_bytes(blob)
    try:
        kinetrace.repair_trace(src, dst, untangle=untangle)
    except kinetrace.TraceFormatError as exc:
        assert exc.kind == "not_a_trace", exc  # nothing loadable
        assert not dst.exists()
        return
    report = loads(dst)
    if untangle:
        assert report.finding("overlapping_slices") is None
    assert sorted(p.name for p in d.iterdir()) == ["d.json", "s.json"]


# --- the command line, and what is left behind --------------------------------------------------


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "s.json"
    src.write_text(trace_text(['a"b', "c"])[:-20])
    dst = tmp_path / "d.json"
    assert run("repair", src, dst) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{src} -> {dst}: ")
    assert "  truncated: " in out and "  escaped_quotes: " in out
    # DST exists: refused without --force; --json.
    assert run("repair", src, dst) == 1
    assert "exists (use -f/--force" in capsys.readouterr().err
    assert run("repair", "--force", "--json", src, dst) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["nothing_to_repair"] is False
    assert {c["kind"] for c in report["changes"]} == {"truncated", "escaped_quotes"}
    # The source itself, a missing source, nothing loadable.
    before = src.read_bytes()
    assert run("repair", "-f", src, src) == 1
    assert "the destination is the source" in capsys.readouterr().err
    assert src.read_bytes() == before
    assert run("repair", tmp_path / "missing.json", dst) == 2
    capsys.readouterr()
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\x00garbage")
    assert run("repair", "-f", junk, tmp_path / "j.json") == 1
    assert "not a trace" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "junk.json", "s.json"]
    with pytest.raises(kinetrace.TraceFormatError):
        kinetrace.repair_trace(junk, tmp_path / "j.json")


def test_ctrl_c_leaves_nothing(tmp_path: Path) -> None:
    """Ctrl-C while a damaged trace (a raw tab in every event) is being repaired: the call
    raises soon after, and neither the destination nor a temporary file is left."""
    line = b'{"ph":"X","cat":"cpu_op","name":"a\tb","pid":1,"tid":1,"ts":1.5,"dur":2},\n'
    src = tmp_path / "damaged.json"
    with open(src, "wb") as f:
        f.write(b'{"traceEvents":[\n')
        f.write(line * ((96 << 20) // len(line)))
        f.write(b'{"ph":"i","ts":1,"name":"end","s":"g"}]}')
    for untangle in (False, True):
        with Sigint().installed() as sigint:
            sigint.after(0.3)
            latency = sigint.expect(
                lambda u=untangle: kinetrace.repair_trace(src, tmp_path / "out.json", untangle=u)
            )
        assert_prompt(latency)
        assert [p.name for p in tmp_path.iterdir()] == ["damaged.json"]


def test_the_source_must_be_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a regular file"):
        kinetrace.repair_trace("/dev/null", tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == []
