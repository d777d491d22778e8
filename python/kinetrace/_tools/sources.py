"""The trace files a tool's sources name (``merge``, ``summary``, ``parquet``): each file as
given, and for each directory the trace files in it, so every tool that takes "files or
folders of ranks" finds the same ones and says the same thing when there are none."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

__all__ = ["TRACE_SUFFIXES", "trace_files"]

#: What a file in a folder of traces ends with to be taken as a trace.
TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(
    sources: Iterable[str | os.PathLike[str]], *, tool: str, exclude: Sequence[str] = ()
) -> list[str]:
    """The trace files ``sources`` name: each file as given, and for each directory the files
    in it (not below) whose names end in ``.json`` or ``.json.gz``, hidden ones and
    ``exclude`` left out, sorted by name. ``tool`` (``"merge"``, ``"summary"``, ...) names
    the caller in the errors.

    Raises:
        FileNotFoundError: a source does not exist.
        ValueError: a directory holds no trace file, or no source is given.
    """
    excluded = {os.path.abspath(e) for e in exclude}
    files: list[str] = []
    for source in sources:
        path = os.fsdecode(source)
        if os.path.isdir(path):
            found = sorted(
                os.path.join(path, name)
                for name in os.listdir(path)
                if name.endswith(TRACE_SUFFIXES)
                and not name.startswith(".")
                and os.path.isfile(os.path.join(path, name))
                and os.path.abspath(os.path.join(path, name)) not in excluded
            )
            if not found:
                raise ValueError(
                    f"{path}: no trace file (*.json, *.json.gz) in this directory for {tool}"
                )
            files.extend(found)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise FileNotFoundError(2, "No such file or directory", path)
    if not files:
        raise ValueError(f"{tool}: no trace given (a trace file or a folder of them)")
    return files
