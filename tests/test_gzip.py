"""The parallel gzip encoder, through ``GzipWriter`` and ``.json.gz`` exports."""

from __future__ import annotations

import errno
import gzip
import io
import os
import shutil
import subprocess
import zlib

import pytest

import kinetrace

BLOCK = 1 << 20  # the encoder's block size: boundaries around it are the risky spots


def _payload(n: int) -> bytes:
    line = b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":%d.%03d},\n'
    out = bytearray()
    i = 0
    while len(out) < n:
        out += line % (i // 1000, i % 1000)
        i += 7
    return bytes(out[:n])


def _gzip_bytes(data: bytes, **kwargs) -> bytes:
    sink = io.BytesIO()
    writer = kinetrace.GzipWriter(sink, **kwargs)
    writer.write(data)
    writer.close()
    return sink.getvalue()


def _single_member(blob: bytes) -> bytes:
    """Decode with zlib's gzip mode, which stops after the first member; the whole input
    must be consumed by that one member."""
    d = zlib.decompressobj(31)
    out = d.decompress(blob) + d.flush()
    assert d.eof, "gzip stream not finished"
    assert d.unused_data == b"", "more than one gzip member"
    return out


@pytest.mark.parametrize(
    "size",
    [0, 1, 100, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 3 * BLOCK + 12345],
)
def test_round_trip_sizes(size):
    data = _payload(size)
    blob = _gzip_bytes(data, threads=2)
    assert _single_member(blob) == data
    assert zlib.decompress(blob, 31) == data
    assert gzip.decompress(blob) == data


@pytest.mark.parametrize("level", range(10))
def test_every_level(level):
    data = _payload(BLOCK + 5000)
    blob = _gzip_bytes(data, compresslevel=level, threads=2)
    assert _single_member(blob) == data


@pytest.mark.parametrize("threads", range(1, 9))
def test_thread_counts_give_identical_bytes(threads):
    data = _payload(5 * BLOCK // 2)
    reference = _gzip_bytes(data, threads=1)
    assert _gzip_bytes(data, threads=threads) == reference
    assert _single_member(reference) == data


def test_many_small_writes_and_flushes():
    data = _payload(3 * BLOCK)
    sink = io.BytesIO()
    with kinetrace.GzipWriter(sink, threads=3) as w:
        for i in range(0, len(data), 4099):
            w.write(data[i : i + 4099])
            if i % (50 * 4099) == 0:
                w.flush()
                # After a flush everything written so far is decodable.
                d = zlib.decompressobj(31)
                assert d.decompress(sink.getvalue()) == data[: i + 4099][: len(data)]
    assert _single_member(sink.getvalue()) == data


def test_accepts_bytes_like_objects():
    sink = io.BytesIO()
    with kinetrace.GzipWriter(sink) as w:
        assert w.write(b"ab") == 2
        assert w.write(bytearray(b"cd")) == 2
        assert w.write(memoryview(b"ef")) == 2
    assert _single_member(sink.getvalue()) == b"abcdef"


def test_text_wrapper(tmp_path):
    path = tmp_path / "t.txt.gz"
    with io.TextIOWrapper(kinetrace.GzipWriter(path), encoding="utf-8") as text:
        text.write("héllo wörld\n" * 1000)
    assert gzip.decompress(path.read_bytes()).decode() == "héllo wörld\n" * 1000


def test_path_appears_only_on_close(tmp_path):
    path = tmp_path / "t.gz"
    w = kinetrace.GzipWriter(path)
    w.write(b"data")
    assert not path.exists()
    w.close()
    assert gzip.decompress(path.read_bytes()) == b"data"
    assert w.bytes_in == 4 and w.bytes_out == path.stat().st_size
    assert sorted(os.listdir(tmp_path)) == ["t.gz"]


def test_exception_in_with_block_keeps_the_old_file(tmp_path):
    path = tmp_path / "t.gz"
    path.write_bytes(b"old")
    with pytest.raises(KeyError):
        with kinetrace.GzipWriter(path) as w:
            w.write(_payload(3 * BLOCK))
            raise KeyError("boom")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["t.gz"]


def test_write_after_close_raises():
    w = kinetrace.GzipWriter(io.BytesIO())
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x")
    w.close()  # closing twice is fine


def test_disk_full_is_an_oserror():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with pytest.raises(OSError) as info:
        with kinetrace.GzipWriter("/dev/full", compresslevel=0) as w:
            for _ in range(8):
                w.write(os.urandom(BLOCK))
    assert info.value.errno == errno.ENOSPC


def test_writer_that_raises():
    class Failing(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise RuntimeError("the disk said no")

    with pytest.raises(RuntimeError, match="the disk said no"):
        with kinetrace.GzipWriter(Failing()) as w:
            for _ in range(8):
                w.write(_payload(BLOCK))
            w.flush()


def test_partial_writes_are_completed():
    class Trickle(io.RawIOBase):
        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, b):
            chunk = bytes(b[:1000])
            self.data += chunk
            return len(chunk)

    sink = Trickle()
    data = _payload(BLOCK + 3)
    with kinetrace.GzipWriter(sink) as w:
        w.write(data)
    assert _single_member(bytes(sink.data)) == data


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"compresslevel": -1}, ValueError),
        ({"compresslevel": 10}, ValueError),
        ({"threads": 0}, ValueError),
        ({"threads": 1000}, ValueError),
        ({"compresslevel": "6"}, TypeError),
    ],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        kinetrace.GzipWriter(io.BytesIO(), **kwargs)


def test_not_a_file():
    with pytest.raises(TypeError, match="path or a writable binary file"):
        kinetrace.GzipWriter(42)


@pytest.fixture(scope="module")
def profiled():
    torch = pytest.importorskip("torch")
    from torch.profiler import profile

    x = torch.randn(8, 8)
    with profile(record_shapes=True) as prof:
        for _ in range(300):
            (x + x).sum()
    return prof


def _without_trace_name(text: bytes) -> bytes:
    return text[: text.rindex(b'"traceName"')]


@pytest.mark.parametrize("level", [0, 1, 6, 9])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_export_gz_decodes_to_the_json_export(profiled, tmp_path, level, threads):
    plain = tmp_path / "t.json"
    packed = tmp_path / "t.json.gz"
    kinetrace.export_chrome_trace(profiled, plain)
    stats = kinetrace.export_chrome_trace(profiled, packed, compresslevel=level, threads=threads)
    blob = packed.read_bytes()
    text = _single_member(blob)
    assert _without_trace_name(text) == _without_trace_name(plain.read_bytes())
    assert text.endswith(b'"traceName": "' + str(packed).encode() + b'"\n}\n')
    assert stats.file_bytes == len(blob)
    assert stats.uncompressed_bytes == len(text)


@pytest.mark.skipif(shutil.which("gzip") is None, reason="no gzip binary")
def test_gzip_tools_accept_the_export(profiled, tmp_path):
    packed = tmp_path / "t.json.gz"
    kinetrace.export_chrome_trace(profiled, packed)
    subprocess.run(["gzip", "-t", str(packed)], check=True)
    out = subprocess.run(["zcat", str(packed)], check=True, capture_output=True).stdout
    assert out == gzip.decompress(packed.read_bytes())
