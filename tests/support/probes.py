"""Sources that report or fail at a chosen point of an export: :class:`Probe` wraps a lazy
activity sequence, calls back before each batch is built (so a test can act at "the fourth
batch of the first pass") and can replace single activities by ones whose accessor raises
(:func:`failing`, :func:`failing_link`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kinetrace._export import extract as _extract
from support.synthetic import SyntheticActivity, SyntheticResult

__all__ = [
    "BATCH",
    "N_LATE",
    "AccessorError",
    "Probe",
    "ProbedResult",
    "failing",
    "failing_link",
    "probed",
]

#: How many activities ``_export.extract`` pulls per batch.
BATCH = _extract.BATCH_SIZE
#: A source long enough (several batches a pass) that a failure can come late.
N_LATE = 40_000


class AccessorError(Exception):
    """Raised by a synthetic accessor; must reach the caller unchanged."""


class Probe(Sequence):  # type: ignore[type-arg]
    """Wraps a lazy activity sequence and calls ``on_slice(pass_number, start)`` before each
    batch is built (pass 1 = the first pass, 2 = the second: a slice starting at 0 begins a
    pass). Optionally replaces single activities (``replace``: index -> factory)."""

    def __init__(
        self,
        inner: Sequence[Any],
        on_slice: Callable[[int, int], None] | None = None,
        replace: dict[int, Callable[[Any], Any]] | None = None,
    ) -> None:
        self.inner = inner
        self.on_slice = on_slice
        self.replace = replace or {}
        self.passes = 0

    def __len__(self) -> int:
        return len(self.inner)

    def _fix(self, index: int, act: Any) -> Any:
        make = self.replace.get(index)
        return act if make is None else make(act)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start = index.indices(len(self))[0]
            if start == 0:
                self.passes += 1
            if self.on_slice is not None:
                self.on_slice(self.passes, start)
            items = self.inner[index]
            indices = range(*index.indices(len(self)))
            return [self._fix(i, a) for i, a in zip(indices, items, strict=True)]
        return self._fix(index, self.inner[index])

    def __iter__(self) -> Iterator[Any]:
        for i, act in enumerate(self.inner):
            yield self._fix(i, act)


class ProbedResult:
    """A result whose ``trace_activities()`` is a :class:`Probe`."""

    def __init__(self, base: SyntheticResult, probe: Probe) -> None:
        self.base = base
        self.probe = probe

    def trace_activities(self) -> Probe:
        return self.probe

    def trace_start_ns(self) -> int:
        return self.base.trace_start_ns()


def probed(base: SyntheticResult, **kwargs: Any) -> ProbedResult:
    """``base`` seen through a :class:`Probe` made with ``kwargs``."""
    return ProbedResult(base, Probe(base.trace_activities(), **kwargs))


def failing(field: str, exc: BaseException) -> Callable[[SyntheticActivity], SyntheticActivity]:
    """A factory for :class:`Probe`: the activity at that index raises ``exc`` from
    ``field()`` (a subclass, so the activities are of two types: ``methodcaller`` path)."""

    def raiser(self: Any) -> Any:
        raise exc

    cls = type(f"Failing_{field}", (SyntheticActivity,), {"__slots__": (), field: raiser})

    def make(act: SyntheticActivity) -> SyntheticActivity:
        return cls(act._c, act._i)

    return make


def failing_link(field: str, exc: BaseException, name: str = "record_param_comms") -> Any:
    """A factory whose kernel's linked activity (a ``record_param_comms`` op by default)
    raises ``exc`` from ``field()``."""

    def raiser(self: Any) -> Any:
        raise exc

    linked_cls = type(
        "FailingLinked",
        (SyntheticActivity,),
        {"__slots__": (), "name": lambda self: name, field: raiser}
        if field != "name"
        else {"__slots__": (), "name": raiser},
    )

    def linked_activity(self: Any) -> Any:
        return linked_cls(self._c, self._i - self._i % 16 + 13)

    cls = type(
        "KernelWithFailingLink",
        (SyntheticActivity,),
        {"__slots__": (), "linked_activity": linked_activity},
    )

    def make(act: SyntheticActivity) -> SyntheticActivity:
        return cls(act._c, act._i)

    return make
