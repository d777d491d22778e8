"""torch < 2.13 fallback: Kineto's own writer (``result.save``) streamed into the destination.

The installed torch has ``trace_activities()``, so the fallback is forced with proxies that
expose only ``save`` (and ``trace_start_ns``) of a real ``_ProfilerResult``, or that play
Kineto's part by writing a real Kineto trace into the path they are given.
"""

from __future__ import annotations

import errno
import gc
import gzip
import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.profiler import profile

import kinetrace
from kinetrace import _kinetrace
from kinetrace._export import fallback as _fallback
from kinetrace._export.fallback import FallbackWarning
from support.users import run_python

# Also run on torch 2.11/2.12 themselves (the compatibility venvs), which warn once per
# process that a profile clears its events each cycle.
pytestmark = [
    pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs need POSIX"),
    pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning"),
]


@pytest.fixture(autouse=True)
def _first_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """FallbackWarning is given once per process: each test starts as a new process."""
    monkeypatch.setattr(_fallback, "_warned", set())


def record(ops: int = 50) -> Any:
    """A stopped profile's ``_ProfilerResult``."""
    a = torch.ones(8, 8)
    with profile() as prof:
        for _ in range(ops):
            torch.mm(a, a)
    return prof.profiler.kineto_results


class SaveOnly:
    """A torch < 2.13 result: ``save`` and ``trace_start_ns`` only."""

    def __init__(self, result: Any) -> None:
        self._result = result
        self.saves: list[str] = []

    def save(self, path: str) -> None:
        self.saves.append(path)
        self._result.save(path)

    def trace_start_ns(self) -> int:
        return int(self._result.trace_start_ns())


def fake_profile(result: Any) -> Any:
    """A stopped ``torch.profiler.profile`` whose autograd profiler holds ``result``."""
    return SimpleNamespace(
        profiler=SimpleNamespace(kineto_results=result), _trace_metadata={"k": '"v"'}
    )


def quoted(path: str | os.PathLike[str]) -> bytes:
    return b'"' + os.fsencode(path) + b'"'


@pytest.fixture(scope="module")
def kineto_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str]:
    """A real Kineto trace (a few MB) and the path it names as traceName."""
    path = str(tmp_path_factory.mktemp("baseline") / "baseline.json")
    record(8000).save(path)
    return Path(path).read_bytes(), path


class KinetoStandIn:
    """Writes a real Kineto trace where Kineto would, the way ``mode`` says:

    ``direct``: into ``path`` (older Kineto); ``rename``: into ``path + ".tmp"``, then renamed
    over ``path`` (torch 2.11 to 2.15); ``replace``: removes whatever is at ``path`` (a FIFO)
    and writes a regular file there;
    ``both``: into both FIFOs; ``nothing``: writes nothing; ``raise``: raises before writing.
    ``after_chunk`` runs after every 64 KiB (with the scratch directory).
    """

    def __init__(
        self,
        trace: tuple[bytes, str],
        mode: str = "direct",
        after_chunk: Callable[[str], None] | None = None,
    ) -> None:
        self.text, self.baseline_path = trace
        self.mode = mode
        self.after_chunk = after_chunk
        self.saves = 0

    def trace_start_ns(self) -> int:
        return 1

    def save(self, path: str) -> None:
        self.saves += 1
        if self.mode == "raise":
            raise RuntimeError("save failed on purpose")
        text = self.text.replace(quoted(self.baseline_path), quoted(path))
        if self.mode == "nothing":
            return
        if self.mode == "replace" and os.path.lexists(path):
            os.unlink(path)
        target = path + ".tmp" if self.mode == "rename" else path
        with open(target, "wb") as f:
            for lo in range(0, len(text), 1 << 16):
                f.write(text[lo : lo + (1 << 16)])
                f.flush()
                if self.after_chunk is not None:
                    self.after_chunk(os.path.dirname(path))
        if self.mode == "rename":
            os.rename(target, path)
        if self.mode == "both":
            with open(path + ".tmp", "wb") as f:
                f.write(text[:100])

    def expected(self, destination: str | os.PathLike[str]) -> bytes:
        name = json.dumps(os.fsdecode(destination), ensure_ascii=False).encode()
        return self.text.replace(quoted(self.baseline_path), name)


