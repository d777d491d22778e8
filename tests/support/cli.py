"""The command line called in this process, as the tools' tests drive it."""

from __future__ import annotations

import os

from kinetrace import _cli


def run(*argv: str | os.PathLike[str]) -> int:
    """``kinetrace ARGV...``'s exit status (a usage error's too)."""
    try:
        return _cli.main([os.fspath(a) for a in argv])
    except SystemExit as exit_:
        assert isinstance(exit_.code, int)
        return exit_.code
