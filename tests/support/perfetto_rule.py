"""A small, independent reference of the rule by which Perfetto's JSON importer drops complete
(``X``) events for overlapping on a thread track (import stat
``slice_drop_overlapping_complete_event``), to test ``src/tools/overlap.rs`` against.

Written from Perfetto's trace processor (2025, before v57.1 spilled such events onto overflow
tracks): the sorter's JSON order (``TraceSorter``: ts, then ``E`` first, ``X`` by decreasing
``dur``, the rest, then file order), the JSON parser's tracks (``pid``/``tid`` coerced to
uint32, a string interned, no ``tid`` = the ``pid``) and ``SliceTracker`` (``Scoped``,
``Begin``, ``End``, ``MaybeCloseStack`` walking the whole stack and popping its top, the
depth limit of 512). Unlike the Rust model it keeps thread-scoped instants on the stacks and
always walks the whole stack, which the Rust model argues it can skip: the tests compare
the two.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 512
PENDING = None  # the duration of an unfinished B


def to_ns(value: Any) -> int | None:
    """A JSON number of µs as integer ns, as Perfetto's tokenizer converts it: an integral
    value times 1000 exactly, else ``llround(value * 1000.0)``; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    if not math.isfinite(v):
        return None
    if v == math.trunc(v):
        return int(v) * 1000
    x = v * 1000.0
    r = math.floor(abs(x))
    if abs(x) - r >= 0.5:
        r += 1
    return int(r) if x >= 0 else -int(r)


def _id(value: Any) -> tuple[str, Any] | None:
    """A pid or tid as Perfetto keys its tracks (None: not one)."""
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    n = math.trunc(value)
    return ("n", int(n)) if 0 <= n <= 0xFFFFFFFF else None


def _track(event: dict[str, Any]) -> tuple[Any, Any]:
    pid = _id(event.get("pid")) or ("n", 0)
    tid = _id(event.get("tid")) if "tid" in event else None
    return (pid, tid or pid)


def dropped(events: list[Any]) -> list[int]:
    """Indices (in ``events``) of the ``X`` events Perfetto drops for overlapping."""
    items = []
    for index, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        ts = to_ns(e.get("ts"))
        if ts is None or ph not in ("X", "B", "E", "i", "I"):
            continue
        if ph == "X":
            dur = to_ns(e.get("dur"))
            if dur is None or dur < 0:
                continue
            key = (1 << 63) - 1 - dur
        elif ph == "E":
            dur = PENDING
            key = -(1 << 63)
        elif ph == "B":
            dur = PENDING
            key = (1 << 63) - 1
        else:
            # An instant is on the thread's track only with thread scope and a tid.
            if e.get("s", "t") != "t" or _id(e.get("tid")) is None:
                continue
            dur = 0
            key = (1 << 63) - 1
        name = e.get("name") if isinstance(e.get("name"), str) and e.get("name") else None
        cat = e.get("cat") if isinstance(e.get("cat"), str) and e.get("cat") else None
        items.append((ts, key, index, ph, dur, _track(e), name, cat))
    items.sort(key=lambda item: item[:3])
    stacks: dict[Any, list[list[Any]]] = {}
    out = []
    for ts, _, index, ph, dur, track, name, cat in items:
        stack = stacks.setdefault(track, [])
        if ph == "E":
            if not stack:
                continue
            _close(stack, ts, PENDING)
            for slot in reversed(stack):
                if slot[1] is not PENDING:
                    continue
                if cat is not None and slot[3] != cat:
                    continue
                if name is not None and slot[2] is not None and slot[2] != name:
                    continue
                slot[1] = ts - slot[0]
                if slot is stack[-1]:
                    stack.pop()
                break
            continue
        fits = _close(stack, ts, dur)
        if not fits:
            out.append(index)
            continue
        if len(stack) >= MAX_DEPTH:
            continue
        if ph == "B":
            stack.append([ts, PENDING, name or "[No name]", cat])
        else:
            stack.append([ts, dur, name, cat])
    return sorted(out)


def _close(stack: list[list[Any]], ts: int, dur: int | None) -> bool:
    """``MaybeCloseStack``: pops what ended; False when a slice starting at ``ts`` lasting
    ``dur`` would start inside an open slice and end after it."""
    unfinished_above = False
    i = len(stack) - 1
    while i >= 0:
        if i >= len(stack):
            i -= 1
            continue
        start, open_dur = stack[i][0], stack[i][1]
        if open_dur is PENDING:
            unfinished_above = True
            i -= 1
            continue
        end = start + open_dur
        if unfinished_above:
            if ts > end:
                for slot in stack[i + 1 :]:
                    slot[1] = end - slot[0]
                del stack[i:]
                unfinished_above = False
            i -= 1
            continue
        if end < ts or (end == ts and not (open_dur == 0 and dur == 0)):
            stack.pop()  # the top, whichever entry this is
            i -= 1
            continue
        if dur is not PENDING and ts < end < ts + dur:
            return False
        i -= 1
    return True
