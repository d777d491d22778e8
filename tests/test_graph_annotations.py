"""CUDA-graph annotations and graph lanes against torch 2.15's own exporter.

Graph-replay-shaped activity sets (graphed kernels, memcpys and memsets smeared over
hardware streams, ``gpu_user_annotation`` slices, ungraphed work beside them) are exported
by torch's ``_chrome_trace_export.export_chrome_trace(..., annotations, graph_lanes,
default_stream)`` and by kinetrace with 1, 2 and 3 workers, to ``.json`` and ``.json.gz``;
the texts must be byte-identical. A hypothesis property does the same over random
annotation maps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.profiler._chrome_trace_export as torch_export
from hypothesis import given
from hypothesis import strategies as st

import kinetrace
from support import T0
from support.fakes import PID, FakeActivity, FakeResult, Raise
from support.oracle import assert_same_bytes, expected_base
from support.scenarios import Clock, kernel_metadata
from support.traces import is_strict_json, read_trace, single_member_text, strict_loads

WORKERS = (1, 2, 3)
SUFFIXES = (".json", ".json.gz")


def graphed_metadata(stream: int | None, correlation: int, node: int | str | None) -> str:
    md = kernel_metadata(stream if stream is not None else 0, correlation)
    if stream is None:
        md = md.replace('"stream": 0, ', "")
    if node is not None:
        md += f', "graph node id": {node}'
    return md


def graph_replay_set(replays: int = 3, nodes: int = 8) -> list[FakeActivity]:
    """Replays of one graph of ``nodes`` work nodes (kernels, one memcpy, one memset),
    each replay on other hardware streams, with ungraphed work and user annotations."""
    clock = Clock()
    acts: list[FakeActivity] = []
    corr = 1000
    for r in range(replays):
        corr += 1
        launch = FakeActivity(
            name="cudaGraphLaunch",
            type="cuda_runtime",
            resource_id=PID,
            timestamp=clock(),
            duration=4_000,
            correlation_id=corr,
            flow_id=corr,
            flow_type=2,
            flow_start=True,
        )
        acts.append(launch)
        # The step's annotation slices: on a stream that keeps work, and on one that
        # only the replayed (and, with lanes, moved) work ran on.
        for stream in (20 + r, 90 + r):
            acts.append(
                FakeActivity(
                    name=f"replay#{r}",
                    type="gpu_user_annotation",
                    device_id=0,
                    resource_id=stream,
                    timestamp=clock(),
                    duration=50_000,
                    correlation_id=corr,
                    flow_id=corr + 50_000 if stream >= 90 else 0,
                    flow_type=2,
                )
            )
        for node in range(1, nodes + 1):
            stream = (20 + r) if node % 2 else (90 + r)
            category = {3: "gpu_memcpy", 5: "gpu_memset"}.get(node, "kernel")
            md_stream: int | None = None if node == 4 else stream
            acts.append(
                FakeActivity(
                    name=f"node_{node}" if category == "kernel" else f"Memcpy {node}",
                    type=category,
                    device_id=0,
                    resource_id=stream,
                    timestamp=clock(),
                    duration=2_000 + node,
                    correlation_id=corr,
                    linked_correlation_id=corr,
                    flow_id=corr if node == 1 else 0,
                    flow_type=2,
                    metadata_json=graphed_metadata(md_stream, corr, (r << 32) | node),
                )
            )
        # Ungraphed work and odd node ids beside the replay.
        acts.append(
            FakeActivity(
                name="eager_kernel",
                type="kernel",
                device_id=0,
                resource_id=7,
                timestamp=clock(),
                duration=1_000,
                metadata_json=graphed_metadata(7, corr, None),
            )
        )
        acts.append(
            FakeActivity(
                name="zero_node",
                type="kernel",
                device_id=1,
                resource_id=13,
                timestamp=clock(),
                duration=1_000,
                metadata_json=graphed_metadata(13, corr, 0),
            )
        )
        acts.append(
            FakeActivity(
                name="no_metadata",
                type="gpu_memset",
                device_id=1,
                resource_id=14,
                timestamp=clock(),
                duration=1_000,
            )
        )
        acts.append(
            FakeActivity(
                name="[memory]",
                type="cpu_instant_event",
                timestamp=clock(),
                duration=0,
                metadata_json='"Bytes": 36, "graph node id": 1',
            )
        )
    return acts


def node(replay: int, n: int) -> int:
    return (replay << 32) | n


def all_nodes(replays: int = 3, nodes: int = 8) -> list[int]:
    return [node(r, n) for r in range(replays) for n in range(1, nodes + 1)]


ANNOTATION_MAPS: dict[str, Any] = {
    "none": None,
    "empty": {},
    "some": {
        node(0, 1): {"name": "phase_A"},
        node(0, 2): [{"name": "phase_B", "stream": 3}, {"Process Group Description": "pg0"}],
        node(1, 3): {"name": "copy", "dtype": "bf16", "n": 4, "stream": "21"},
        node(1, 4): "a bare string is skipped",
        node(1, 5): {},
        node(2, 6): {"Process Group Description": "", "stream": 5},
        node(2, 7): {"note": 'quote " backslash \\ newline \n é 😀', 1: None},
        node(2, 8): [{"stream": 20}, 7, {"x": [1, 2]}],
        12345: {"name": "matches nothing"},
    },
    "all": {n: {"name": f"n{n & 0xFF}", "replay": n >> 32} for n in all_nodes()},
    "all_lanes": {
        n: [{"stream": 30 + (n & 3)}, {"Process Group Description": f"group {n & 3}"}]
        for n in all_nodes()
    },
}


def torch_text(result: FakeResult, path: str, base: int, *args: Any) -> bytes:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch_export, "_trimester_base_ns", lambda: base)
        torch_export.export_chrome_trace(result, path, None, *args)
    try:
        return read_trace(path)
    finally:
        Path(path).unlink()


def compare_graphs(
    result: FakeResult,
    tmp_path: Path,
    annotations: Any,
    graph_lanes: str = "none",
    default_stream: int = 7,
    *,
    workers: tuple[int, ...] = WORKERS,
    suffixes: tuple[str, ...] = SUFFIXES,
) -> bytes:
    """Asserts kinetrace writes torch's bytes for every worker count and suffix."""
    base = expected_base(result)
    text = b""
    for suffix in suffixes:
        path = str(tmp_path / f"graphs{suffix}")
        expected = torch_text(result, path, base, annotations, graph_lanes, default_stream)
        for n in workers:
            stats = kinetrace.export_chrome_trace(
                result,
                path,
                None,
                annotations,
                graph_lanes,
                default_stream,
                base_time_ns=base,
                workers=n,
            )
            data = Path(path).read_bytes()
            text = single_member_text(data) if suffix.endswith(".gz") else data
            assert_same_bytes(expected, text)
            assert stats.uncompressed_bytes == len(text)
            assert stats.events == len(strict_loads(text)["traceEvents"])
            leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith("kinetrace-tmp")]
            assert not leftovers
    return text


