"""Failures late in an export and in the source itself: an accessor failing in a late batch
of either pass (a kernel's linked activity included), any exception type (``MemoryError``,
``KeyboardInterrupt``, ``SystemExit``...), and a source whose ``trace_activities()``,
``len``, iteration, slicing or ``trace_start_ns()`` fails. The caller gets the original
exception object (a copy of it from a background export), and nothing is left behind.
(Failures in the first batch and wrong accessor types: ``test_errors.py``.)"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import kinetrace
from support.aftermath import (
    OLD,
    assert_no_kinetrace_threads,
    assert_untouched,
)
from support.probes import BATCH, N_LATE, AccessorError, Probe, failing, failing_link, probed
from support.synthetic import SyntheticResult

#: A kernel (index % 16 == 15) in the fourth batch.
LATE_KERNEL = 3 * BATCH + 15 - (3 * BATCH) % 16


@pytest.mark.parametrize(
    "index, field",
    [
        (2 * BATCH + 17, "device_id"),  # first pass, third batch
        (3 * BATCH, "resource_id"),  # first pass, first activity of a batch
        (N_LATE - 1, "duration"),  # first pass, the very last activity
        (3 * BATCH + 100, "metadata_json"),  # second pass, three batches already written
        (4 * BATCH - 1, "name"),  # second pass, last activity of a batch
        (LATE_KERNEL, "linked_activity"),  # second pass, a kernel's link, late
        (LATE_KERNEL - 1, "flow_start"),  # the cuda_runtime launch: its flow
    ],
)
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_accessor_fails_late(tmp_path, index, field, suffix):
    path = tmp_path / f"t{suffix}"
    path.write_bytes(OLD)
    exc = AccessorError(f"{field} at {index}")
    result = probed(SyntheticResult(N_LATE, gpu=True), replace={index: failing(field, exc)})
    with pytest.raises(AccessorError) as info:
        kinetrace.export_chrome_trace(result, path, workers=1)
    assert info.value is exc
    assert_untouched(tmp_path, {path.name: OLD})
    assert_no_kinetrace_threads()


@pytest.mark.parametrize(
    "field", ["name", "metadata_json"], ids=["linked-name", "linked-comms-metadata"]
)
def test_linked_activity_accessor_fails(tmp_path, field):
    """The kernel's linked op is read for ``record_param_comms`` metadata: its failures
    propagate too."""
    path = tmp_path / "t.json"
    path.write_bytes(OLD)
    exc = AccessorError(field)
    result = probed(
        SyntheticResult(N_LATE, gpu=True), replace={LATE_KERNEL: failing_link(field, exc)}
    )
    with pytest.raises(AccessorError) as info:
        kinetrace.export_chrome_trace(result, path, workers=1)
    assert info.value is exc
    assert_untouched(tmp_path, {"t.json": OLD})


@pytest.mark.parametrize(
    "exc",
    [MemoryError(), KeyboardInterrupt(), SystemExit(3), RecursionError("deep")],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("stage", ["first", "second"])
def test_any_exception_type_propagates_unchanged(tmp_path, exc, stage):
    path = tmp_path / "t.json.gz"
    path.write_bytes(OLD)
    field = "timestamp" if stage == "first" else "metadata_json"
    result = probed(SyntheticResult(N_LATE), replace={2 * BATCH + 5: failing(field, exc)})
    with pytest.raises(type(exc)) as info:
        kinetrace.export_chrome_trace(result, path, workers=1)
    assert info.value is exc
    assert_untouched(tmp_path, {path.name: OLD})
    assert_no_kinetrace_threads()


class BrokenSequence(Probe):
    """A lazy source that fails itself: ``fail_on`` is one of "len", "iter", or a
    ``(pass, start)`` slice."""

    def __init__(self, inner: Sequence[Any], fail_on: Any, exc: BaseException) -> None:
        super().__init__(inner)
        self.fail_on = fail_on
        self.exc = exc

    def __len__(self) -> int:
        if self.fail_on == "len":
            raise self.exc
        return super().__len__()

    def __iter__(self) -> Iterator[Any]:
        if self.fail_on == "iter":
            raise self.exc
        return super().__iter__()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start = index.indices(super().__len__())[0]
            if (self.passes + (start == 0), start) == self.fail_on:
                raise self.exc
        return super().__getitem__(index)


class BrokenResult:
    def __init__(self, base: SyntheticResult, fail_on: Any, exc: BaseException) -> None:
        self.base = base
        self.fail_on = fail_on
        self.exc = exc

    def trace_activities(self) -> Any:
        if self.fail_on == "trace_activities":
            raise self.exc
        return BrokenSequence(self.base.trace_activities(), self.fail_on, self.exc)

    def trace_start_ns(self) -> int:
        if self.fail_on == "trace_start_ns":
            raise self.exc
        return self.base.trace_start_ns()


@pytest.mark.parametrize(
    "fail_on",
    ["trace_activities", "len", "iter", (1, 2 * BATCH), "trace_start_ns", (2, 0), (2, 3 * BATCH)],
    ids=str,
)
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_source_fails(tmp_path, fail_on, background):
    path = tmp_path / "t.json"
    path.write_bytes(OLD)
    exc = AccessorError(str(fail_on))
    result = BrokenResult(SyntheticResult(N_LATE), fail_on, exc)
    with pytest.raises(AccessorError) as info:
        # One process: a source failing in a forked worker is test_forked_worker_* below.
        outcome = kinetrace.export_chrome_trace(result, path, background=background, workers=1)
        if background:  # read in the background process: the handle raises a copy
            outcome.result(timeout=60)
    if background:
        assert info.value.args == exc.args and info.value is not exc
    else:
        assert info.value is exc
    assert_untouched(tmp_path, {"t.json": OLD})
    assert_no_kinetrace_threads()
