"""A genuinely full filesystem (small tmpfs mounts; skipped where mounting is not
permitted): ``ENOSPC`` reaches the caller as an ``OSError`` naming the file, the temporary
file's space is given back, an existing file is untouched, and the filesystem takes the
next trace that fits. One process, two workers, background, the gzip writer, no inodes.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import kinetrace
from support.aftermath import (
    OLD,
    assert_no_kinetrace_threads,
    assert_untouched,
    background_oserror,
)
from support.synthetic import SyntheticResult
from support.traces import assert_valid_trace


@pytest.fixture
def tiny_fs(tmp_path) -> Iterator[Callable[..., Path]]:
    """Mounts small tmpfs filesystems (``mount(size="1m", nr_inodes=None)``); unmounted at
    teardown. Skips where mounting is not permitted (not root, no CAP_SYS_ADMIN)."""
    mounted: list[Path] = []

    def mount(size: str = "1m", nr_inodes: int | None = None) -> Path:
        if shutil.which("mount") is None:
            pytest.skip("no mount command")
        target = tmp_path / f"fs{len(mounted)}"
        target.mkdir()
        options = f"size={size}" + (f",nr_inodes={nr_inodes}" if nr_inodes else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        mounted.append(target)
        return target

    try:
        yield mount
    finally:
        for target in reversed(mounted):
            done = subprocess.run(["umount", str(target)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def used_blocks(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_blocks - st.f_bfree


@pytest.mark.parametrize(
    "name, size, source",
    [
        # ~550 KB: all of it waits in the 1 MiB output buffer, the error comes from the
        # flush when the file is finished.
        ("small.json", "256k", lambda: SyntheticResult(1_500)),
        ("big.json", "1m", lambda: SyntheticResult(30_000)),
        ("big.json.gz", "1m", lambda: SyntheticResult(3_000, payload=2_000)),
    ],
    ids=["json-final-flush", "json", "gz"],
)
@pytest.mark.parametrize("existing", [False, True], ids=["new", "replace"])
@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
def test_full_filesystem(tiny_fs, name, size, source, existing, workers):
    """With workers, a worker's slice file (beside the destination) is what fills the disk:
    its OSError is carried back to the caller."""
    fs = tiny_fs(size)
    keep = {"keep.txt": b"x" * 1000}
    (fs / "keep.txt").write_bytes(keep["keep.txt"])
    if existing:
        keep[name] = OLD
        (fs / name).write_bytes(OLD)
    before = used_blocks(fs)
    with pytest.raises(OSError) as info:
        kinetrace.export_chrome_trace(source(), fs / name, workers=workers)
    assert info.value.errno == errno.ENOSPC, info.value
    assert type(info.value) is OSError
    assert name in str(info.value)
    assert_untouched(fs, keep)
    assert used_blocks(fs) == before, "the temporary file's space was not given back"
    assert_no_kinetrace_threads()
    # The filesystem is usable again: a trace that fits is written.
    kinetrace.export_chrome_trace(SyntheticResult(100), fs / name)
    assert_valid_trace(fs / name)


def test_full_filesystem_background(tiny_fs):
    fs = tiny_fs()
    (fs / "t.json").write_bytes(OLD)
    error = background_oserror(
        lambda: kinetrace.export_chrome_trace(
            SyntheticResult(30_000), fs / "t.json", background=True
        )
    )
    assert error.errno == errno.ENOSPC
    assert_untouched(fs, {"t.json": OLD})


def test_no_inodes_left(tiny_fs):
    """ENOSPC when the temporary file cannot even be created."""
    fs = tiny_fs(nr_inodes=2)  # the root directory and one file
    (fs / "t.json").write_bytes(OLD)
    with pytest.raises(OSError) as info:
        kinetrace.export_chrome_trace(SyntheticResult(10), fs / "t.json")
    assert info.value.errno == errno.ENOSPC
    assert_untouched(fs, {"t.json": OLD})


def test_full_filesystem_gzip_writer(tiny_fs):
    fs = tiny_fs()
    with pytest.raises(OSError) as info:
        with kinetrace.GzipWriter(fs / "data.gz", threads=2) as writer:
            for _ in range(4):
                writer.write(os.urandom(1 << 20))
    assert info.value.errno == errno.ENOSPC
    assert_untouched(fs, {})