@pytest.mark.parametrize("lanes", ["none", "all"])
@pytest.mark.parametrize("maps", ANNOTATION_MAPS, ids=ANNOTATION_MAPS.keys())
def test_byte_identical_to_torch(maps, lanes, tmp_path):
    annotations = ANNOTATION_MAPS[maps]
    if lanes == "all" and not annotations:
        pytest.skip("torch raises for graph_lanes='all' without annotations (tested below)")
    result = FakeResult(graph_replay_set())
    text = compare_graphs(result, tmp_path, annotations, lanes)
    trace = json.loads(text)
    assert ("cudaGraphInlineAnnotated" in trace) == (maps in ("some", "all", "all_lanes"))


@pytest.mark.parametrize("default_stream", [7, 21, 0, 90])
def test_default_stream_on_seen_and_new_lanes(default_stream, tmp_path):
    result = FakeResult(graph_replay_set())
    compare_graphs(result, tmp_path, ANNOTATION_MAPS["some"], "all", default_stream)


def test_what_the_lanes_look_like(tmp_path):
    result = FakeResult(graph_replay_set(replays=1))
    text = compare_graphs(
        result, tmp_path, ANNOTATION_MAPS["all_lanes"], "all", suffixes=(".json",)
    )
    events = strict_loads(text)["traceEvents"]
    moved = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    graphed = [e for e in moved if e.get("args", {}).get("graph node id")]
    assert graphed and all(e["tid"] in (30, 31, 32, 33) for e in graphed)
    assert all(e["args"]["stream"] == e["tid"] for e in graphed)
    assert all(e["args"]["original_stream"] in (20, 90) for e in graphed)
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[31] == "group 1"
    # Annotation slices stay only where work stayed (stream 20 keeps none either).
    assert not [e for e in events if e.get("cat") == "gpu_user_annotation"]


