"""The hooks only a build with the cargo feature ``test-hooks`` has (never a release wheel:
``tests/test_install.py`` checks): ``_panic_for_tests``, the writer-thread panic
and a panicking reader of many sources, ``KINETRACE_TEST_PANIC_READING=NAME``
(``tests/test_panics.py``), and ``KINETRACE_TEST_SLOWDOWN`` (``tests/test_bench_gate.py``).
``noxfile.py``'s ``hooks`` session runs those files against such a build with
``KINETRACE_REQUIRE_TEST_HOOKS=1``, where a build without them fails instead of skipping."""

from __future__ import annotations

import os

import pytest

from kinetrace import _kinetrace

__all__ = ["REQUIRE", "require_test_hooks"]

#: The variable that turns a build without the hooks into a failure.
REQUIRE = "KINETRACE_REQUIRE_TEST_HOOKS"


def require_test_hooks() -> None:
    """Skips the calling test module where the extension has no test hooks (fails it where
    :data:`REQUIRE` is set). Call at module level."""
    if hasattr(_kinetrace, "_panic_for_tests"):
        return
    if os.environ.get(REQUIRE):
        raise RuntimeError(
            f"{REQUIRE} is set but kinetrace._kinetrace was built without the test-hooks feature"
        )
    pytest.skip(
        "needs the test hooks, only in a build with the cargo feature test-hooks "
        "(noxfile.py's hooks session runs this file against one)",
        allow_module_level=True,
    )
