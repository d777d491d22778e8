"""Reading torch's activities (``src/python/reader.rs``): the accessors are pybind11 C
functions called directly with the activity borrowed, so reading writes nothing to the
activity objects (no reference count changes, no copy-on-write in forked workers), and the
bytes are those the ordinary calls give."""

from __future__ import annotations

import os
import subprocess
import sys
from operator import methodcaller

import pytest

import kinetrace
from kinetrace import _bench, _kinetrace
from kinetrace._export import extract as _extract
from support.aftermath import subprocess_env

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


#: Run in a fresh interpreter: the suite's own heap, fragmented by every test before this
#: one, makes a forked child dirty pages for its own short-lived objects wherever their free
#: slots lie (27.9 B an activity seen once in the full suite, under 16 in a fresh process),
#: which is not what this test is about. Prints the Private_Dirty growth per activity.
_FORKED_READER = """
import os
from kinetrace import _bench, _kinetrace
from kinetrace._export import extract as _extract

def private_dirty_kib():
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Private_Dirty:"))

profile = _bench.record_workload(5000)
activities = profile.profiler.kineto_results.trace_activities()
get = _extract.activity_getters(activities)
n = len(activities)

def private_dirty_after_reading(count):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            before = private_dirty_kib()
            span = range(count)
            sink = _kinetrace._Discard()
            _extract.first_pass(sink, activities, get, span)
            _extract.second_pass(sink, activities, get, None, span)
            os.write(write, str((private_dirty_kib() - before) * 1024).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    data = os.read(read, 64)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return int(data)

tenth = private_dirty_after_reading(n // 10)
whole = private_dirty_after_reading(n)
print(n, tenth, whole, (whole - tenth) / (n - n // 10))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_reader_copies_no_activity() -> None:
    """A forked process that reads every field of every activity copies (copy-on-write)
    about what one that reads a tenth copies: nothing per activity (calls that wrote the
    reference counts copied ~66 bytes an activity, the pages holding the objects). The bound,
    16 B an activity, is a quarter of that; a fresh process measures under it with room."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_READER],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    n, tenth, whole, per_activity = done.stdout.split()[-4:]
    assert int(n) > 20_000, done.stdout
    assert float(per_activity) < 16, (n, tenth, whole, per_activity)


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
