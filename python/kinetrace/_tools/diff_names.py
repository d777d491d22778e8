"""Renames are not changes: names that differ between two builds only in what a compiler or
a library's heuristics put in them (template values, parameter lists, tile sizes, numbered
or hashed suffixes) are paired by :func:`family`, their family key (``docs/diff.md``).

Linear time: :func:`family` is one scan of the name (and one anchored regex pass), and
:func:`pair_renames` one dict of keys; only the names sharing a key are sorted, by time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

__all__ = ["family", "pair_renames", "row_label"]

K = TypeVar("K", bound=Hashable)

#: Tile sizes (``128x64``, ``64x64x32``); the lookbehind starts a match only at the start of
#: a digit run, so a long run is scanned once, not once per digit.
_TILE = re.compile(r"(?<![0-9])[0-9]+(?:x[0-9]+)+")
_HEX = frozenset("0123456789abcdef")
#: A suffix of at least this many hex digits (with one digit at least) is a hash.
HASH_DIGITS = 8


def _is_suffix(token: str) -> bool:
    """A numbered suffix (``_0``), a hex literal (``_0x1f``) or a hash (``_3fa9c2d17b``)."""
    if token.isdigit():
        return True
    if token.startswith("0x") and len(token) > 2:
        return set(token[2:].lower()) <= _HEX
    return len(token) >= HASH_DIGITS and set(token) <= _HEX and any(c.isdigit() for c in token)


def _scan(name: str) -> str:
    """Balanced ``(...)`` groups removed, digit runs inside ``<...>`` made ``#``."""
    out: list[str] = []
    opens: list[int] = []  # where each open ``(`` was written
    angle = 0
    for ch in name:
        if ch == "(":
            opens.append(len(out))
            out.append(ch)
        elif ch == ")" and opens:
            del out[opens.pop() :]  # each character is deleted at most once: linear
        elif ch == "<":
            angle += 1
            out.append(ch)
        elif ch == ">" and angle:
            angle -= 1
            out.append(ch)
        elif ch.isdigit() and angle and not opens:
            if not out or out[-1] != "#":
                out.append("#")
        else:
            out.append(ch)
    return "".join(out)


def family(name: str) -> str:
    """The key two builds' names of one kernel (or operator) share:

    - balanced ``(...)`` groups removed (parameter lists, ``(anonymous namespace)``, casts,
      and with them ``__launch_bounds__(...)``'s values; the word itself removed too);
    - inside ``<...>``, every number made ``#`` (template values: vector widths, block and
      tile sizes), types and functors kept (``foo<float>`` and ``foo<half>`` differ);
    - surrounding spaces removed;
    - trailing ``_N``, ``_0x...`` and hex-hash (8 or more hex digits, one a digit at least)
      suffixes removed (``triton_poi_fused_add_0`` and ``_1``);
    - tile sizes anywhere made ``#x#`` (``ampere_sgemm_128x64_nn`` and ``_64x64_nn``: one
      GEMM family, the tile a cuBLAS heuristic's choice).
    """
    key = _scan(name).replace("__launch_bounds__", "").strip()
    end = len(key)
    while True:
        i = key.rfind("_", 0, end)  # looks only at the last token: linear over all tokens
        if i <= 0 or not _is_suffix(key[i + 1 : end]):
            break
        end = i
    # Suffixes first: a hex literal (``_0x1f``) is no tile size.
    return _TILE.sub("#x#", key[:end].rstrip("_") or key)


def pair_renames(
    gone: Mapping[K, float], new: Mapping[K, float], key: Callable[[K], Hashable]
) -> list[tuple[K, K]]:
    """Pairs of (gone, new) items (each on one side only, with its time) whose ``key``
    matches: per key, gone and new each in order of time (largest first, then as given),
    paired in that order; the leftovers of a key stay unpaired."""
    buckets: dict[Hashable, tuple[list[K], list[K]]] = {}
    for side, items in enumerate((gone, new)):
        for item in items:
            buckets.setdefault(key(item), ([], []))[side].append(item)
    pairs: list[tuple[K, K]] = []
    for g, n in buckets.values():
        if g and n:
            # sorted() is stable: equal times keep the order given.
            g = sorted(g, key=lambda i: -gone[i])
            n = sorted(n, key=lambda i: -new[i])
            pairs.extend(zip(g, n, strict=False))  # leftovers stay unpaired
    return pairs


def row_label(status: str, name: str, new_name: str) -> str:
    """A row's name as every output shows it: with its status, and for a rename both names
    (``(renamed) BASE's => NEW's``)."""
    if status == "renamed":
        return f"(renamed) {name} => {new_name}"
    return f"({status}) {name}" if status else name
