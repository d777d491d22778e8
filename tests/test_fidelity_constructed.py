"""Byte fidelity on constructed activity sets in the shapes CUDA / distributed runs record
(which a CPU-only machine cannot record), and what kinetrace reads of each activity."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import kinetrace
from kinetrace._kinetrace import trimonth_base_ns
from support import BASE, T0
from support.fakes import PID, FakeActivity, FakeResult
from support.oracle import EXCLUDED_CATEGORIES, assert_reads, compare, expected_base, torch_bytes
from support.scenarios import (
    TRICKY_NAMES,
    Clock,
    annotation_instant_overhead_set,
    chain,
    comms_set,
    durations_set,
    flow_types_set,
    fwdbwd_set,
    launch_set,
    memcpy_memset_set,
    metadata_set,
    names_set,
    odd_ids_set,
)
from support.traces import (
    activity_events,
    is_strict_json,
    json_string_identity,
    kinetrace_trace,
    read_trace,
)


def everything() -> list[FakeActivity]:
    return chain(
        launch_set(),
        memcpy_memset_set(),
        fwdbwd_set(),
        comms_set()[0],
        annotation_instant_overhead_set(),
        odd_ids_set(),
        durations_set(),
        names_set(),
        flow_types_set(),
        metadata_set(),
    )


SETS = {
    "launches_ac2g": launch_set,
    "launches_two_gpus": lambda: launch_set(4, device=0) + launch_set(3, device=1, stream=13),
    "memcpy_memset_drivers": memcpy_memset_set,
    "fwdbwd_flows": fwdbwd_set,
    "comms_kernels": lambda: comms_set()[0],
    "annotations_instants_overhead": annotation_instant_overhead_set,
    "odd_ids": odd_ids_set,
    "durations": durations_set,
    "tricky_names": names_set,
    "flow_types": flow_types_set,
    "valid_metadata": metadata_set,
    "everything": everything,
}


@pytest.mark.parametrize("build", SETS.values(), ids=SETS.keys())
def test_byte_identical(build, tmp_path):
    result = FakeResult(build())
    compare(result, tmp_path)
    assert_reads(result)


def test_everything_gzip(tmp_path):
    result = FakeResult(everything())
    compare(result, tmp_path, name="trace.json.gz")
    assert_reads(result)


@pytest.mark.parametrize("level, threads", [(0, 1), (1, 2), (9, 1), (6, 4)])
def test_gzip_levels_and_threads(tmp_path, level, threads):
    result = FakeResult(everything())
    compare(result, tmp_path, name="t.json.gz", compresslevel=level, threads=threads)


def test_every_set_shuffled_together(tmp_path):
    """Device / thread metadata events are sorted whatever the activity order."""
    acts = everything()
    acts = acts[1::2] + acts[::2]
    compare(FakeResult(acts), tmp_path)


def test_empty_result(tmp_path):
    result = FakeResult([], trace_start_ns=T0)
    out = compare(result, tmp_path)
    assert b'"Record Window End"' in out
    assert result.trace_activities_calls == 1


def test_single_activity(tmp_path):
    compare(FakeResult([FakeActivity()]), tmp_path)


def test_metadata_header(tmp_path):
    metadata = {
        "record_shapes": "1",
        "str": '"value"',
        "json": '{"a": [1, 2, {"b": null}], "c": "é"}',
        "number": "3.25",
        'key "quoted" é \ud800': "true",
        "padded": '  "x"  ',
        "distributedInfo": '{"backend": "nccl", "rank": 0, "world_size": 2}',
    }
    compare(FakeResult(launch_set(2)), tmp_path, metadata)


def test_very_long_name_and_metadata(tmp_path):
    long_name = "ä" * 200_000 + "x\\" * 200_000 + "😀" * 100_000  # ~1.3 MB of text
    long_md = '"blob": "' + "ab\\n" * 300_000 + '", "list": [' + ", ".join(["1"] * 50_000) + "]"
    acts = [
        FakeActivity(name=long_name, timestamp=T0 + 5, correlation_id=1, metadata_json=long_md),
        FakeActivity(name="short", timestamp=T0 + 9, metadata_json=long_md),
    ]
    result = FakeResult(acts)
    compare(result, tmp_path)
    assert_reads(result)


def test_very_long_name_gzip_stored_blocks(tmp_path):
    """Level 0 (stored blocks, at most 64 KiB each) over a multi-MB trace, several threads."""
    acts = [
        FakeActivity(
            name="ä" * 300_000, timestamp=T0 + 5, metadata_json='"b": "' + "q" * 2_000_000 + '"'
        ),
        *launch_set(20),
    ]
    compare(FakeResult(acts), tmp_path, name="t.json.gz", compresslevel=0, threads=3)


def test_reads_only_what_is_needed(tmp_path):
    """Explicit read counts: correlation_id only without a linked id and outside the excluded
    categories; flow_type / flow_start only with flow_id > 0; linked_activity only for
    kernels; every other field exactly once."""
    clock = Clock()
    acts = []
    for cat in sorted(
        EXCLUDED_CATEGORIES
        | {
            "cpu_op",
            "user_annotation",
            "cpu_instant_event",
            "gpu_user_annotation",
            "python_function",
        }
    ):
        for linked in (0, 7):
            for flow in (0, -1, 3):
                acts.append(
                    FakeActivity(
                        name=cat,
                        type=cat,
                        timestamp=clock(),
                        correlation_id=11,
                        linked_correlation_id=linked,
                        flow_id=flow,
                        flow_type=2,
                        flow_start=True,
                        metadata_json='"x": 1',
                    )
                )
    result = FakeResult(acts)
    compare(result, tmp_path)
    by_cat = {}
    for act in acts:
        key = (act.peek("type"), act.peek("linked_correlation_id"), act.peek("flow_id"))
        by_cat[key] = act.calls
    assert by_cat[("cpu_op", 0, 0)]["correlation_id"] == 1
    assert by_cat[("cpu_op", 7, 0)]["correlation_id"] == 0
    for cat in EXCLUDED_CATEGORIES:
        assert by_cat[(cat, 0, 0)]["correlation_id"] == 0
    assert by_cat[("cpu_op", 0, 3)]["flow_type"] == by_cat[("cpu_op", 0, 3)]["flow_start"] == 1
    assert by_cat[("cpu_op", 0, -1)]["flow_type"] == by_cat[("cpu_op", 0, -1)]["flow_start"] == 0
    assert by_cat[("kernel", 0, 0)]["linked_activity"] == 1
    assert by_cat[("gpu_memcpy", 0, 0)]["linked_activity"] == 0
    assert by_cat[("cpu_op", 0, 0)]["linked_activity"] == 0
    assert_reads(result)


@pytest.mark.parametrize(
    "name, kwargs", [("t.json", {}), ("t.json.gz", {"threads": 2, "compresslevel": 1})]
)
def test_many_activities_cross_batches(tmp_path, name, kwargs):
    """Many batches (of ``_extract.BATCH_SIZE``), with batches where every / no / some
    activities need correlation_id, flows and linked_activity."""
    clock = Clock()
    acts = []
    for i in range(8192):
        acts.append(FakeActivity(name=f"op{i % 7}", timestamp=clock(), correlation_id=i + 1))
    for i in range(8192):
        acts.append(
            FakeActivity(
                name="k",
                type="kernel",
                device_id=0,
                resource_id=7,
                timestamp=clock(),
                correlation_id=i,
                flow_id=i + 1,
                flow_type=2,
                linked_activity=None,
            )
        )
    for i in range(5000):
        cat = ["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy"][i % 4]
        acts.append(
            FakeActivity(
                name=cat,
                type=cat,
                device_id=PID if cat in ("cpu_op", "cuda_runtime") else 0,
                timestamp=clock(),
                correlation_id=i,
                linked_correlation_id=i if i % 3 == 0 else 0,
                flow_id=i if i % 5 else 0,
                flow_type=1 + i % 2,
                flow_start=i % 2 == 0,
                metadata_json=f'"i": {i}' if i % 2 else "",
            )
        )
    result = FakeResult(acts)
    compare(result, tmp_path, name=name, **kwargs)
    assert_reads(result)


def test_concurrent_exports_of_one_result(tmp_path):
    """Several threads exporting the same result at once (the GIL is released while Rust
    writes): every file is torch's bytes."""
    result = FakeResult(everything())
    base = expected_base(result)
    names = [f"c{i}.json" if i % 2 else f"c{i}.json.gz" for i in range(4)]
    expected = {n: torch_bytes(result, str(tmp_path / n), base=base) for n in names}
    errors: list[BaseException] = []

    def export(n: str) -> None:
        try:
            kinetrace.export_chrome_trace(result, tmp_path / n, base_time_ns=base, threads=2)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=export, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n in names:
        assert read_trace(tmp_path / n) == expected[n]


