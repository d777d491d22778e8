"""Errors: wrong sources, unwritable paths, failing accessors, bad arguments. A failed export
raises a clear exception and leaves no partial or temporary file behind, and never touches
an existing file at the destination."""

from __future__ import annotations

import errno
import inspect
import os
import stat
import textwrap
import threading
from pathlib import Path

import pytest
import torch
import torch.profiler._chrome_trace_export as torch_export
from torch.profiler import ProfilerActivity, profile

import kinetrace
from support import BASE, T0
from support.aftermath import background_oserror, temp_files
from support.fakes import FakeActivity, FakeResult, Raise
from support.oracle import torch_bytes
from support.scenarios import Clock, launch_set
from support.users import run_python


class AccessorError(Exception):
    """Raised by a fake accessor; must reach the caller unchanged."""


def small_result() -> FakeResult:
    return FakeResult(launch_set(3))


def big_result(
    n: int = 12_000,
    *,
    fail_at: int | None = None,
    field: str = "name",
    exc: BaseException | None = None,
) -> FakeResult:
    clock = Clock()
    acts = [
        FakeActivity(
            name=f"op{i % 13}",
            timestamp=clock(),
            correlation_id=i + 1,
            metadata_json=f'"Ev Idx": {i}',
        )
        for i in range(n)
    ]
    if fail_at is not None:
        acts[fail_at].values[field] = Raise(exc if exc is not None else AccessorError("boom"))
    return FakeResult(acts)


# --- sources ---------------------------------------------------------------------------------


