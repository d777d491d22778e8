"""kinetrace.schedule against torch.profiler.schedule: actions, errors, warnings."""

from __future__ import annotations

import itertools
import pickle
import warnings
from typing import Any

import pytest
import torch.profiler
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetrace._export import profiler as _profiler
from kinetrace._export.profiler import ProfilerAction, schedule

STEPS = range(301)
GRID = list(
    itertools.product(
        range(3),  # wait
        range(3),  # warmup
        range(1, 4),  # active
        range(3),  # repeat
        range(4),  # skip_first
        range(2),  # skip_first_wait
    )
)
NO_WARMUP = "Profiler won't be using warmup, this can skew profiler results"


def _both(**kwargs: Any) -> tuple[Any, Any]:
    """(torch's schedule, kinetrace's schedule) for ``kwargs``, asserting torch's warning
    about a zero warmup for both."""
    if kwargs["warmup"] == 0:
        with pytest.warns(UserWarning, match=NO_WARMUP):
            theirs = torch.profiler.schedule(**kwargs)
        with pytest.warns(UserWarning, match=NO_WARMUP):
            ours = schedule(**kwargs)
        return theirs, ours
    return torch.profiler.schedule(**kwargs), schedule(**kwargs)


def test_profiler_action_is_torchs() -> None:
    assert ProfilerAction is torch.profiler.ProfilerAction
    assert ProfilerAction.RECORD_AND_SAVE == torch.profiler.ProfilerAction.RECORD_AND_SAVE


def test_not_torchs_function() -> None:
    sched = schedule(wait=1, warmup=1, active=1)
    assert type(sched) is _profiler._Schedule
    assert sched.__class__.__module__ == "kinetrace._export.profiler"


def test_grid_matches_torch() -> None:
    mismatches = []
    for wait, warmup, active, repeat, skip_first, skip_first_wait in GRID:
        kwargs = dict(
            wait=wait,
            warmup=warmup,
            active=active,
            repeat=repeat,
            skip_first=skip_first,
            skip_first_wait=skip_first_wait,
        )
        theirs, ours = _both(**kwargs)
        expected = list(map(theirs, STEPS))
        got = list(map(ours, STEPS))
        if got != expected:
            step = next(i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
            mismatches.append((kwargs, step, got[step], expected[step]))
    assert mismatches == []
    assert len(GRID) == 648


@pytest.mark.parametrize("skip_first_wait", [-1, 5])
def test_unusual_skip_first_wait_matches_torch(skip_first_wait: int) -> None:
    # torch does not validate it: any non-zero value skips the first wait
    theirs, ours = _both(
        wait=2, warmup=1, active=2, repeat=2, skip_first=1, skip_first_wait=skip_first_wait
    )
    assert list(map(ours, STEPS)) == list(map(theirs, STEPS))


def test_known_sequence() -> None:
    """An independent check (not just agreement with torch)."""
    sched = schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    n, w, r, s = (
        ProfilerAction.NONE,
        ProfilerAction.WARMUP,
        ProfilerAction.RECORD,
        ProfilerAction.RECORD_AND_SAVE,
    )
    assert [sched(i) for i in range(12)] == [n, n, w, r, s, n, w, r, s, n, n, n]
    skipping = schedule(wait=3, warmup=1, active=1, skip_first=2, skip_first_wait=1)
    assert [skipping(i) for i in range(9)] == [n, n, w, s, n, n, n, w, s]


@settings(max_examples=300, deadline=None)
@given(
    wait=st.integers(0, 40),
    warmup=st.integers(1, 40),
    active=st.integers(1, 40),
    repeat=st.integers(0, 6),
    skip_first=st.integers(0, 60),
    skip_first_wait=st.integers(0, 1),
    steps=st.lists(st.integers(0, 10**9), min_size=1, max_size=50),
)
def test_wider_ranges_match_torch(
    wait: int,
    warmup: int,
    active: int,
    repeat: int,
    skip_first: int,
    skip_first_wait: int,
    steps: list[int],
) -> None:
    kwargs = dict(
        wait=wait,
        warmup=warmup,
        active=active,
        repeat=repeat,
        skip_first=skip_first,
        skip_first_wait=skip_first_wait,
    )
    theirs, ours = torch.profiler.schedule(**kwargs), schedule(**kwargs)
    assert [ours(i) for i in steps] == [theirs(i) for i in steps]


BAD_ARGUMENTS = [
    dict(wait=-1, warmup=1, active=1),
    dict(wait=0, warmup=-1, active=1),
    dict(wait=0, warmup=1, active=0),
    dict(wait=0, warmup=1, active=-3),
    dict(wait=0, warmup=1, active=1, repeat=-1),
    dict(wait=0, warmup=1, active=1, skip_first=-2),
    dict(wait=-1, warmup=-1, active=0, repeat=-1, skip_first=-1),
    dict(wait=None, warmup=1, active=1),
    dict(wait="1", warmup=1, active=1),
    dict(wait=1, warmup=1, active=None),
    dict(wait=1, warmup=1),
    dict(wait=1, warmup=1, active=1, bogus=2),
]


def _raised(fn: Any, *args: Any, **kwargs: Any) -> tuple[type[BaseException], str]:
    with pytest.raises((AssertionError, TypeError)) as info:
        fn(*args, **kwargs)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("kwargs", BAD_ARGUMENTS)
def test_validation_errors_match_torch(kwargs: dict[str, Any]) -> None:
    expected = _raised(torch.profiler.schedule, **kwargs)
    assert _raised(schedule, **kwargs) == expected


def test_positional_arguments_rejected_like_torch() -> None:
    assert _raised(schedule, 1, 1, 1) == _raised(torch.profiler.schedule, 1, 1, 1)


def test_negative_step_error_matches_torch() -> None:
    theirs, ours = _both(wait=1, warmup=1, active=1)
    assert _raised(ours, -1) == _raised(theirs, -1)
    assert _raised(ours, -1) == (AssertionError, "Step must be non-negative. Got -1.")


def test_warnings_match_torch() -> None:
    def record(fn: Any) -> list[tuple[type[Warning], str, str]]:
        with pytest.warns(UserWarning) as caught:
            fn(wait=1, warmup=0, active=1)
        return [(w.category, str(w.message), w.filename) for w in caught]

    expected = record(torch.profiler.schedule)
    got = record(schedule)
    assert got == expected
    assert got == [(UserWarning, NO_WARMUP, __file__)]  # stacklevel points at the caller


def test_no_warning_with_warmup() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schedule(wait=0, warmup=1, active=1)


def test_picklable_and_repr() -> None:
    sched = schedule(wait=2, warmup=1, active=3, repeat=4, skip_first=5, skip_first_wait=1)
    copy = pickle.loads(pickle.dumps(sched))
    assert [copy(i) for i in STEPS] == [sched(i) for i in STEPS]
    assert repr(sched) == (
        "kinetrace.schedule(wait=2, warmup=1, active=3, repeat=4, skip_first=5, skip_first_wait=1)"
    )
