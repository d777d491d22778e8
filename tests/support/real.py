"""The real traces recorded by others (CUDA, ROCm, MTIA and CPU machines, 2021-2026) in
``../shared/traces/`` beside the project's root: never copied into the repository (they are
other projects' files, with their licenses; its README lists source, license, events and
ranks of each). Tests of them skip, with :data:`MISSING` as the reason, where the folder is
absent (a clone outside this workspace)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

#: The folder of the real traces: ``shared/traces`` beside the project's root.
REAL_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "traces"

#: Why a real-trace test skips.
MISSING = f"no real traces here: {REAL_DIR} is absent (a clone outside the workspace)"

#: Set (``scripts/test.sh`` sets it): the real traces must be there; without them the test
#: session stops at collection instead of skipping every test that reads one.
REQUIRE = "KINETRACE_REQUIRE_REAL_TRACES"

if os.environ.get(REQUIRE) and not REAL_DIR.is_dir():
    raise RuntimeError(f"{REQUIRE} is set, but {MISSING}")


def _listed() -> list[Path]:
    """Every trace file under :data:`REAL_DIR` (``.json`` and ``.json.gz``), by path."""
    if not REAL_DIR.is_dir():
        return []
    return sorted(p for p in REAL_DIR.rglob("*") if p.name.endswith((".json", ".json.gz")))


#: Every real trace file.
ALL_REAL_FILES: list[Path] = _listed()


def _distinct(paths: list[Path]) -> list[Path]:
    """``paths`` less byte-identical copies (the first path of each content stays)."""
    seen: set[str] = set()
    kept = []
    for path in paths:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            kept.append(path)
    return kept


#: The distinct real traces (the folder holds a few files twice, at its top and in ``hta/``:
#: the ``hta/`` copy is the one kept), by path.
REAL_TRACES: list[Path] = sorted(
    _distinct(sorted(ALL_REAL_FILES, key=lambda p: (p.parent == REAL_DIR, p)))
)

#: The eight ranks of one DLRM job (8x V100, NCCL), pretty-printed plain JSON.
DLRM_RANKS: list[Path] = [p for p in REAL_TRACES if p.parent.name == "dlrm_kineto"]


def trace_id(path: Path) -> str:
    """A short test id: the path under :data:`REAL_DIR` without its ``.json[.gz]``."""
    rel = path.relative_to(REAL_DIR).as_posix()
    return rel.removesuffix(".gz").removesuffix(".json")


def real_params() -> list[Any]:
    """:data:`REAL_TRACES` for ``pytest.mark.parametrize``; one skipped case without them."""
    if not REAL_TRACES:
        return [pytest.param(None, id="no-real-traces", marks=pytest.mark.skip(reason=MISSING))]
    return [pytest.param(p, id=trace_id(p)) for p in REAL_TRACES]


def require_real() -> Path:
    """:data:`REAL_DIR`, or a skip with :data:`MISSING` where it is absent."""
    if not REAL_DIR.is_dir():
        pytest.skip(MISSING)
    return REAL_DIR


def real_path(rel: str) -> Path:
    """The real trace at ``rel`` under :data:`REAL_DIR`; skips the test when it is absent."""
    path = REAL_DIR / rel
    if not path.is_file():
        pytest.skip(MISSING if not REAL_DIR.is_dir() else f"{path} is missing")
    return path


#: Kept small: the largest traces are ~90 MB of JSON, over 1 GB once parsed.
@functools.lru_cache(maxsize=2)
def real_text(path: Path) -> bytes:
    """The JSON text of a real trace (decompressed)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


@functools.lru_cache(maxsize=1)
def real_trace(path: Path) -> dict[str, Any]:
    """A real trace, parsed."""
    trace: dict[str, Any] = json.loads(real_text(path))
    return trace


class RawEvent(NamedTuple):
    """One element of ``traceEvents``: its bytes as written, and the fields tests select on."""

    raw: bytes
    ph: str
    cat: str | None
    dur: float | None
    #: ``pid`` and ``tid`` as JSON text (a number or a string), None when absent.
    pid: str | None
    tid: str | None
    name: str | None
    #: ``id`` as JSON text (flows and async events), None when absent.
    id: str | None


def event_spans(text: bytes) -> list[tuple[int, int]]:
    """(start, end) byte offsets of each element of ``traceEvents`` in ``text`` (valid
    JSON, ASCII keys up to ``traceEvents``)."""
    return [(start, end) for start, end, _ in _walk_events(text)]


def raw_events(text: bytes) -> list[RawEvent]:
    """Each element of ``traceEvents`` in ``text`` (see :class:`RawEvent`), in file order."""
    out = []
    for start, end, event in _walk_events(text):
        if not isinstance(event, dict):
            event = {}
        dur = event.get("dur")
        out.append(
            RawEvent(
                raw=text[start:end],
                ph=str(event.get("ph", "")),
                cat=event.get("cat"),
                dur=float(dur) if isinstance(dur, (int, float)) else None,
                pid=json.dumps(event["pid"]) if "pid" in event else None,
                tid=json.dumps(event["tid"]) if "tid" in event else None,
                name=event.get("name"),
                id=json.dumps(event["id"]) if "id" in event else None,
            )
        )
    return out


def _walk_events(text: bytes) -> Iterator[tuple[int, int, Any]]:
    """(start, end, decoded) of each element of ``traceEvents``, decoded one by one."""
    s = text.decode("utf-8")
    decoder = json.JSONDecoder()
    at = s.index('"traceEvents"')
    at = s.index("[", at) + 1
    # Offsets in bytes: count them as the text is walked (the same for ASCII text).
    ascii_only = len(s) == len(text)
    byte_at = at if ascii_only else len(s[:at].encode("utf-8"))
    while True:
        while s[at] in " \t\r\n,":
            at += 1
            byte_at += 1
        if s[at] == "]":
            return
        event, end = decoder.raw_decode(s, at)
        size = end - at if ascii_only else len(s[at:end].encode("utf-8"))
        yield byte_at, byte_at + size, event
        byte_at += size
        at = end
