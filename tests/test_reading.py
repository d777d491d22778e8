"""Reading torch's activities (``src/python/reader.rs``): the accessors are pybind11 C
functions called directly with the activity borrowed, so reading writes nothing to the
activity objects (no reference count changes, no copy-on-write in forked workers), and the
bytes are those the ordinary calls give."""

from __future__ import annotations

import os
import sys
from operator import methodcaller

import pytest

import kinetrace
from kinetrace import _bench, _kinetrace
from kinetrace._export import extract as _extract
from support.measure import proc_kib

pytestmark = pytest.mark.skipif(
    not _bench.has_trace_activities(), reason="needs torch >= 2.13 (trace_activities)"
)


@pytest.fixture(scope="module")
def profile():
    """A real profile of ~30k activities (the benchmark's workload)."""
    return _bench.record_workload(5000)


def _read_all(activities, get, span=None) -> None:
    sink = _kinetrace._Discard()
    _extract.first_pass(sink, activities, get, span)
    _extract.second_pass(sink, activities, get, None, span)


def test_torch_accessors_are_called_directly(profile):
    activities = profile.profiler.kineto_results.trace_activities()
    get = _extract.activity_getters(activities)
    assert get.direct
    assert _kinetrace.common_type(activities) is type(activities[0])


def test_reading_leaves_the_reference_counts_alone(profile):
    activities = profile.profiler.kineto_results.trace_activities()
    get = _extract.activity_getters(activities)
    sample = activities[:: max(1, len(activities) // 50)]
    before = [sys.getrefcount(a) for a in sample]
    _read_all(activities, get)
    assert [sys.getrefcount(a) for a in sample] == before


def test_direct_and_ordinary_calls_write_the_same_bytes(profile, tmp_path, monkeypatch):
    direct = tmp_path / "direct.json"
    kinetrace.export_chrome_trace(profile, direct, workers=1)
    # Without one common type the accessors are methodcaller objects, called the ordinary way.
    monkeypatch.setattr(_kinetrace, "common_type", lambda activities: None)
    activities = profile.profiler.kineto_results.trace_activities()
    assert not _extract.activity_getters(activities).direct
    ordinary = tmp_path / "ordinary.json"
    kinetrace.export_chrome_trace(profile, ordinary, workers=1)
    assert direct.read_bytes() == ordinary.read_bytes().replace(b"ordinary.json", b"direct.json")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_reader_copies_no_activity(profile):
    """A forked process that reads every field of every activity copies (copy-on-write)
    about what one that reads a tenth copies: nothing per activity (calls that wrote the
    reference counts copied ~66 bytes an activity, the pages holding the objects)."""
    activities = profile.profiler.kineto_results.trace_activities()
    get = _extract.activity_getters(activities)
    n = len(activities)

    def private_dirty_after_reading(count: int) -> int:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            code = 1
            try:
                before = proc_kib("self", "smaps_rollup", "Private_Dirty") or 0
                _read_all(activities, get, range(count))
                after = proc_kib("self", "smaps_rollup", "Private_Dirty") or 0
                os.write(write, str((after - before) * 1024).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        try:
            data = os.read(read, 64)
        finally:
            os.close(read)
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return int(data)

    tenth = private_dirty_after_reading(n // 10)
    whole = private_dirty_after_reading(n)
    per_activity = (whole - tenth) / (n - n // 10)
    assert per_activity < 16, (tenth, whole, per_activity)


def test_generic_accessors_get_the_error_messages(tmp_path):
    """Accessors called the ordinary way (look-alikes) keep the errors of wrong types."""
    from support import T0
    from support.fakes import FakeActivity, FakeResult

    acts = [FakeActivity(timestamp=T0 + i, correlation_id=i + 1) for i in range(3)]
    acts[2].values["duration"] = "7"
    get = _kinetrace._Accessors(None, [methodcaller(f) for f in _kinetrace._Accessors.fields])
    assert not get.direct
    with pytest.raises(TypeError, match=r"duration\(\) must be an int"):
        _extract.first_pass(_kinetrace._Discard(), acts, get)
    with pytest.raises(TypeError, match="must be str"):
        kinetrace.export_chrome_trace(
            FakeResult([FakeActivity(timestamp=T0, name=b"x")]), tmp_path / "t.json"
        )
