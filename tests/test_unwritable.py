"""Unwritable places: a read-only directory and a read-only destination file give
``PermissionError`` (``EACCES``) naming the destination and leave the directory as it was.
The exports run in a subprocess as an ordinary user (:mod:`support.users`: as root, without
the capabilities that bypass file permissions)."""

from __future__ import annotations

import errno
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from support.aftermath import OLD, assert_untouched
from support.users import run_python

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import kinetrace
    from support.synthetic import SyntheticResult

    results = {}
    for path in sys.argv[1:]:
        try:
            kinetrace.export_chrome_trace(SyntheticResult(1000), path)
        except OSError as exc:
            results[path] = [type(exc).__name__, exc.errno, path in str(exc)]
        else:
            results[path] = ["ok", None, False]
    print(json.dumps(results))
    """
)


def export_unprivileged(*paths: Path) -> dict[str, list[Any]]:
    """Each path's export as an ordinary user: [exception, errno, whether it names the path]."""
    done = run_python("-c", SCRIPT, *paths)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "replace"])
def test_read_only_directory(tmp_path, suffix, existing):
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / f"t{suffix}"
    if existing:
        path.write_bytes(OLD)
    directory.chmod(0o500)
    try:
        results = export_unprivileged(path)
    finally:
        directory.chmod(0o700)
    assert results == {str(path): ["PermissionError", errno.EACCES, True]}
    assert_untouched(directory, {path.name: OLD} if existing else {})


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_read_only_destination_file_is_not_replaced(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    path.write_bytes(OLD)
    path.chmod(0o444)
    assert export_unprivileged(path) == {str(path): ["PermissionError", errno.EACCES, True]}
    assert_untouched(tmp_path, {path.name: OLD})