def test_profile_not_stopped(tmp_path):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(2).add_(1)
        with pytest.raises(RuntimeError, match="not stopped"):
            kinetrace.export_chrome_trace(prof, tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


def test_profile_never_started(tmp_path):
    prof = profile(activities=[ProfilerActivity.CPU])
    with pytest.raises(RuntimeError, match="not been started"):
        kinetrace.export_chrome_trace(prof, tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


def test_legacy_profiler_not_stopped(tmp_path):
    with torch.autograd.profiler.profile() as prof:
        with pytest.raises(RuntimeError, match="not stopped"):
            kinetrace.export_chrome_trace(prof, tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("source", [object(), None, "trace.json", 42, [FakeActivity()]])
def test_not_a_profiler(tmp_path, source):
    with pytest.raises(TypeError, match="export_chrome_trace"):
        kinetrace.export_chrome_trace(source, tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


# --- destinations ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_missing_parent_directory(tmp_path, name):
    path = tmp_path / "no" / "such" / name
    with pytest.raises(FileNotFoundError) as info:
        kinetrace.export_chrome_trace(small_result(), path)
    assert info.value.errno == errno.ENOENT
    assert "no/such" in str(info.value)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("gz", [False, True])
def test_directory_as_path(tmp_path, gz):
    target = tmp_path / ("d.json.gz" if gz else "d.json")
    target.mkdir()
    with pytest.raises(IsADirectoryError):
        kinetrace.export_chrome_trace(small_result(), target)
    assert target.is_dir() and list(target.iterdir()) == []
    assert temp_files(tmp_path) == []


def test_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = small_result()
    expected = torch_bytes(result, "rel.json", base=BASE)
    kinetrace.export_chrome_trace(result, "rel.json", base_time_ns=BASE)
    assert Path("rel.json").read_bytes() == expected
    assert sorted(os.listdir(".")) == ["rel.json"]


def test_symlink_destination_keeps_link(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "trace.json"
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    result = small_result()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch_export, "_trimester_base_ns", lambda: BASE)
        torch_export.export_chrome_trace(result, str(link), None)  # writes through the link
    assert link.is_symlink()
    expected = target.read_bytes()
    target.write_text("old")
    kinetrace.export_chrome_trace(result, link, base_time_ns=BASE)
    assert link.is_symlink()
    assert target.read_bytes() == expected
    assert temp_files(tmp_path) == [] and temp_files(tmp_path / "runs") == []


def test_dangling_symlink_destination_creates_target(tmp_path):
    """torch's open(path, "w") follows a dangling link and creates its target; the link
    must survive the export."""
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "trace.json"
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    result = small_result()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch_export, "_trimester_base_ns", lambda: BASE)
        torch_export.export_chrome_trace(result, str(link), None)  # creates the target
    assert link.is_symlink()
    expected = target.read_bytes()
    target.unlink()  # dangling again
    kinetrace.export_chrome_trace(result, link, base_time_ns=BASE)
    assert link.is_symlink(), "the symlink was replaced by a regular file"
    assert target.read_bytes() == expected


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755], ids=oct)
def test_replacing_a_file_keeps_its_permissions(tmp_path, mode):
    """torch truncates an existing file in place, so its mode survives; an atomic replace
    must carry it over (a private 0600 trace must not become world-readable)."""
    path = tmp_path / "t.json"
    path.write_text("old")
    path.chmod(mode)
    torch_export.export_chrome_trace(small_result(), str(path), None)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    kinetrace.export_chrome_trace(small_result(), path)
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_replacing_a_file_keeps_its_owner_where_allowed(tmp_path):
    """As root, the replaced file keeps its owner and group (torch's in-place write keeps
    them too); a user who may not give them (checked in src/output/sink.rs: an owner keeps the
    group where it is a member) gets a file of its own."""
    path = tmp_path / "t.json"
    path.write_text("old")
    os.chown(path, 65534, 65534)
    path.chmod(0o640)
    kinetrace.export_chrome_trace(small_result(), path)
    info = path.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (65534, 65534, 0o640)
    kinetrace.compress_trace(path, path.with_suffix(".json.gz"))
    assert temp_files(tmp_path) == []


#: A supplementary group of the ordinary user below (any number: it needs no name).
MEMBER_GID = 4242

REPLACE_SCRIPT = textwrap.dedent(
    """
    import sys
    import kinetrace
    from support.synthetic import SyntheticResult

    for path in sys.argv[1:]:
        kinetrace.export_chrome_trace(SyntheticResult(100), path)
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_replacing_another_users_file_gives_a_file_of_ones_own(tmp_path):
    """An ordinary user who may write another user's file but not give its owner gets a
    file of its own, with the old group where it is a member of that group, its own group
    otherwise, and the old mode. Root gives both files to another user, then the exports
    run as an ordinary user (:mod:`support.users`: no capabilities) in group MEMBER_GID."""
    modes = {"member.json": (MEMBER_GID, 0o660), "other.json": (65534, 0o646)}
    for name, (gid, mode) in modes.items():
        (tmp_path / name).write_text("old")
        os.chown(tmp_path / name, 65534, gid)
        (tmp_path / name).chmod(mode)
    paths = [tmp_path / name for name in modes]
    done = run_python("-c", REPLACE_SCRIPT, *paths, groups=[MEMBER_GID])
    assert done.returncode == 0, done.stderr
    owners = {
        p.name: (p.stat().st_uid, p.stat().st_gid, stat.S_IMODE(p.stat().st_mode)) for p in paths
    }
    assert owners == {"member.json": (0, MEMBER_GID, 0o660), "other.json": (0, 0, 0o646)}
    assert all(p.read_text() != "old" for p in paths)
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("length", [217, 218, 240, 255])
@pytest.mark.parametrize(
    ("suffix", "options"),
    [(".json", {}), (".json.gz", {}), (".json", {"workers": 2}), (".json", {"background": True})],
)
def test_destination_names_up_to_255_bytes(tmp_path, length, suffix, options):
    """Any name the file system takes works: the temporary name keeps only as much of it
    as fits (218-255 bytes once failed with ENAMETOOLONG for the temporary file)."""
    name = "n" * (length - len(suffix)) + suffix
    out = kinetrace.export_chrome_trace(big_result(2_000), tmp_path / name, **options)
    if options.get("background"):
        out = out.result(timeout=120)
    assert out.events > 2_000
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    # A name one byte too long is the file system's error, about the destination.
    with pytest.raises(OSError) as info:
        kinetrace.export_chrome_trace(big_result(10), tmp_path / ("m" * 256))
    assert info.value.errno == errno.ENAMETOOLONG
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_new_file_mode_follows_umask(tmp_path):
    old = os.umask(0o077)
    try:
        kinetrace.export_chrome_trace(small_result(), tmp_path / "k.json")
        torch_export.export_chrome_trace(small_result(), str(tmp_path / "t.json"), None)
    finally:
        os.umask(old)
    k_mode = stat.S_IMODE((tmp_path / "k.json").stat().st_mode)
    assert k_mode == stat.S_IMODE((tmp_path / "t.json").stat().st_mode) == 0o600


def test_dev_null():
    stats = kinetrace.export_chrome_trace(big_result(2_000), "/dev/null")
    assert stats.uncompressed_bytes > 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert temp_files(Path("/dev")) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("kwargs", [{}, {"threads": 1}, {"threads": 2}])
def test_dev_full_reports_enospc(kwargs):
    before = sorted(os.listdir("/dev"))
    with pytest.raises(OSError) as info:
        kinetrace.export_chrome_trace(big_result(20_000), "/dev/full", **kwargs)
    assert info.value.errno == errno.ENOSPC
    assert type(info.value) is OSError
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert sorted(os.listdir("/dev")) == before


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_dev_full_background_reports_enospc():
    """The error surfaces either from the call (the writer failed while the fields were
    still being extracted) or from the handle -- never silently."""
    error = background_oserror(
        lambda: kinetrace.export_chrome_trace(big_result(20_000), "/dev/full", background=True)
    )
    assert error.errno == errno.ENOSPC
    # Reported once: the next export does not raise it again.
    kinetrace.export_chrome_trace(small_result(), "/dev/null")


# --- a failing accessor leaves the old file alone --------------------------------------------


@pytest.mark.parametrize(
    "field, index",
    [
        ("name", 4_999),  # second pass, first batch
        ("name", 10_000),  # second pass, second batch (the first is already written)
        ("timestamp", 4_999),  # first pass
        ("metadata_json", 11_999),  # the last activity
        ("type", 0),
    ],
)
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_failing_accessor_keeps_existing_file(tmp_path, field, index, suffix):
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(b"old content")
    exc = AccessorError(f"{field} failed")
    result = big_result(fail_at=index, field=field, exc=exc)
    with pytest.raises(AccessorError) as info:
        kinetrace.export_chrome_trace(result, path)
    assert info.value is exc
    assert path.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_failing_accessor_new_file_not_created(tmp_path):
    path = tmp_path / "trace.json"
    with pytest.raises(AccessorError):
        kinetrace.export_chrome_trace(big_result(fail_at=4_999), path)
    assert list(tmp_path.iterdir()) == []


def test_failing_linked_activity(tmp_path):
    acts = launch_set(3)
    kernel = next(a for a in acts if a.peek("type") == "kernel")
    kernel.values["linked_activity"] = Raise(AccessorError("linked"))
    path = tmp_path / "t.json"
    path.write_text("keep")
    with pytest.raises(AccessorError, match="linked"):
        kinetrace.export_chrome_trace(FakeResult(acts), path)
    assert path.read_text() == "keep"
    assert temp_files(tmp_path) == []


def test_keyboard_interrupt_from_accessor(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("keep")
    with pytest.raises(KeyboardInterrupt):
        kinetrace.export_chrome_trace(big_result(fail_at=9_000, exc=KeyboardInterrupt()), path)
    assert path.read_text() == "keep"
    assert temp_files(tmp_path) == []


def test_export_after_failure_works(tmp_path):
    path = tmp_path / "t.json"
    with pytest.raises(AccessorError):
        kinetrace.export_chrome_trace(big_result(fail_at=100), path)
    stats = kinetrace.export_chrome_trace(small_result(), path)
    assert path.stat().st_size == stats.file_bytes


# --- arguments -------------------------------------------------------------------------------


def test_the_export_parameters_are_defined_once():
    """``ExportOptions`` is the one definition of the export's parameters: the function's
    signature (written out for readers and type checkers) names the same ones, in the same
    order, with the same defaults, and so does the handler for those it takes."""
    from kinetrace._export import export as _export

    fields = {field.name: field.default for field in _export.parameters()}
    signature = list(inspect.signature(kinetrace.export_chrome_trace).parameters.values())
    assert [p.name for p in signature[:2]] == ["source", "path"]
    assert {p.name: p.default for p in signature[2:]} == fields
    assert [p.name for p in signature[2:]] == list(fields)
    handler = inspect.signature(kinetrace.tensorboard_trace_handler).parameters
    shared = {"background", "keep", "split_mb"}
    assert {name: handler[name].default for name in shared} == {n: fields[n] for n in shared}


def test_export_options_check_once_and_copy_without_checking_again(monkeypatch):
    from kinetrace._export import export as _export
    from kinetrace._export import graphs as _graphs

    prepared = []
    real_prepare = _graphs.prepare
    monkeypatch.setattr(
        _graphs, "prepare", lambda *args: prepared.append(args) or real_prepare(*args)
    )
    options = _export.ExportOptions(
        annotations={1: {"stream": 3}}, keep={"min_dur_us": 1.0}, metadata={"a": "1"}
    )
    assert options.keep == kinetrace.Keep(min_dur_us=1.0) and options.graphs is not None
    assert options.metadata == {"a": "1"} and len(prepared) == 1
    copy = options.but(keep=None, metadata={"b": "2"})
    assert (copy.keep, copy.metadata, copy.graphs) == (None, {"b": "2"}, options.graphs)
    assert options.keep is not None and len(prepared) == 1  # the original is untouched
    with pytest.raises(TypeError, match="compresslevel"):
        options.but(compresslevel=99)


@pytest.mark.parametrize("level", [-1, 10, 100])
def test_compresslevel_out_of_range(tmp_path, level):
    with pytest.raises(ValueError, match="compresslevel"):
        kinetrace.export_chrome_trace(small_result(), tmp_path / "t.json.gz", compresslevel=level)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("level", [1.5, "6", True])
def test_compresslevel_wrong_type(tmp_path, level):
    with pytest.raises(TypeError, match="compresslevel"):
        kinetrace.export_chrome_trace(small_result(), tmp_path / "t.json.gz", compresslevel=level)


@pytest.mark.parametrize("threads", [0, -1, 257])
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_threads_out_of_range(tmp_path, threads, name):
    with pytest.raises(ValueError, match="threads"):
        kinetrace.export_chrome_trace(small_result(), tmp_path / name, threads=threads)
    assert list(tmp_path.iterdir()) == []


def test_base_time_wrong_type(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("keep")
    with pytest.raises(TypeError, match="base_time_ns"):
        kinetrace.export_chrome_trace(small_result(), path, base_time_ns=1.5)
    assert path.read_text() == "keep"
    assert temp_files(tmp_path) == []


# --- accessors returning the wrong type ------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", 5),
        ("name", None),
        ("name", b"bytes"),
        ("type", None),
        ("metadata_json", None),
        ("metadata_json", {"a": 1}),
        ("timestamp", "123"),
        ("timestamp", 1.5),
        ("duration", None),
        ("device_id", "0"),
        ("resource_id", 2.0),
        ("linked_correlation_id", None),
        ("flow_id", "1"),
        ("correlation_id", "7"),
    ],
)
def test_accessor_wrong_type(tmp_path, field, value):
    acts = [FakeActivity(timestamp=T0 + i, correlation_id=i + 1) for i in range(3)]
    acts[1].values[field] = value
    path = tmp_path / "t.json"
    path.write_text("keep")
    with pytest.raises(TypeError, match=rf"{field}\(\)"):
        kinetrace.export_chrome_trace(FakeResult(acts, trace_start_ns=T0), path)
    assert path.read_text() == "keep"
    assert temp_files(tmp_path) == []


def test_flow_type_wrong_type(tmp_path):
    acts = [FakeActivity(timestamp=T0, flow_id=3, flow_type="2", flow_start=True)]
    with pytest.raises(TypeError, match=r"flow_type\(\)"):
        kinetrace.export_chrome_trace(FakeResult(acts), tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("timestamp", 2**63),
        ("timestamp", -(2**63) - 1),
        ("duration", 2**64),
        ("resource_id", 2**63),
        ("device_id", -(2**70)),
        ("correlation_id", 2**63),
        ("flow_id", 2**63),
    ],
)
def test_int_beyond_int64(tmp_path, field, value):
    acts = [FakeActivity(timestamp=T0 + i, correlation_id=i + 1, flow_id=1) for i in range(3)]
    acts[2].values[field] = value
    with pytest.raises((TypeError, OverflowError)) as info:
        kinetrace.export_chrome_trace(FakeResult(acts, trace_start_ns=T0), tmp_path / "t.json")
    message = str(info.value)
    assert f"{field}()" in message and "64-bit" in message
    assert str(value) in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_unreported_background_error_raised_by_next_export(tmp_path):
    """A background export that failed and was never asked for its result is not silent:
    the next export raises it (chained), once."""
    handle = kinetrace.export_chrome_trace(small_result(), "/dev/full", background=True)
    deadline = 600
    while not handle.done() and deadline:
        deadline -= 1
        threading.Event().wait(0.05)
    assert handle.done()
    with pytest.raises(RuntimeError, match="earlier background export") as info:
        kinetrace.export_chrome_trace(small_result(), tmp_path / "next.json")
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert not (tmp_path / "next.json").exists()
    # Reported now: the export after that works.
    kinetrace.export_chrome_trace(small_result(), tmp_path / "next.json")
    assert (tmp_path / "next.json").exists()
