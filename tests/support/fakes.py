"""Fake profiler activities: ``FakeActivity`` mimics ``torch._C._autograd._ITraceActivity``
(the objects ``_ProfilerResult.trace_activities()`` returns) and counts how often each
accessor is called, so tests can check what kinetrace reads; ``FakeResult`` mimics the
``_ProfilerResult``. ``Raise`` makes an accessor raise.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from support import T0

__all__ = ["FIELDS", "PID", "FakeActivity", "FakeResult", "Raise"]

#: The exporting process: both exporters label ``device_id == os.getpid()`` as the CPU.
PID = os.getpid()

#: The accessors of ``_ITraceActivity``.
FIELDS = (
    "name",
    "type",
    "device_id",
    "resource_id",
    "timestamp",
    "duration",
    "correlation_id",
    "linked_correlation_id",
    "flow_id",
    "flow_type",
    "flow_start",
    "metadata_json",
    "linked_activity",
)


class Raise:
    """A field value that makes the accessor raise ``exc`` instead of returning."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class FakeActivity:
    """An ``_ITraceActivity`` look-alike that counts calls per accessor in ``calls``."""

    def __init__(
        self,
        *,
        name: Any = "aten::add",
        type: Any = "cpu_op",
        device_id: Any = PID,
        resource_id: Any = PID,
        timestamp: Any = T0,
        duration: Any = 1000,
        correlation_id: Any = 0,
        linked_correlation_id: Any = 0,
        flow_id: Any = 0,
        flow_type: Any = 0,
        flow_start: Any = False,
        metadata_json: Any = "",
        linked_activity: Any = None,
    ) -> None:
        self.values: dict[str, Any] = {
            "name": name,
            "type": type,
            "device_id": device_id,
            "resource_id": resource_id,
            "timestamp": timestamp,
            "duration": duration,
            "correlation_id": correlation_id,
            "linked_correlation_id": linked_correlation_id,
            "flow_id": flow_id,
            "flow_type": flow_type,
            "flow_start": flow_start,
            "metadata_json": metadata_json,
            "linked_activity": linked_activity,
        }
        self.calls: Counter[str] = Counter()

    def peek(self, field: str) -> Any:
        """The value of ``field`` without counting a call."""
        return self.values[field]

    def _get(self, field: str) -> Any:
        self.calls[field] += 1
        value = self.values[field]
        if isinstance(value, Raise):
            raise value.exc
        return value

    def name(self) -> Any:
        return self._get("name")

    def type(self) -> Any:
        return self._get("type")

    def device_id(self) -> Any:
        return self._get("device_id")

    def resource_id(self) -> Any:
        return self._get("resource_id")

    def timestamp(self) -> Any:
        return self._get("timestamp")

    def duration(self) -> Any:
        return self._get("duration")

    def correlation_id(self) -> Any:
        return self._get("correlation_id")

    def linked_correlation_id(self) -> Any:
        return self._get("linked_correlation_id")

    def flow_id(self) -> Any:
        return self._get("flow_id")

    def flow_type(self) -> Any:
        return self._get("flow_type")

    def flow_start(self) -> Any:
        return self._get("flow_start")

    def metadata_json(self) -> Any:
        return self._get("metadata_json")

    def linked_activity(self) -> Any:
        return self._get("linked_activity")

    def __repr__(self) -> str:
        v = self.values
        name = v["name"] if not isinstance(v["name"], str) or len(v["name"]) < 60 else "<long>"
        return f"FakeActivity({v['type']!r}, {name!r}, did={v['device_id']}, ts={v['timestamp']})"


class FakeResult:
    """A ``_ProfilerResult`` look-alike: ``trace_activities()`` returns the same list object
    on every call, ``trace_start_ns()`` a fixed start."""

    def __init__(self, activities: Sequence[Any], trace_start_ns: int | None = None) -> None:
        self.activities = list(activities)
        if trace_start_ns is None:
            stamps = [a.peek("timestamp") for a in self.activities if isinstance(a, FakeActivity)]
            stamps = [t for t in stamps if isinstance(t, int)]
            trace_start_ns = min(stamps) if stamps else T0
        self.start_ns = trace_start_ns
        self.trace_activities_calls = 0

    def trace_activities(self) -> list[Any]:
        self.trace_activities_calls += 1
        return self.activities

    def trace_start_ns(self) -> int:
        return self.start_ns

    def all_activities(self) -> list[FakeActivity]:
        """The listed activities and every activity linked from them (each object once)."""
        seen: dict[int, FakeActivity] = {}
        for act in self.activities:
            seen.setdefault(id(act), act)
            linked = act.peek("linked_activity")
            if isinstance(linked, FakeActivity):
                seen.setdefault(id(linked), linked)
        return list(seen.values())

    def reset_counts(self) -> None:
        for act in self.all_activities():
            act.calls.clear()
        self.trace_activities_calls = 0
