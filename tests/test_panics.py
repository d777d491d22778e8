"""Rust panics: one on the calling thread is a ``PanicException``, one on the writer thread
a ``RuntimeError``; either way the interpreter and the module keep working, no temporary
file or thread is left, and an existing file is untouched. The writer-thread panic is
injected by driving kinetrace's own extraction (``_extract.extract_here``) into an exporter
that panics after a chosen batch.

The panics are made by hooks only a build with the cargo feature ``test-hooks`` has (never a
release wheel, ``support.hooks``): ``noxfile.py``'s ``hooks`` session runs this file against
such a build with ``KINETRACE_REQUIRE_TEST_HOOKS=1``, where a build without them fails
instead of skipping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import kinetrace
from kinetrace import _kinetrace
from kinetrace._export import extract as _extract
from support import BASE
from support.aftermath import (
    OLD,
    assert_no_kinetrace_threads,
    assert_untouched,
)
from support.hooks import require_test_hooks
from support.synthetic import SyntheticResult
from support.traces import assert_valid_trace

require_test_hooks()


def test_panic_on_the_calling_thread_is_an_exception(tmp_path):
    with pytest.raises(BaseException) as info:  # PanicException derives from BaseException
        _kinetrace._panic_for_tests()
    assert type(info.value).__name__ == "PanicException"
    assert "requested by a test" in str(info.value)
    # The interpreter and the module keep working.
    stats = kinetrace.export_chrome_trace(SyntheticResult(5000), tmp_path / "t.json.gz")
    assert stats.events > 5000
    assert_valid_trace(tmp_path / "t.json.gz")


class PanickingExporter:
    """An ``_Exporter`` whose writer thread is made to panic (``_inject_panic``) before batch
    ``panic_after`` of the second pass (-1: before the close; None: never)."""

    def __init__(self, inner: Any, panic_after: int | None) -> None:
        self.inner = inner
        self.panic_after = panic_after
        self.batches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read_batch(self, *args: Any) -> Any:
        if self.batches == self.panic_after:
            self.inner._inject_panic()
        self.batches += 1
        return self.inner.read_batch(*args)

    def close(self, trace_name: str) -> None:
        if self.panic_after == -1:
            self.inner._inject_panic()
        self.inner.close(trace_name)


def drive_exporter(
    path: Path,
    result: Any,
    *,
    compresslevel: int | None = None,
    panic_after: int | None = None,
) -> None:
    """Runs kinetrace's own extraction (``_extract.extract_here``, both passes) into a
    :class:`PanickingExporter` and waits for the file, as an in-process export does."""
    inner = _kinetrace._Exporter(str(path), compresslevel, 2, False)
    exporter = PanickingExporter(inner, panic_after)
    try:
        _extract.extract_here(exporter, result, result.trace_activities(), None, BASE, str(path))
        inner.wait(None)
    except BaseException:
        inner.abort()
        raise


def test_driver_matches_export(tmp_path):
    """The driver writes what export_chrome_trace writes (so the panic tests exercise the
    real flow)."""
    result = SyntheticResult(20_000, gpu=True)
    drive_exporter(tmp_path / "t.json", result)
    direct = (tmp_path / "t.json").read_bytes()
    kinetrace.export_chrome_trace(result, tmp_path / "t.json", base_time_ns=BASE)
    assert (tmp_path / "t.json").read_bytes() == direct


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize(
    "panic_after",
    [0, 3, -1],
    ids=["before-first-batch", "after-three-batches", "before-close"],
)
def test_writer_thread_panic(tmp_path, suffix, panic_after):
    path = tmp_path / f"t{suffix}"
    path.write_bytes(OLD)
    with pytest.raises(RuntimeError, match="panic") as info:
        drive_exporter(
            path,
            SyntheticResult(40_000),
            compresslevel=6 if suffix.endswith(".gz") else None,
            panic_after=panic_after,
        )
    assert "requested by a test" in str(info.value)
    assert_untouched(tmp_path, {path.name: OLD})
    assert_no_kinetrace_threads()
    # Later exports work, through the driver and through the API.
    drive_exporter(path, SyntheticResult(5_000), compresslevel=6 if ".gz" in suffix else None)
    assert_valid_trace(path)
    kinetrace.export_chrome_trace(SyntheticResult(5_000), path)
    assert_valid_trace(path)


def _rank_trace(path: Path, rank: int) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": i * 10}
        | {"dur": 5, "args": {"stream": 7}}
        for i in range(200)
    ]
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events}))


@pytest.mark.parametrize("tool", ["summary", "parquet", "merge"])
def test_a_panicking_reader_is_an_error_naming_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    """The one pool of reader threads (``src/read/sources.rs``) turns a reader's panic into an
    error naming the file it read, for every tool on it; the others stop, nothing is left."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank in range(3):
        _rank_trace(ranks / f"rank{rank}.json", rank)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("KINETRACE_TEST_PANIC_READING", "rank1.json")
    calls: dict[str, Any] = {
        "summary": lambda: kinetrace.summarize(ranks),
        "parquet": lambda: kinetrace.to_parquet(ranks, out / "dataset"),
        "merge": lambda: kinetrace.merge_traces([ranks], out / "merged.json"),
    }
    with pytest.raises(RuntimeError, match="panic") as info:
        calls[tool]()
    assert "rank1.json" in str(info.value), info.value
    assert "requested by a test" in str(info.value)
    assert list(out.iterdir()) == [], "a failed run left something behind"
    assert_no_kinetrace_threads()
    monkeypatch.delenv("KINETRACE_TEST_PANIC_READING")
    calls[tool]()  # the module keeps working
