"""Checks that need an ordinary user's file permissions, whoever runs the tests.

Root (CI runs the tests as root) reads and writes any file whatever its mode, so a check of
a permission error would check nothing. :func:`unprivileged` runs a command so that the
permissions apply: as it is for any other user; as root through ``setpriv`` (util-linux),
without the capabilities that bypass them. It stays uid 0, the owner of everything the test
made, so it meets exactly the permissions an ordinary user meets on its own files, and it
still reaches the virtualenv and ``tmp_path`` (under ``/tmp/pytest-of-root``, mode 0700)
without changing any owner or mode: another uid (``nobody``) could reach neither, and a
folder given to it would test the folder's owner, not its mode.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

import pytest

from support.aftermath import subprocess_env

__all__ = ["ALL", "FILE_PERMISSIONS", "run_python", "unprivileged"]

#: Every capability: what an ordinary user holds none of (``CAP_CHOWN`` included).
ALL = ("all",)
#: The capabilities that bypass file permissions: reading, writing, searching, and what only
#: a file's owner may do (chmod). Dropping only these keeps ``CAP_SETUID`` (a check that
#: plays another user in a forked child needs it).
FILE_PERMISSIONS = ("dac_override", "dac_read_search", "fowner")


def _setpriv(drop: Sequence[str], groups: Sequence[int]) -> list[str]:
    command = ["setpriv", "--bounding-set=" + ",".join(f"-{c}" for c in drop)]
    if groups:
        command.append("--groups=" + ",".join(map(str, groups)))
    return [*command, "--"]


@functools.cache
def _cannot_drop(drop: tuple[str, ...], groups: tuple[int, ...]) -> str | None:
    """Why ``setpriv`` cannot run a command so here (``None`` where it can): asked once, so
    that a failed check is never taken for a missing ``setpriv``."""
    if shutil.which("setpriv") is None:
        return "as root, needs setpriv (util-linux) to drop the capabilities of root"
    done = subprocess.run(
        [*_setpriv(drop, groups), "true"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"setpriv cannot drop the capabilities of root here: {done.stderr.strip()}"
    return None


def unprivileged(
    command: Sequence[str], *, drop: Sequence[str] = ALL, groups: Sequence[int] = ()
) -> list[str]:
    """``command``, to run where file permissions apply: as it is when this process is not
    root; as root under ``setpriv`` without the capabilities ``drop`` (every one by default)
    and, if given, with the supplementary ``groups`` (these need root: a test that gives
    them is one that needs root). Skips where ``setpriv`` is missing or not allowed."""
    if os.geteuid() != 0:
        if groups:
            pytest.skip("setting the supplementary groups of a command needs root")
        return list(command)
    reason = _cannot_drop(tuple(drop), tuple(groups))
    if reason is not None:
        pytest.skip(reason)
    return [*_setpriv(drop, groups), *command]


def run_python(
    *args: str | os.PathLike[str],
    drop: Sequence[str] = ALL,
    groups: Sequence[int] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python ARGS...`` (``-c SCRIPT ...``, ``-m kinetrace ...``), :func:`unprivileged`,
    with the tests' import path (:func:`support.aftermath.subprocess_env`); its exit status
    and output are the caller's to check. The default ``timeout`` is a hang's, not a slow
    run's: the slowest such call measured 16 s (test_fallback's, which imports torch and
    profiles, on 2 busy cores), 120 s is over 7 times that."""
    command = unprivileged([sys.executable, *map(os.fspath, args)], drop=drop, groups=groups)
    return subprocess.run(
        command, env=subprocess_env(), capture_output=True, text=True, timeout=timeout
    )
