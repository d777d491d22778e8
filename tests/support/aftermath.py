"""What an export that failed (or was interrupted) must leave behind: nothing. No
``.*.kinetrace-tmp`` file, an existing destination untouched, no kinetrace thread, no child
process; and the environment Python subprocesses need to import the tests' helpers.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "OLD",
    "TMP_SUFFIX",
    "all_children",
    "assert_no_kinetrace_threads",
    "assert_untouched",
    "background_oserror",
    "kinetrace_threads",
    "subprocess_env",
    "temp_files",
]

#: The suffix of the writer's temporary file beside the destination.
TMP_SUFFIX = ".kinetrace-tmp"
#: What a test writes at the destination first: a failed export must leave it as it is.
OLD = b"old content, must survive\n"
TESTS = Path(__file__).resolve().parent.parent


def temp_files(directory: Path) -> list[str]:
    """The writer's temporary files in ``directory``."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TMP_SUFFIX))


def kinetrace_threads() -> list[str]:
    """Names of this process's threads started by kinetrace (writer, gzip workers)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("kinetrace"):
            names.append(name)
    return names


def assert_no_kinetrace_threads(timeout: float = 2.0) -> None:
    """kinetrace's threads are joined before an export returns or raises; allow the kernel a
    moment to reap them."""
    deadline = time.monotonic() + timeout
    while (left := kinetrace_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not left, f"threads left running: {left}"


def assert_untouched(directory: Path, expected: dict[str, bytes]) -> None:
    """``directory`` holds exactly the ``expected`` files with their contents (no temp files,
    no partial trace)."""
    assert sorted(p.name for p in directory.iterdir()) == sorted(expected)
    for name, content in expected.items():
        assert (directory / name).read_bytes() == content, f"{name} was modified"


def all_children() -> list[int]:
    """This process's child processes now (zombies included)."""
    pids = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def subprocess_env() -> dict[str, str]:
    """The environment for Python subprocesses: this interpreter's import path with
    ``tests/`` first, so they import the same kinetrace and ``support``."""
    env = dict(os.environ)
    paths = [str(TESTS), *(p for p in sys.path if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def background_oserror(start: Callable[[], Any]) -> OSError:
    """The OSError of a background export that must fail: raised by the call (the writer
    failed while the fields were still being extracted) or by its handle, never neither."""
    try:
        handle = start()
    except OSError as exc:
        return exc
    with pytest.raises(OSError) as info:
        handle.result(timeout=60)
    return info.value