def test_more_activities_than_a_batch(tmp_path):
    result = FakeResult(graph_replay_set(replays=700, nodes=20))
    annotations = {n: {"name": str(n)} for n in all_nodes(700, 20)[::2]}
    compare_graphs(result, tmp_path, annotations, "all", workers=(1, 3), suffixes=(".json.gz",))


@pytest.mark.parametrize(
    ("annotations", "lanes", "message"),
    [
        ({1: {"a": 1}}, "some", "graph_lanes must be 'all' or 'none', got 'some'"),
        (None, "all", "graph_lanes='all' needs cuda_graph_annotations"),
        ({}, "all", "graph_lanes='all' needs cuda_graph_annotations"),
    ],
)
def test_same_errors_as_torch(annotations, lanes, message, tmp_path):
    result = FakeResult(graph_replay_set(replays=1))
    path = tmp_path / "t.json"
    with pytest.raises(ValueError, match="graph_lanes") as theirs:
        torch_export.export_chrome_trace(result, str(path), None, annotations, lanes)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}  # what torch left, if any
    with pytest.raises(ValueError, match="graph_lanes") as ours:
        kinetrace.export_chrome_trace(result, path, None, annotations, lanes)
    assert str(ours.value) == str(theirs.value)
    assert str(ours.value).startswith(message)
    # kinetrace raised before writing: no temporary file, nothing it found touched.
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_bad_arguments_raise_before_writing(tmp_path):
    result = FakeResult(graph_replay_set(replays=1))
    path = tmp_path / "t.json"
    with pytest.raises(TypeError, match="default_stream"):
        kinetrace.export_chrome_trace(result, path, None, {1: {"a": 1}}, "all", "7")
    with pytest.raises(ValueError, match="stream"):
        kinetrace.export_chrome_trace(result, path, None, {node(0, 1): {"stream": "main"}})
    with pytest.raises(ValueError, match="out of range"):
        kinetrace.export_chrome_trace(result, path, None, {node(0, 1): {"stream": 2**70}})
    assert list(tmp_path.iterdir()) == []


def test_background_export_with_annotations(tmp_path):
    result = FakeResult(graph_replay_set())
    base = expected_base(result)
    path = str(tmp_path / "bg.json.gz")
    expected = torch_text(result, path, base, ANNOTATION_MAPS["some"], "all", 7)
    handle = kinetrace.export_chrome_trace(
        result, path, None, ANNOTATION_MAPS["some"], "all", base_time_ns=base, background=True
    )
    handle.result()
    assert_same_bytes(expected, single_member_text(Path(path).read_bytes()))


# ------------------------------------------------------------------------------------------
# Random annotation maps
# ------------------------------------------------------------------------------------------

_texts = st.text(st.one_of(st.characters(), st.sampled_from(list('"\\\n\t\x00é😀'))), max_size=8)
_fields = st.dictionaries(
    st.one_of(_texts.filter(lambda k: k != "stream"), st.integers(-5, 5), st.none()),
    st.one_of(_texts, st.integers(), st.floats(), st.none(), st.lists(st.integers(), max_size=2)),
    max_size=3,
)
_one = st.one_of(
    _fields,
    _fields.map(lambda d: {**d, "stream": 0}),
    st.builds(
        lambda d, s: {**d, "stream": s},
        _fields,
        st.integers(-3, 40) | st.sampled_from(["7", " 31 ", True]),
    ),
    st.builds(lambda d, n: {**d, "Process Group Description": n}, _fields, _texts | st.integers()),
    st.sampled_from(["bare", 0, None, 3.5]),
)
_annotation = st.one_of(_one, st.lists(_one, max_size=3))
_nodes = st.sampled_from([*all_nodes(2, 8), 1, 2, 5, 7, 12345])
annotation_maps = st.dictionaries(_nodes, _annotation, max_size=12)