def test_mixed_activity_classes(tmp_path):
    """Not all activities of one class: kinetrace must fall back to calling methods."""

    class OtherActivity(FakeActivity):
        pass

    acts = launch_set(3)
    acts[1] = OtherActivity(**acts[1].values)
    result = FakeResult(acts)
    compare(result, tmp_path)
    assert_reads(result)


def test_background_export_same_bytes(tmp_path):
    result = FakeResult(everything())
    base = expected_base(result)
    path = str(tmp_path / "bg.json")
    expected = torch_bytes(result, path, base=base)
    handle = kinetrace.export_chrome_trace(result, path, base_time_ns=base, background=True)
    stats = handle.result(timeout=60)
    assert Path(path).read_bytes() == expected
    assert stats.uncompressed_bytes == len(expected)


def test_unicode_trace_path(tmp_path):
    compare(FakeResult(launch_set(2)), tmp_path, name='tr\u00e9ce \\ "q" \U0001f600.json')


# --- time base -------------------------------------------------------------------------------


def test_default_base_is_floor_of_trace_start(tmp_path):
    """Without base_time_ns kinetrace floors min(trace_start_ns, timestamps)."""
    acts = launch_set(2)
    # A trace start in the previous trimonth interval wins over the activities.
    result = FakeResult(acts, trace_start_ns=BASE - 10)
    path = str(tmp_path / "t.json")
    expected = torch_bytes(result, path, base=trimonth_base_ns(BASE - 10))
    kinetrace.export_chrome_trace(result, path)
    assert Path(path).read_bytes() == expected


