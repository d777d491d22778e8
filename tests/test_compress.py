"""``kinetrace compress`` (``kinetrace._tools.compress``), called in-process, and Ctrl-C in
the tools over trace files (``check``, ``compress``). ``check`` itself: ``test_check.py``."""

from __future__ import annotations

import gzip
import os
import threading
import time
import zlib
from pathlib import Path

import pytest
import torch
from torch.profiler import profile

import kinetrace
from kinetrace import _kinetrace
from support.cli import run
from support.traces import single_member_text


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real export: a few ops, forward and backward (so it has fwdbwd flows)."""
    x = torch.randn(16, 16, requires_grad=True)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            (x @ x).relu().sum().backward()
    path = tmp_path_factory.mktemp("real") / "trace.json"
    kinetrace.export_chrome_trace(prof, path)
    kinetrace.export_chrome_trace(prof, path.with_name("trace.json.gz"))
    return path


# --- compress --------------------------------------------------------------------------------


def test_compress_plain(
    real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "t.json"
    src.write_bytes(real_trace.read_bytes())
    assert run("compress", src) == 0
    dst = tmp_path / "t.json.gz"
    assert single_member_text(dst.read_bytes()) == src.read_bytes()
    out = capsys.readouterr().out
    assert f"-> {dst}: " in out and "MB/s" in out and "one gzip member" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.json.gz"]


def test_compress_multi_member_in_place(real_trace: Path, tmp_path: Path) -> None:
    data = real_trace.read_bytes()
    half = len(data) // 2
    src = tmp_path / "m.json.gz"
    src.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    assert zlib.decompress(src.read_bytes(), 31) == data[:half]  # what viewers saw before
    assert run("compress", "-l", "1", "-j", "2", src) == 0
    assert single_member_text(src.read_bytes()) == data
    assert kinetrace.check_trace(src).info.gzip_members == 1
    # To another file, from the now single-member source.
    dst = tmp_path / "other.gz"
    assert run("compress", "--level", "9", "--threads", "1", src, dst) == 0
    assert single_member_text(dst.read_bytes()) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json.gz", "other.gz"]


def test_compress_refuses_to_overwrite(
    real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "t.json"
    src.write_bytes(real_trace.read_bytes())
    dst = tmp_path / "t.json.gz"
    dst.write_bytes(b"keep me")
    assert run("compress", src) == 1
    assert "exists (use -f/--force" in capsys.readouterr().err
    assert dst.read_bytes() == b"keep me"
    # Plain JSON "in place" would replace the JSON by gzip under the same name: refused too.
    assert run("compress", src, src) == 1
    assert src.read_bytes() == real_trace.read_bytes()
    assert run("compress", "-f", src) == 0
    assert single_member_text(dst.read_bytes()) == src.read_bytes()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("-l", "10"), "argument -l/--level: must be between 0 and 9, got 10"),
        (("--level", "-1"), "argument -l/--level: must be between 0 and 9, got -1"),
        (("-j", "0"), "argument -j/--threads: must be between 1 and 256, got 0"),
        (("--threads", "257"), "argument -j/--threads: must be between 1 and 256, got 257"),
    ],
)
def test_compress_bad_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: tuple[str, str], message: str
) -> None:
    src = tmp_path / "t.json"
    src.write_bytes(b'{"traceEvents":[]}')
    assert run("compress", *option, src) == 2
    assert message in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_compress_non_integer_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("compress", "-l", "fast", tmp_path / "t.json") == 2
    assert "not an integer: 'fast'" in capsys.readouterr().err


def test_compress_truncated_source_leaves_nothing(
    real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = gzip.compress(real_trace.read_bytes())
    src = tmp_path / "cut.json.gz"
    src.write_bytes(blob[: len(blob) // 2])
    assert run("compress", src) == 1  # in place
    err = capsys.readouterr().err
    assert str(src) in err and "offset " in err, err
    assert src.read_bytes() == blob[: len(blob) // 2]
    dst = tmp_path / "out.gz"
    assert run("compress", src, dst) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json.gz"]
    with pytest.raises(ValueError, match="offset "):
        _kinetrace.recompress(str(src), str(dst), 6, 1)


def _not_traces(real: bytes) -> dict[str, bytes]:
    """Files ``compress`` must refuse (it accepted every one of them with status 0 once)."""
    first_ts = real.index(b'"ts":') + len(b'"ts":')
    bad_utf8 = bytearray(real)
    bad_utf8[real.index(b'"name":"') + len(b'"name":"')] = 0xFF
    return {
        "truncated": real[: len(real) // 2],
        "nan": real[:first_ts] + b"NaN" + real[first_ts:].lstrip(b" 0123456789."),
        "bom": b"\xef\xbb\xbf" + real,
        "utf8": bytes(bad_utf8),
        "empty": b"",
        "two-documents": real + real,
        "gzip-of-truncated": gzip.compress(real[: len(real) // 2]),
    }


@pytest.mark.parametrize(
    "case",
    ["truncated", "nan", "bom", "utf8", "empty", "two-documents", "gzip-of-truncated"],
)
def test_compress_refuses_what_is_not_a_trace(
    real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Checked with the strict reader ``split`` and ``filter`` use, as it streams: status
    1, the file and the offset of the first fault named, nothing left (an existing
    destination untouched)."""
    src = tmp_path / "in.json"
    src.write_bytes(_not_traces(real_trace.read_bytes())[case])
    dst = tmp_path / "out.json.gz"
    dst.write_bytes(b"keep me")
    assert run("compress", "-f", src, dst) == 1
    err = capsys.readouterr().err
    assert f"{src}: offset " in err, err
    assert dst.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json", "out.json.gz"]
    # split and filter refuse it the same way.
    with pytest.raises(ValueError, match="offset "):
        kinetrace.filter_trace(src, tmp_path / "f.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json", "out.json.gz"]


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_compress_of_a_device_ends_with_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str
) -> None:
    """/dev/null is empty; /dev/zero is endless (it once ran until killed, growing its
    temporary file): both fail at once, at offset 0."""
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    dst = tmp_path / "out.json.gz"
    started = time.monotonic()
    assert run("compress", device, dst) == 1
    assert time.monotonic() - started < 30
    assert f"{device}: offset 0: " in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_compress_refuses_a_member_too_large_at_its_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A top-level string bigger than what is held in memory at once (64 MiB) is refused
    with its offset, by compress and by filter alike."""
    head = b'{"schemaVersion": 1, '
    src = tmp_path / "big.json"
    with open(src, "wb") as f:
        f.write(head + b'"blob": "')
        f.write(b"x" * (65 << 20))
        f.write(b'", "traceEvents": []}')
    assert run("compress", src, tmp_path / "out.json.gz") == 1
    err = capsys.readouterr().err
    assert f"offset {len(head)}: too large" in err, err
    with pytest.raises(kinetrace.TraceFormatError, match=f"offset {len(head)}: too large") as e:
        kinetrace.filter_trace(src, tmp_path / "f.json")
    assert e.value.offset == len(head)
    # Two members, each below the limit of one, together above what split keeps of the
    # header (64 MiB): refused at the offset of the one that crosses it.
    first = b'"a": "' + b"x" * (40 << 20) + b'", '
    with open(src, "wb") as f:
        f.write(head + first + b'"b": "' + b"y" * (40 << 20) + b'", "traceEvents": []}')
    with pytest.raises(kinetrace.TraceFormatError, match="too large") as e:
        kinetrace.split_trace(src, 10, out_dir=tmp_path)
    assert e.value.offset == len(head) + len(first)
    assert [p.name for p in tmp_path.iterdir()] == ["big.json"]


def test_compress_missing_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("compress", tmp_path / "nope.json") == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        _kinetrace.recompress(str(tmp_path / "nope.json"), str(tmp_path / "x.gz"), 6, 1)
    assert list(tmp_path.iterdir()) == []


# --- Ctrl-C ----------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
@pytest.mark.parametrize("tool", ["check", "recompress"])
def test_ctrl_c_stops_and_cleans_up(tmp_path: Path, tool: str) -> None:
    """The source is a FIFO fed by a thread, which fakes Ctrl-C after 5 MB and then keeps
    writing: the reader must get past its next progress point (8 MB) only after that, so
    the interrupt is seen deterministically."""
    import _thread

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    line = b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1.5,"dur":2},\n'
    chunk = line * ((1 << 20) // len(line))
    written = [0]

    def feed() -> None:
        try:
            with open(fifo, "wb") as f:
                f.write(b'{"traceEvents":[\n')
                while written[0] < 5 << 20:
                    f.write(chunk)
                    written[0] += len(chunk)
                _thread.interrupt_main()
                while written[0] < 64 << 20:
                    f.write(chunk)
                    written[0] += len(chunk)
        except BrokenPipeError:
            pass

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            if tool == "check":
                _kinetrace.check_trace(str(fifo))
            else:
                _kinetrace.recompress(str(fifo), str(tmp_path / "out.json.gz"), 1, 1)
    finally:
        feeder.join(timeout=30)
    assert not feeder.is_alive()
    assert written[0] < 64 << 20  # stopped early
    assert [p.name for p in tmp_path.iterdir()] == ["fifo.json"]
