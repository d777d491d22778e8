"""Shared test configuration.

Hypothesis profiles (choose with ``HYPOTHESIS_PROFILE=<name>``):

- ``default``: 150 examples per property, no deadline (exports write files and start a
  writer thread; timing varies on a loaded 2-core machine).
- ``ci``: 200 examples, derandomized (reproducible), no example database; what
  ``scripts/test.sh`` (CI's command) selects itself, and the default where ``CI`` is set.
- ``dev``: 25 examples, for a quick local run.
- ``thorough``: 2000 examples, for an occasional long run.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The tests import their shared helpers as ``support.<module>`` (tests/support/), also when
# pytest is run on a single file or on tests/compat.
sys.path.insert(0, str(Path(__file__).parent))


def _deliverable_signals() -> None:
    """The tests send SIGINT and SIGHUP to this process and to the processes it starts. A
    run started in the background of a script (``cmd &`` ignores SIGINT) or under
    ``nohup`` (SIGHUP) inherits them ignored, and an ignored signal stays ignored across
    ``exec``: Ctrl-C would never reach the programs under test. Python's own SIGINT handler
    is put back, and SIGHUP gets one that does nothing here (the run stays immune to a
    hang-up, as asked); a signal with a handler is reset to its default in a new program."""
    if not hasattr(signal, "SIGHUP"):
        return
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, lambda signum, frame: None)


_deliverable_signals()

_common = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("default", max_examples=150, **_common)
settings.register_profile("ci", max_examples=200, derandomize=True, database=None, **_common)
settings.register_profile("dev", max_examples=25, **_common)
settings.register_profile("thorough", max_examples=2000, **_common)
# CI (which sets ``CI``) runs the derandomized profile: a failure there fails again on rerun.
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
)


def pytest_addoption(parser):
    parser.addoption(
        "--allowed-skips",
        default=os.environ.get("KINETRACE_ALLOWED_SKIPS") or None,
        help="a file of regular expressions (one a line, # comments): a test skipped for a "
        "reason none of them matches fails the run (scripts/test.sh: tests/allowed-skips.txt)",
    )
    parser.addoption(
        "--run-slow", action="store_true", help="also run the tests marked slow (multi-GB)"
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (or -m slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# --------------------------------------------------------------------------------------------
# Every skip accounted for: with --allowed-skips (CI), a skip whose reason is not on the list
# fails the run at its end, each one named with its reason.
# --------------------------------------------------------------------------------------------

_SKIPS: list[tuple[str, str]] = []


def _allowed_patterns(path: str) -> list[re.Pattern[str]]:
    lines = Path(path).read_text().splitlines()
    return [re.compile(line) for line in lines if line.strip() and not line.startswith("#")]


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _SKIPS.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--allowed-skips")
    if not path or not _SKIPS:
        return
    patterns = _allowed_patterns(path)
    unexplained = [(n, r) for n, r in _SKIPS if not any(p.search(r) for p in patterns)]
    if unexplained:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"{len(unexplained)} skip(s) whose reason is not on {path}:"]
        lines += [f"  {nodeid}: {reason}" for nodeid, reason in unexplained]
        if reporter is not None:
            reporter.write_sep("=", "unexplained skips", red=True)
            reporter.write_line("\n".join(lines))
        else:
            print("\n".join(lines), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
