"""CUDA-graph annotations: a mapping graph node id -> annotation, baked into the trace as
torch 2.15's exporter does (``annotations=``, ``graph_lanes=``, ``default_stream=``).

An annotation is a dict (or a list of dicts) as ``torch.cuda.graph_annotations`` records
it. Each one is rendered here once, the way torch renders it per event (values
stringified, one ``json.dumps`` with the braces stripped, non-dicts skipped, ``"stream"``
taken out as the event's lane, ``"Process Group Description"`` as the lane's name); the
Rust writer matches events to them through the ``"graph node id"`` in their metadata and
does the rest (lane moves, held-back ``gpu_user_annotation`` events, lane names).
"""

from __future__ import annotations

import array
import functools
import json
import operator
import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GRAPH_LANES", "Graphs", "prepare"]

#: The values ``graph_lanes`` takes.
GRAPH_LANES = ("all", "none")

_WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_LANE_NAME_KEY = "Process Group Description"
# The same pattern torch searches the metadata text with (for the header flag).
_GNODE_RE = re.compile(r'"graph node id":\s*(\d+)')
_INT64 = (-(2**63), 2**63 - 1)

#: One rendered annotation: (node id, args members or None, lane or None, lane name or None).
Entry = tuple[int, "str | None", "int | None", "str | None"]


@dataclass(frozen=True)
class Graphs:
    """The annotations of one export, rendered, and its lane mode."""

    #: The original mapping (the header flag looks nodes up in it, as torch does).
    mapping: Mapping[Any, Any]
    entries: list[Entry]
    lanes_all: bool
    default_stream: int

    def native(self, inline_annotated: bool) -> tuple[Any, ...]:
        """The arguments of ``_Exporter.set_graph_annotations``."""
        digits, spaces = _char_classes()
        return (
            self.entries,
            self.lanes_all,
            self.default_stream,
            digits,
            spaces,
            inline_annotated,
        )

    def inline_annotated(self, activities: Sequence[Any]) -> bool:
        """Whether some work activity's node has an annotation (the header flag).

        Torch's rule, read the same way: stops at the first one, so it usually reads a
        handful of activities; a trace whose annotations match nothing is read in full.
        """
        lookup = self.mapping.get
        for act in activities:
            if act.type() in _WORK_CATEGORIES:
                md = act.metadata_json()
                if md:
                    match = _GNODE_RE.search(md)
                    if lookup(int(match.group(1)) if match else 0):
                        return True
        return False


def prepare(
    annotations: Mapping[Any, Any] | None, graph_lanes: str, default_stream: int
) -> Graphs | None:
    """Checks the arguments as torch does and renders the annotations; None when there
    are none (an empty mapping means the same as None).

    Raises:
        ValueError: ``graph_lanes`` is not ``"all"`` or ``"none"``, ``"all"`` comes
            without annotations (torch's messages), or an annotation's ``"stream"`` is not
            an integer (what ``int()`` raises) in the signed 64-bit range. Torch raises
            the latter only when an event of that node is written; here it is raised
            before anything is written, whether or not an event matches.
        TypeError: ``default_stream`` is not an int, ``annotations`` not a mapping, or an
            annotation's ``"stream"`` cannot be converted by ``int()``.
    """
    if graph_lanes not in GRAPH_LANES:
        raise ValueError(f"graph_lanes must be 'all' or 'none', got {graph_lanes!r}")
    if graph_lanes == "all" and not annotations:
        raise ValueError(
            "graph_lanes='all' needs cuda_graph_annotations: without them every graphed "
            "event would land on default_stream, which loses the stream layout and names "
            "nothing in return"
        )
    if isinstance(default_stream, bool) or not isinstance(default_stream, int):
        raise TypeError(f"default_stream must be an int, not {type(default_stream).__name__}")
    if not _INT64[0] <= default_stream <= _INT64[1]:
        raise ValueError(f"default_stream must fit in 64 bits, got {default_stream}")
    if not annotations:
        return None
    if not (hasattr(annotations, "keys") and hasattr(annotations, "get")):
        raise TypeError(
            f"annotations must be a mapping of graph node id to annotation, "
            f"not {type(annotations).__name__}"
        )
    entries: list[Entry] = []
    for key in list(annotations.keys()):
        node = _node_id(key)
        if node is None:
            continue
        annotation = annotations.get(node)
        if not annotation:
            continue
        try:
            args, stream, lane_name = _render(annotation)
        except (TypeError, ValueError) as exc:
            # Torch fails the same way, once an event of that node is written.
            raise type(exc)(f"annotation of graph node {node}: stream: {exc}") from exc
        if args is None and stream is None and lane_name is None:
            continue
        if stream is not None and not _INT64[0] <= stream <= _INT64[1]:
            raise ValueError(f"annotation of graph node {node}: stream {stream} is out of range")
        entries.append((node, args, stream, lane_name))
    return Graphs(annotations, entries, graph_lanes == "all", default_stream)


def _node_id(key: Any) -> int | None:
    """The graph node id ``key`` stands for (what ``get(node_id)`` would find it with),
    or None when no event can name it (not an integer, zero, negative, past 64 bits)."""
    try:
        node = operator.index(key)
    except TypeError:
        if not isinstance(key, float) or not key.is_integer():
            return None
        node = int(key)
    return node if 0 < node < 2**64 else None


