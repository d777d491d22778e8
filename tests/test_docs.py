"""The docs stay true to the code: every public name (``kinetrace.__all__``) is documented in
docs/api.md, every test file is named in ARCHITECTURE.md's test list, and the README's two
set-up commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import kinetrace

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def _code_spans(markdown: str) -> list[str]:
    """The text of every code span and fenced block (what a reference names code in)."""
    return re.findall(r"`+([^`]+)`+", markdown)


def _undocumented(names: list[str], markdown: str) -> list[str]:
    spans = _code_spans(markdown)
    return [
        name
        for name in names
        if not any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", span) for span in spans)
    ]


def test_every_public_name_is_documented_in_api_md():
    text = (ROOT / "docs" / "api.md").read_text()
    assert _undocumented(list(kinetrace.__all__), text) == []


def test_a_name_outside_code_or_inside_another_is_not_documented():
    text = "CompressResult in prose, `compress_trace_fast(x)` and `kinetrace.Keep(...)`"
    assert _undocumented(["CompressResult", "compress_trace", "Keep"], text) == [
        "CompressResult",
        "compress_trace",
    ]


def _test_files() -> list[Path]:
    return sorted(TESTS.glob("test_*.py")) + sorted(TESTS.glob("compat/test_*.py"))


def test_every_test_file_is_named_in_architecture_md():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    files = _test_files()
    assert {path.stem for path in files} >= {"test_docs", "test_layout", "test_compat"}
    unnamed = [
        str(path.relative_to(ROOT))
        for path in files
        if not re.search(rf"(?<!\w){path.stem}(?!\w)", text)
    ]
    assert unnamed == [], "add them to ARCHITECTURE.md's list of test files"


def test_the_readme_holds_exactly_two_setup_commands_and_ci_runs_the_second():
    """The README's set-up section: one command that runs the main job (the demo), one that
    runs every test; `.ci/run` runs that same test command, unchanged."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The two set-up commands", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```\n(.*?)```", section, re.S)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]
    for command in commands:
        script = ROOT / command
        assert script.is_file() and script.stat().st_mode & 0o111, command
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec \./scripts/test\.sh\s*$", ci, re.M), ci