@given(
    annotations=annotation_maps,
    lanes=st.sampled_from(["none", "all"]),
    default_stream=st.sampled_from([7, 20, 0, 91, 1_000_000]),
    workers=st.integers(1, 3),
    suffix=st.sampled_from(SUFFIXES),
)
def test_random_annotation_maps(
    annotations, lanes, default_stream, workers, suffix, tmp_path_factory
):
    result = FakeResult(graph_replay_set(replays=2))
    tmp_path = tmp_path_factory.mktemp("graphs")
    if lanes == "all" and not annotations:
        lanes = "none"
    compare_graphs(
        result,
        tmp_path,
        annotations,
        lanes,
        default_stream,
        workers=(workers,),
        suffixes=(suffix,),
    )


def _graphed_kernel(md: str) -> FakeActivity:
    return FakeActivity(
        name="k", type="kernel", device_id=0, resource_id=20, timestamp=T0 + 5_000, metadata_json=md
    )


def test_strict_json_repair_applies_to_graphed_metadata(tmp_path):
    """Invalid metadata on a graphed kernel is repaired as any metadata is; the annotation
    and the rewritten stream are still there (torch's file would not parse)."""
    md = '"stream": 20, "bad": NaN, "path": "C:\\dir", "graph node id": 5'
    result = FakeResult([_graphed_kernel(md)])
    path = tmp_path / "t.json"
    annotations = {5: {"name": 'a "q"', "Process Group Description": "pg"}}
    kinetrace.export_chrome_trace(result, path, None, annotations, "all", 7)
    trace = strict_loads(path.read_bytes())
    (event,) = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert event["tid"] == 7
    assert event["args"] == {
        "stream": 7,
        "bad": "NaN",
        "path": "C:\\dir",
        "graph node id": 5,
        "name": 'a "q"',
        "Process Group Description": "pg",
        "original_stream": 20,
    }
    assert trace["cudaGraphInlineAnnotated"] is True
    names = [e for e in trace["traceEvents"] if e.get("name") == "thread_name"]
    assert names[-1]["tid"] == 7 and names[-1]["args"]["name"] == "pg"


@pytest.mark.parametrize(
    ("spelling", "node"),
    [
        ('"graph node id":\u00a0\u0665', 5),  # \s and \d on str are Unicode classes
        ('"graph node id": 0005', 5),
        ('"graph node id": x, "graph node id": 6', 6),  # the search goes on
        ('"graph node id": 99999999999999999999999', None),  # graphed, matches nothing
    ],
)
def test_node_ids_are_found_as_torch_finds_them(spelling, node, tmp_path):
    md = f'"stream": 20, {spelling}'
    result = FakeResult([_graphed_kernel(md)])
    annotations = {5: {"name": "five"}, 6: {"name": "six"}}
    base = expected_base(result)
    path = tmp_path / "t.json"
    expected = torch_text(result, str(path), base, annotations, "all", 7)
    kinetrace.export_chrome_trace(result, path, None, annotations, "all", 7, base_time_ns=base)
    actual = path.read_bytes()
    if is_strict_json(expected):
        assert_same_bytes(expected, actual)
    line = next(li for li in actual.splitlines() if b'"cat":"kernel"' in li)
    torch_line = next(li for li in expected.splitlines() if b'"cat":"kernel"' in li)
    assert b'"tid":7' in line and b'"tid":7' in torch_line
    if node is not None:
        name = {5: b'"name": "five"', 6: b'"name": "six"'}[node]
        assert name in line and name in torch_line
    strict_loads(actual)


def test_built_in_character_classes_are_this_pythons():
    from kinetrace._export import graphs as _graphs

    assert _graphs._char_classes() == _graphs._scan_char_classes()


def test_accessor_error_while_looking_for_annotated_nodes_leaves_no_file(tmp_path):
    boom = FakeActivity(type="kernel", metadata_json=Raise(RuntimeError("accessor failed")))
    result = FakeResult([boom])
    with pytest.raises(RuntimeError, match="accessor failed"):
        kinetrace.export_chrome_trace(result, tmp_path / "t.json", None, {5: {"a": 1}})
    assert list(tmp_path.iterdir()) == []


def test_annotations_must_be_a_mapping(tmp_path):
    result = FakeResult(graph_replay_set(replays=1))
    with pytest.raises(TypeError, match="mapping of graph node id"):
        kinetrace.export_chrome_trace(result, tmp_path / "t.json", None, [(1, {"a": 1})])
    assert list(tmp_path.iterdir()) == []
