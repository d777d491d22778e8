#!/usr/bin/env python3
"""Writes the files a documentation page shows: every fenced block whose first line is
``# file: PATH`` becomes OUTDIR/PATH, so the page's examples are checked and run as they are
written (``nox -s workflows`` checks docs/ci.md's workflow; ``tests/test_ci_recipe.py``
runs its recipe). Prints the paths written; exit 1 when the page shows none.

    python scripts/doc-files.py docs/ci.md OUTDIR
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"^```[\w-]*\n# file: (\S+)\n(.*?)^```", re.S | re.M)


def doc_files(page: Path, out: Path) -> list[Path]:
    """The files of ``page`` written under ``out`` (a path may not leave ``out``)."""
    written = []
    for name, body in BLOCK.findall(page.read_text(encoding="utf-8")):
        path = (out / name).resolve()
        if not path.is_relative_to(out.resolve()):
            raise ValueError(f"{page}: {name} is outside the output folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# file: {name}\n{body}", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    written = doc_files(Path(argv[0]), Path(argv[1]))
    for path in written:
        print(path)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
