"""``kinetrace compress`` (``kinetrace._tools``), called in-process, and Ctrl-C in the tools
over trace files (``check``, ``compress``). ``check`` itself: ``test_check.py``."""

from __future__ import annotations

import gzip
import os
import threading
import zlib
from pathlib import Path

import pytest
import torch
from torch.profiler import profile

import kinetrace
from kinetrace import _cli, _kinetrace
from support.traces import single_member_text


def run(*argv: str | os.PathLike[str]) -> int:
    """The command line's exit status (a usage error's too)."""
    try:
        return _cli.main([os.fspath(a) for a in argv])
    except SystemExit as exit_:
        assert isinstance(exit_.code, int)
        return exit_.code


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
    blob = gzip.compress(real_trace.read_bytes() * 20)
    src = tmp_path / "cut.json.gz"
    src.write_bytes(blob[: len(blob) // 2])
    assert run("compress", src) == 1  # in place
    err = capsys.readouterr().err
    assert "cannot decompress" in err and str(src) in err
    assert src.read_bytes() == blob[: len(blob) // 2]
    dst = tmp_path / "out.gz"
    assert run("compress", src, dst) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json.gz"]
    with pytest.raises(OSError, match="cannot decompress"):
        _kinetrace.recompress(str(src), str(dst), 6, 1)


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
