"""The trace consumers the tests load exports into (HolisticTraceAnalysis, TensorBoard's
profiler plugin), imported so that a broken install is never a silent skip.

They are installed with ``--no-deps`` (their own pins would move torch), so a missing
dependency of theirs makes the import fail. Outside CI a missing consumer skips the test
with the import's error as the reason; with ``KINETRACE_REQUIRE_CONSUMERS`` set (``nox -s
suite`` sets it, as ``KINETRACE_REQUIRE_CATAPULT`` for the browser) it fails the test.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

__all__ = ["REQUIRE", "consumer"]

#: The variable that turns a consumer that cannot be imported into a failure.
REQUIRE = "KINETRACE_REQUIRE_CONSUMERS"


def consumer(module: str) -> ModuleType:
    """``module`` imported; a skip naming the error where it cannot be, or a failure where
    :data:`REQUIRE` is set."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"cannot import {module}: {type(exc).__name__}: {exc}"
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set, but {reason}", pytrace=False)
        pytest.skip(reason)