def export(source: Any, path: Any, **kwargs: Any) -> tuple[Any, str]:
    """``kinetrace.export_chrome_trace`` through the fallback: (its return, the warning)."""
    with pytest.warns(FallbackWarning) as caught:
        out = kinetrace.export_chrome_trace(source, path, **kwargs)
    assert len(caught) == 1
    return out, str(caught[0].message)


def unpack(path: Path) -> bytes:
    """The text of a file holding exactly one gzip member."""
    d = zlib.decompressobj(31)
    text = d.decompress(path.read_bytes()) + d.flush()
    assert d.eof, "gzip stream not finished"
    assert d.unused_data == b"", "more than one gzip member"
    return text


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def assert_kineto_format(text: bytes, destination: Path, stats: Any) -> dict[str, Any]:
    trace = json.loads(text)
    # Kineto's C++ writer, not torch's Python exporter: pretty-printed, schemaVersion first
    # (after the metadata kinetrace carries itself, if any).
    assert b'\n    "schemaVersion": 1,' in text[:2000]
    assert b'\n    "ph": "X",' in text
    assert trace["displayTimeUnit"] == "ms"
    assert "baseTimeNanoseconds" in trace
    assert trace["traceName"] == str(destination)
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::mm" in names
    assert stats.events == len(trace["traceEvents"])
    assert stats.uncompressed_bytes == len(text)
    assert stats.file_bytes == destination.stat().st_size
    assert stats.path == str(destination)
    return trace


def test_warning_is_one_line_and_a_user_warning(tmp_path: Path) -> None:
    assert issubclass(FallbackWarning, UserWarning)
    _, message = export(SaveOnly(record()), tmp_path / "t.json")
    assert "\n" not in message
    assert ">= 2.13" in message and "Kineto" in message
    assert "ignored" not in message


def test_plain_json_is_kinetos_output(tmp_path: Path) -> None:
    source = SaveOnly(record())
    dest = tmp_path / "t.json"
    before = open_fds()
    stats, _ = export(source, dest)
    assert open_fds() == before
    assert len(source.saves) == 1
    assert stats.file_bytes == stats.uncompressed_bytes
    assert_kineto_format(dest.read_bytes(), dest, stats)
    assert os.listdir(tmp_path) == ["t.json"]


def test_gzip_is_one_member_of_kinetos_output(tmp_path: Path) -> None:
    dest = tmp_path / "t.json.gz"
    stats, _ = export(fake_profile(SaveOnly(record())), dest, threads=3)
    text = unpack(dest)
    assert gzip.decompress(dest.read_bytes()) == text
    assert_kineto_format(text, dest, stats)
    assert stats.file_bytes < stats.uncompressed_bytes
    assert os.listdir(tmp_path) == ["t.json.gz"]


@pytest.mark.parametrize("mode", ["direct", "rename", "replace"])
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_output_is_kinetos_bytes(
    tmp_path: Path, kineto_trace: tuple[bytes, str], mode: str, name: str
) -> None:
    """Byte for byte what Kineto wrote, with traceName naming the destination, whichever
    file Kineto writes (a FIFO replaced by a regular file is streamed after ``save``)."""
    source = KinetoStandIn(kineto_trace, mode)
    dest = tmp_path / name
    stats, _ = export(source, dest, compresslevel=1, threads=2)
    text = unpack(dest) if name.endswith(".gz") else dest.read_bytes()
    assert text == source.expected(dest)
    assert_kineto_format(text, dest, stats)
    assert os.listdir(tmp_path) == [name]