def test_default_base_uses_earliest_activity(tmp_path):
    acts = launch_set(2)
    acts.append(FakeActivity(name="early", timestamp=BASE - 1))
    result = FakeResult(acts, trace_start_ns=T0)
    path = str(tmp_path / "t.json")
    expected = torch_bytes(result, path, base=BASE - 7_889_238 * 10**9)
    kinetrace.export_chrome_trace(result, path)
    assert Path(path).read_bytes() == expected


def test_explicit_base_after_activities_clamps_like_torch(tmp_path):
    """base_time_ns later than some timestamps: both clamp those to 0."""
    acts = launch_set(3)
    later = acts[2].peek("timestamp") + 1
    out = compare(FakeResult(acts), tmp_path, base=later)
    assert b'"ts":0.000' in out


# --- cases where torch's output is not valid JSON --------------------------------------------


def test_blank_metadata_beside_external_id(tmp_path):
    """Torch writes `"args":{"External id": 5,   }` (invalid); kinetrace drops the blank part."""
    acts = [
        FakeActivity(name="a", timestamp=T0 + 1, correlation_id=5, metadata_json="   "),
        FakeActivity(name="b", timestamp=T0 + 2, correlation_id=0, metadata_json="   "),
        FakeActivity(name="c", timestamp=T0 + 3, linked_correlation_id=6, metadata_json="\n"),
    ]
    result = FakeResult(acts)
    path = tmp_path / "t.json"
    torch_out = torch_bytes(result, str(path), base=BASE)
    assert not is_strict_json(torch_out)
    result.reset_counts()
    _, trace = kinetrace_trace(result, path, base_time_ns=BASE)
    events = activity_events(trace)
    assert events[0]["args"] == {"External id": 5}
    assert events[1]["args"] == {}
    assert events[2]["args"] == {"External id": 6}
    assert_reads(result)