def _render(annotation: Any) -> tuple[str | None, int | None, str | None]:
    """Torch's ``_annotation_args``: the args members, the lane, the lane name."""
    stream: int | None = None
    lane_name: str | None = None
    chunks: list[str] = []
    for ann in annotation if isinstance(annotation, list) else [annotation]:
        if not isinstance(ann, dict):
            continue
        if lane_name is None and _LANE_NAME_KEY in ann:
            lane_name = str(ann[_LANE_NAME_KEY])
        norm: dict[str, Any] = {}
        for key, value in ann.items():
            if key == "stream":
                stream = int(value)
            else:
                norm[str(key)] = str(value)
        if norm:
            chunks.append(json.dumps(norm)[1:-1])
    return (", ".join(chunks) if chunks else None), stream, lane_name


#: ``_char_classes()`` of Unicode 14.0.0 (Python 3.11), so that version skips the scan.
# fmt: off
_DIGITS_14 = (
    (0x660, 0x669, 0x660), (0x6f0, 0x6f9, 0x6f0), (0x7c0, 0x7c9, 0x7c0), (0x966, 0x96f, 0x966),
    (0x9e6, 0x9ef, 0x9e6), (0xa66, 0xa6f, 0xa66), (0xae6, 0xaef, 0xae6), (0xb66, 0xb6f, 0xb66),
    (0xbe6, 0xbef, 0xbe6), (0xc66, 0xc6f, 0xc66), (0xce6, 0xcef, 0xce6), (0xd66, 0xd6f, 0xd66),
    (0xde6, 0xdef, 0xde6), (0xe50, 0xe59, 0xe50), (0xed0, 0xed9, 0xed0), (0xf20, 0xf29, 0xf20),
    (0x1040, 0x1049, 0x1040), (0x1090, 0x1099, 0x1090), (0x17e0, 0x17e9, 0x17e0),
    (0x1810, 0x1819, 0x1810), (0x1946, 0x194f, 0x1946), (0x19d0, 0x19d9, 0x19d0),
    (0x1a80, 0x1a89, 0x1a80), (0x1a90, 0x1a99, 0x1a90), (0x1b50, 0x1b59, 0x1b50),
    (0x1bb0, 0x1bb9, 0x1bb0), (0x1c40, 0x1c49, 0x1c40), (0x1c50, 0x1c59, 0x1c50),
    (0xa620, 0xa629, 0xa620), (0xa8d0, 0xa8d9, 0xa8d0), (0xa900, 0xa909, 0xa900),
    (0xa9d0, 0xa9d9, 0xa9d0), (0xa9f0, 0xa9f9, 0xa9f0), (0xaa50, 0xaa59, 0xaa50),
    (0xabf0, 0xabf9, 0xabf0), (0xff10, 0xff19, 0xff10), (0x104a0, 0x104a9, 0x104a0),
    (0x10d30, 0x10d39, 0x10d30), (0x11066, 0x1106f, 0x11066), (0x110f0, 0x110f9, 0x110f0),
    (0x11136, 0x1113f, 0x11136), (0x111d0, 0x111d9, 0x111d0), (0x112f0, 0x112f9, 0x112f0),
    (0x11450, 0x11459, 0x11450), (0x114d0, 0x114d9, 0x114d0), (0x11650, 0x11659, 0x11650),
    (0x116c0, 0x116c9, 0x116c0), (0x11730, 0x11739, 0x11730), (0x118e0, 0x118e9, 0x118e0),
    (0x11950, 0x11959, 0x11950), (0x11c50, 0x11c59, 0x11c50), (0x11d50, 0x11d59, 0x11d50),
    (0x11da0, 0x11da9, 0x11da0), (0x16a60, 0x16a69, 0x16a60), (0x16ac0, 0x16ac9, 0x16ac0),
    (0x16b50, 0x16b59, 0x16b50), (0x1d7ce, 0x1d7d7, 0x1d7ce), (0x1d7d8, 0x1d7e1, 0x1d7d8),
    (0x1d7e2, 0x1d7eb, 0x1d7e2), (0x1d7ec, 0x1d7f5, 0x1d7ec), (0x1d7f6, 0x1d7ff, 0x1d7f6),
    (0x1e140, 0x1e149, 0x1e140), (0x1e2f0, 0x1e2f9, 0x1e2f0), (0x1e950, 0x1e959, 0x1e950),
    (0x1fbf0, 0x1fbf9, 0x1fbf0),
)
_SPACES_14 = (
    0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
    0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
)
# fmt: on


@functools.cache
def _char_classes() -> tuple[list[tuple[int, int, int]], list[int]]:
    """This Python's ``\\d`` (runs of (first, last, zero)) and ``\\s`` (code points) on
    ``str`` beyond ASCII: torch's patterns use them, and they follow the Unicode version."""
    if unicodedata.unidata_version == "14.0.0":
        return list(_DIGITS_14), list(_SPACES_14)
    return _scan_char_classes()


def _scan_char_classes() -> tuple[list[tuple[int, int, int]], list[int]]:
    """``_char_classes()`` read off the ``re`` module (about 0.1 s)."""
    points = array.array("I", range(0x80, 0xD800))
    points.extend(range(0xE000, sys.maxunicode + 1))
    every = points.tobytes().decode("utf-32-le" if sys.byteorder == "little" else "utf-32-be")
    digits: list[tuple[int, int, int]] = []
    for match in re.finditer(r"\d", every):
        cp = ord(match.group())
        zero = cp - int(match.group())
        if digits and digits[-1][1] == cp - 1 and digits[-1][2] == zero:
            digits[-1] = (digits[-1][0], cp, zero)
        else:
            digits.append((cp, cp, zero))
    spaces = [ord(m.group()) for m in re.finditer(r"\s", every)]
    return digits, spaces