def test_without_fifos_a_temporary_file_is_streamed(
    tmp_path: Path, kineto_trace: tuple[bytes, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where os.mkfifo is missing (Windows), save writes a regular file that is then
    compressed into place and removed."""
    monkeypatch.delattr(os, "mkfifo")
    source = KinetoStandIn(kineto_trace, "rename")
    dest = tmp_path / "t.json.gz"
    stats, _ = export(source, dest)
    assert unpack(dest) == source.expected(dest)
    assert stats.events > 8000
    assert os.listdir(tmp_path) == ["t.json.gz"]


def test_gzip_export_writes_no_full_size_file(
    tmp_path: Path, kineto_trace: tuple[bytes, str]
) -> None:
    """While Kineto writes, the scratch directory holds only FIFOs, and no file anywhere
    beside the destination comes near the trace's size."""
    text_len = len(kineto_trace[0])
    assert text_len > 2 << 20
    checks = []

    def check(scratch: str) -> None:
        modes = {e.name: e.stat(follow_symlinks=False).st_mode for e in os.scandir(scratch)}
        assert modes and all(stat.S_ISFIFO(m) for m in modes.values()), modes
        for root, _, files in os.walk(tmp_path):
            for f in files:
                st = os.lstat(os.path.join(root, f))
                if stat.S_ISREG(st.st_mode):
                    assert st.st_size < text_len // 4, (f, st.st_size)
        checks.append(scratch)

    source = KinetoStandIn(kineto_trace, "rename", after_chunk=check)
    dest = tmp_path / "t.json.gz"
    stats, _ = export(source, dest)
    assert len(checks) >= 32
    # FIFOs hold no data: they go to the system's temporary directory.
    assert os.path.dirname(checks[0]) == tempfile.gettempdir()
    assert stats.file_bytes < text_len // 4
    assert unpack(dest) == source.expected(dest)
    assert os.listdir(tmp_path) == ["t.json.gz"]


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_save_error_leaves_the_destination_untouched(
    tmp_path: Path, kineto_trace: tuple[bytes, str], name: str
) -> None:
    dest = tmp_path / name
    dest.write_bytes(b"old")
    before = open_fds()
    with pytest.raises(RuntimeError, match="save failed on purpose"):
        kinetrace.export_chrome_trace(KinetoStandIn(kineto_trace, "raise"), dest)
    assert dest.read_bytes() == b"old"
    assert os.listdir(tmp_path) == [name]
    assert open_fds() == before


def test_already_saved_result(tmp_path: Path) -> None:
    result = record()
    result.save(str(tmp_path / "first.json"))
    dest = tmp_path / "t.json.gz"
    dest.write_bytes(b"old")
    with pytest.raises(RuntimeError, match=r"Trace is already saved\."):
        kinetrace.export_chrome_trace(SaveOnly(result), dest)
    assert dest.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["first.json", "t.json.gz"]


@pytest.mark.parametrize(
    ("mode", "message"),
    [("nothing", "wrote no trace"), ("both", "more than one file")],
)
def test_kineto_writing_nothing_or_twice_is_an_error(
    tmp_path: Path, kineto_trace: tuple[bytes, str], mode: str, message: str
) -> None:
    dest = tmp_path / "t.json.gz"
    dest.write_bytes(b"old")
    with pytest.raises(RuntimeError, match=message):
        kinetrace.export_chrome_trace(KinetoStandIn(kineto_trace, mode), dest)
    assert dest.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["t.json.gz"]


def test_dev_null(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A special destination is written directly; the FIFOs go to the temp directory."""
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_parent))
    stats, _ = export(SaveOnly(record()), "/dev/null")
    assert stats.file_bytes == stats.uncompressed_bytes > 1000
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert os.listdir(scratch_parent) == []


def test_destination_errors_come_before_save(tmp_path: Path) -> None:
    """``save`` works once per result, so a destination that cannot be written must fail
    before it is called."""
    source = SaveOnly(record())
    before = open_fds()
    with pytest.raises(FileNotFoundError):
        kinetrace.export_chrome_trace(source, tmp_path / "missing" / "t.json.gz")
    with pytest.raises(IsADirectoryError):
        kinetrace.export_chrome_trace(source, tmp_path)
    with pytest.raises(ValueError, match="compresslevel"):
        kinetrace.export_chrome_trace(source, tmp_path / "t.json.gz", compresslevel=10)
    with pytest.raises(ValueError, match="threads"):
        kinetrace.export_chrome_trace(source, tmp_path / "t.json.gz", threads=0)
    assert source.saves == []
    assert os.listdir(tmp_path) == []
    assert open_fds() == before
    stats, _ = export(source, tmp_path / "t.json")  # still saveable
    assert stats.events > 0


def test_results_without_save_are_still_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"torch >= 2\.13.*found torch"):
        kinetrace.export_chrome_trace(fake_profile(object()), tmp_path / "t.json")
    only_save = SimpleNamespace(save=lambda path: None)  # e.g. a ScriptModule
    with pytest.raises(TypeError, match=r"needs a torch\.profiler\.profile"):
        kinetrace.export_chrome_trace(only_save, tmp_path / "t.json")
    assert os.listdir(tmp_path) == []


def test_background_runs_synchronously(tmp_path: Path) -> None:
    dest = tmp_path / "t.json.gz"
    kinetrace.wait()  # what earlier tests' background exports left to report
    handle, message = export(SaveOnly(record()), dest, background=True)
    assert "background" in message
    assert handle.done()
    stats = handle.result()
    assert stats.path == str(dest)
    assert_kineto_format(unpack(dest), dest, stats)
    assert kinetrace.wait() == []  # not a pending background export


def test_arguments_that_do_not_apply_are_named(tmp_path: Path) -> None:
    dest = tmp_path / "t.json"
    stats, message = export(
        SaveOnly(record()),
        dest,
        metadata={"extra": "1"},
        base_time_ns=0,
        workers=2,
    )
    assert "ignored: base_time_ns, workers" in message
    trace = assert_kineto_format(dest.read_bytes(), dest, stats)
    assert trace["extra"] == 1  # metadata is written on this path too
    _, message = export(fake_profile(SaveOnly(record())), tmp_path / "u.json")
    assert "ignored" not in message
    assert json.loads((tmp_path / "u.json").read_bytes())["k"] == "v"


def test_trace_name_is_escaped(tmp_path: Path, kineto_trace: tuple[bytes, str]) -> None:
    dest = tmp_path / 'we"ird\\näme.json'
    source = KinetoStandIn(kineto_trace)
    stats, _ = export(source, dest)
    assert dest.read_bytes() == source.expected(dest)
    assert json.loads(dest.read_bytes())["traceName"] == str(dest)
    assert stats.events > 0


def test_stream_abort_and_drop_discard_the_output(tmp_path: Path) -> None:
    dest = tmp_path / "t.json.gz"
    dest.write_bytes(b"old")
    for how in ("abort", "drop"):
        fifo = str(tmp_path / f"fifo-{how}")
        os.mkfifo(fifo)
        rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        wfd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.set_blocking(rfd, True)
        writer = os.dup(wfd)
        # The stream owns both ends from here on; it closes the write end itself.
        stream = _kinetrace._FallbackStream([rfd], [wfd], str(dest), 6, 2)
        os.write(writer, b'{"traceEvents": [' * 1000)
        os.close(writer)
        if how == "abort":
            stream.abort()
            stream.abort()
            with pytest.raises(RuntimeError, match="already finished or aborted"):
                stream.finish()
        else:
            del stream
            gc.collect()
        os.unlink(fifo)
        # Synchronously: the temporary output is gone when abort() or the drop returns.
        assert os.listdir(tmp_path) == ["t.json.gz"]
        assert dest.read_bytes() == b"old"


def test_stream_rejects_bad_descriptors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distinct"):
        _kinetrace._FallbackStream([-1], [], str(tmp_path / "t.json"))
    with pytest.raises(ValueError, match="distinct"):
        _kinetrace._FallbackStream([5], [5], str(tmp_path / "t.json"))
    assert os.listdir(tmp_path) == []


def test_export_via_kineto_directly(tmp_path: Path) -> None:
    dest = tmp_path / "t.json.gz"
    stats = _fallback.export_via_kineto(SaveOnly(record()), dest, 9, 1)
    assert_kineto_format(unpack(dest), dest, stats)


# --------------------------------------------------------------------------------------
# A plain .json: Kineto writes a private file beside the destination, edited in place.
# --------------------------------------------------------------------------------------


def private_dirs(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".kinetrace.")]


@pytest.mark.parametrize("mode", ["direct", "rename"])
def test_plain_json_is_written_beside_the_destination(
    tmp_path: Path, kineto_trace: tuple[bytes, str], mode: str
) -> None:
    """While Kineto writes, the private directory (mode 0700) beside the destination holds
    regular files and no FIFO, and the destination is not there yet; after, only it is."""
    seen: list[tuple[str, dict[str, int]]] = []

    def check(scratch: str) -> None:
        modes = {e.name: e.stat(follow_symlinks=False).st_mode for e in os.scandir(scratch)}
        seen.append((scratch, modes))
        assert not (tmp_path / "t.json").exists()

    source = KinetoStandIn(kineto_trace, mode, after_chunk=check)
    dest = tmp_path / "t.json"
    stats, _ = export(source, dest)
    assert len(seen) >= 32
    scratch, modes = seen[-1]
    assert os.path.dirname(scratch) == str(tmp_path)
    assert os.path.basename(scratch).startswith(".kinetrace.")
    assert os.path.basename(scratch).endswith(".kinetrace-tmp")
    assert modes and all(stat.S_ISREG(m) for m in modes.values()), modes
    assert set(modes) <= {"trace.json", "trace.json.tmp"}
    assert dest.read_bytes() == source.expected(dest)
    assert_kineto_format(dest.read_bytes(), dest, stats)
    assert os.listdir(tmp_path) == ["t.json"]


def test_plain_json_keeps_permissions_and_follows_a_symlink(
    tmp_path: Path, kineto_trace: tuple[bytes, str]
) -> None:
    """The private file lands where the main path's temporary file would: beside the link's
    target, which it replaces with that file's permissions; the link stays a link."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "real.json"
    target.write_bytes(b"old")
    target.chmod(0o640)
    link = tmp_path / "t.json"
    link.symlink_to(target)
    seen: list[str] = []
    source = KinetoStandIn(kineto_trace, after_chunk=seen.append)
    export(source, link)
    assert os.path.dirname(seen[0]) == str(elsewhere)
    assert link.is_symlink()
    assert target.read_bytes() == source.expected(link)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "t.json"]
    assert os.listdir(elsewhere) == ["real.json"]


def test_a_directory_kineto_would_mangle_takes_the_fifos(
    tmp_path: Path, kineto_trace: tuple[bytes, str]
) -> None:
    """Kineto writes the path it is given into the trace unescaped: beside a destination in
    a directory whose name has a quote, the FIFOs (in the system's temp directory) are
    used instead, and the file is the same."""
    folder = tmp_path / 'a"b'
    folder.mkdir()
    seen: list[str] = []
    source = KinetoStandIn(kineto_trace, "rename", after_chunk=seen.append)
    dest = folder / "t.json"
    stats, _ = export(source, dest)
    assert os.path.dirname(seen[0]) == tempfile.gettempdir()
    assert dest.read_bytes() == source.expected(dest)
    assert_kineto_format(dest.read_bytes(), dest, stats)
    assert os.listdir(folder) == ["t.json"]


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_trace_that_is_not_json_is_refused(
    tmp_path: Path, kineto_trace: tuple[bytes, str], name: str
) -> None:
    text, baseline = kineto_trace
    broken = text.replace(b'"ph": "X"', b'"ph": "X",,', 1)
    dest = tmp_path / name
    dest.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="not strict JSON"):
        kinetrace.export_chrome_trace(KinetoStandIn((broken, baseline)), dest)
    assert dest.read_bytes() == b"old"
    assert os.listdir(tmp_path) == [name]


def test_quotes_and_metadata_in_place(tmp_path: Path, kineto_trace: tuple[bytes, str]) -> None:
    """Unescaped quotes all through the file and members inserted at its top: the whole
    text moves, in place, and holds every name and the metadata."""
    text, baseline = kineto_trace
    quoted_text = text.replace(b'"name": "aten::mm"', b'"name": "a"t"en::mm"')
    assert quoted_text.count(b'"a"t"en::mm"') > 1000
    dest = tmp_path / "t.json"
    stats, _ = export(
        KinetoStandIn((quoted_text, baseline)), dest, metadata={"run": {"id": 7}, "note": "x"}
    )
    written = dest.read_bytes()
    trace = json.loads(written)
    assert trace["run"] == {"id": 7}
    assert trace["note"] == "x"
    assert trace["traceName"] == str(dest)
    names = [e.get("name") for e in trace["traceEvents"]]
    assert names.count('a"t"en::mm') == text.count(b'"name": "aten::mm"')
    assert stats.events == len(trace["traceEvents"])
    assert stats.uncompressed_bytes == stats.file_bytes == len(written)
    assert written.lstrip().startswith(b'{\n  "run": {"id": 7},\n  "note": "x",')
    assert os.listdir(tmp_path) == ["t.json"]


READ_ONLY_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    import torch
    import kinetrace
    warnings.simplefilter("ignore")
    a = torch.ones(8, 8)
    with torch.profiler.profile() as prof:
        torch.mm(a, a)
    saves = []
    class SaveOnly:
        def save(self, path):
            saves.append(path)
            prof.profiler.kineto_results.save(path)
        def trace_start_ns(self):
            return 1
    results = {}
    for path in sys.argv[1:]:
        try:
            kinetrace.export_chrome_trace(SaveOnly(), path)
        except OSError as exc:
            results[path] = [type(exc).__name__, exc.errno, path in str(exc)]
    print(json.dumps({"results": results, "saves": saves}))
    """
)


def test_read_only_directory_fails_before_save(tmp_path: Path) -> None:
    """The private directory cannot be made beside the destination: PermissionError naming
    the destination, before ``save`` (in a subprocess as an ordinary user: as root, without
    the capabilities that bypass file permissions)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    paths = [str(directory / "t.json"), str(directory / "t.json.gz")]
    directory.chmod(0o500)
    try:
        done = run_python("-c", READ_ONLY_SCRIPT, *paths)
    finally:
        directory.chmod(0o700)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    # .json fails making its private directory beside the destination; .json.gz makes its
    # FIFOs in the temp directory and fails creating the destination's temporary file.
    assert out["results"] == {p: ["PermissionError", errno.EACCES, True] for p in paths}
    assert out["saves"] == []
    assert os.listdir(directory) == []


KILLED_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, warnings
    import torch
    import kinetrace
    warnings.simplefilter("ignore")
    a = torch.ones(8, 8)
    with torch.profiler.profile() as prof:
        for _ in range(200):
            torch.mm(a, a)
    class SaveThenDie:
        def save(self, path):
            prof.profiler.kineto_results.save(path)
            os.kill(os.getpid(), signal.SIGKILL)
        def trace_start_ns(self):
            return 1
    kinetrace.export_chrome_trace(SaveThenDie(), sys.argv[1])
    """
)


def test_a_killed_exports_private_directory_goes_with_the_next_export(tmp_path: Path) -> None:
    """SIGKILL after Kineto wrote its file leaves the private directory, trace and all,
    beside the destination; the next export there removes it (a temporary of a dead
    process), and nothing else."""
    import signal

    dest = tmp_path / "t.json"
    (tmp_path / "keep.json").write_bytes(b"mine")
    done = subprocess.run(
        [sys.executable, "-c", KILLED_SCRIPT, str(dest)], capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    (left,) = private_dirs(tmp_path)
    assert left.endswith(".kinetrace-tmp")
    assert os.listdir(tmp_path / left) == ["trace.json"]
    assert not dest.exists()
    stats, _ = export(SaveOnly(record()), dest)
    assert stats.events > 0
    assert sorted(os.listdir(tmp_path)) == ["keep.json", "t.json"]


def test_private_directories_go_in_one_native_call(tmp_path: Path) -> None:
    """The private directory (a FIFO, a file, a folder, a link to a file outside) is removed
    whole; the link's target stays; a directory already gone is no error."""
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"kept")
    private = tmp_path / "private"
    (private / "inner").mkdir(parents=True)
    os.mkfifo(private / "trace.json")
    (private / "inner" / "part").write_bytes(b"x")
    (private / "link").symlink_to(outside)
    (private / "dir-link").symlink_to(tmp_path)
    assert _kinetrace.remove_temporary_dir(private) is True
    assert sorted(os.listdir(tmp_path)) == ["outside.json"]
    assert outside.read_bytes() == b"kept"
    assert _kinetrace.remove_temporary_dir(private) is True


def test_ctrl_c_while_removing_private_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that lands while the private directories are removed is raised once all of
    them are gone (the removal is tried again), never replaced by another error."""
    dirs = [str(tmp_path / name) for name in ("a", "b")]
    for d in dirs:
        os.mkdir(d)
    remove = _kinetrace.remove_temporary_dir
    calls: list[str] = []

    def interrupted_once(path: str) -> bool:
        calls.append(path)
        gone = remove(path)
        if len(calls) == 1:
            raise KeyboardInterrupt  # after the removal, before the caller notes it
        return gone

    monkeypatch.setattr(_kinetrace, "remove_temporary_dir", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        _fallback._remove_dirs(list(dirs))
    assert calls == [dirs[1], dirs[1], dirs[0]]
    assert os.listdir(tmp_path) == []
