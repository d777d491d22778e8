"""Unwritable places: a read-only directory (as a user, and as root without
``CAP_DAC_OVERRIDE`` in a subprocess) and a read-only destination file give
``PermissionError`` (``EACCES``) and leave the directory as it was."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from support.aftermath import (
    OLD,
    assert_untouched,
    subprocess_env,
)
from support.synthetic import SyntheticResult


def can_write_in(directory: Path) -> bool:
    probe = directory / ".probe"
    try:
        probe.write_bytes(b"")
    except PermissionError:
        return False
    probe.unlink()
    return True


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
        if can_write_in(directory):
            pytest.skip("permissions are not enforced for this user (root)")
        with pytest.raises(PermissionError) as info:
            kinetrace.export_chrome_trace(SyntheticResult(1000), path)
        assert info.value.errno == errno.EACCES
        assert str(path) in str(info.value)
    finally:
        directory.chmod(0o700)
    assert_untouched(directory, {path.name: OLD} if existing else {})


UNPRIVILEGED_SCRIPT = textwrap.dedent(
    """
    import errno, json, os, sys
    import kinetrace
    from support.synthetic import SyntheticResult

    results = {}
    for path in sys.argv[1:]:
        try:
            kinetrace.export_chrome_trace(SyntheticResult(1000), path)
        except OSError as exc:
            results[path] = [type(exc).__name__, exc.errno]
        else:
            results[path] = ["ok", None]
    print(json.dumps(results))
    """
)

#: Runs a command as root without the capabilities that bypass file permissions.
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def run_without_dac_override(paths: list[Path]) -> dict[str, list[Any]]:
    if os.geteuid() != 0:
        pytest.skip("only needed as root (the plain test covers other users)")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to drop CAP_DAC_OVERRIDE")
    done = subprocess.run(
        [*DROP_DAC, sys.executable, "-c", UNPRIVILEGED_SCRIPT, *map(str, paths)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 and "setpriv" in done.stderr:
        pytest.skip(f"cannot drop capabilities: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_read_only_directory_as_root_without_dac_override(tmp_path):
    """The same as test_read_only_directory, for root: the export runs in a subprocess
    without CAP_DAC_OVERRIDE, so the directory's mode applies."""
    directory = tmp_path / "ro"
    directory.mkdir()
    (directory / "old.json").write_bytes(OLD)
    paths = [directory / "t.json", directory / "t.json.gz", directory / "old.json"]
    directory.chmod(0o500)
    try:
        results = run_without_dac_override(paths)
    finally:
        directory.chmod(0o700)
    assert results == {str(p): ["PermissionError", errno.EACCES] for p in paths}
    assert_untouched(directory, {"old.json": OLD})


def test_read_only_destination_file_is_not_replaced(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(OLD)
    path.chmod(0o444)
    if os.geteuid() == 0:
        results = run_without_dac_override([path])
        assert results == {str(path): ["PermissionError", errno.EACCES]}
    else:
        with pytest.raises(PermissionError):
            kinetrace.export_chrome_trace(SyntheticResult(1000), path)
    assert_untouched(tmp_path, {"t.json": OLD})