def test_blank_metadata_on_kernel_and_comms(tmp_path):
    """Kernel metadata and linked comms metadata both whitespace: torch writes `{ ,  }`."""
    comms = FakeActivity(name="record_param_comms", timestamp=T0 + 1, metadata_json="  ")
    kernel = FakeActivity(
        name="nccl",
        type="kernel",
        device_id=0,
        resource_id=7,
        timestamp=T0 + 2,
        metadata_json=" ",
        linked_activity=comms,
    )
    kernel_with_id = FakeActivity(
        name="nccl2",
        type="kernel",
        device_id=0,
        resource_id=7,
        timestamp=T0 + 3,
        linked_correlation_id=4,
        metadata_json='"stream": 7',
        linked_activity=comms,
    )
    result = FakeResult([comms, kernel, kernel_with_id])
    path = tmp_path / "t.json"
    assert not is_strict_json(torch_bytes(result, str(path), base=BASE))
    result.reset_counts()
    _, trace = kinetrace_trace(result, path, base_time_ns=BASE)
    events = activity_events(trace)
    assert events[1].get("args", {}) == {}
    assert events[2]["args"] == {"External id": 4, "stream": 7}
    assert_reads(result)


@pytest.mark.parametrize(
    "fragment, expected_args",
    [
        ('"path": "C:\\dir\\x"', {"path": "C:\\dir\\x"}),
        ('"v": NaN, "w": [Infinity, -Infinity]', {"v": "NaN", "w": ["Infinity", "-Infinity"]}),
        ('"v": nan, "w": inf', {"v": "nan", "w": "inf"}),
        ('"ctl": "a\nb\tc\x01"', {"ctl": "a\nb\tc\x01"}),
        ('"open": "never closed', {"open": "never closed"}),
        ('"lone": "\ud800"', {"lone": "\ud800"}),
        # Raw lone surrogates are escaped one by one; escaped, the last two form a pair.
        ('"\ud800\ud800\udc00": 1', {"\ud800\U00010000": 1}),
        ('"a": 1,', {"kinetrace_unparsed_metadata": '"a": 1,'}),
        ("garbage {[", {"kinetrace_unparsed_metadata": "garbage {["}),
    ],
)
def test_invalid_metadata_repaired(tmp_path, fragment, expected_args):
    acts = [FakeActivity(name="op", timestamp=T0 + 1, metadata_json=fragment)]
    result = FakeResult(acts)
    _, trace = kinetrace_trace(result, tmp_path / "t.json")
    assert activity_events(trace)[0]["args"] == expected_args


def test_lone_surrogate_metadata_torch_cannot_write(tmp_path):
    """Torch fails to encode a lone surrogate in a fragment; kinetrace escapes it."""
    acts = [FakeActivity(name="\udc80", timestamp=T0 + 1, metadata_json='"k\udc80": "v\ud83d"')]
    result = FakeResult(acts)
    with pytest.raises(UnicodeEncodeError):
        torch_bytes(result, str(tmp_path / "torch.json"), base=BASE)
    data, trace = kinetrace_trace(result, tmp_path / "t.json")
    assert data.isascii()
    event = activity_events(trace)[0]
    assert event["name"] == "\udc80"
    assert event["args"] == {"k\udc80": "v\ud83d"}


def test_tricky_names_round_trip(tmp_path):
    result = FakeResult(names_set())
    data, trace = kinetrace_trace(result, tmp_path / "t.json")
    assert data.isascii()
    names = [e["name"] for e in activity_events(trace)]
    assert names == [json_string_identity(n) for n in TRICKY_NAMES for _ in range(2)]


def test_output_is_strict_json_for_every_valid_set(tmp_path):
    result = FakeResult(everything())
    data, trace = kinetrace_trace(result, tmp_path / "t.json")
    assert len(activity_events(trace)) == len(result.activities)
    json.loads(data)  # and the lenient parser agrees
