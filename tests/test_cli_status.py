"""One exit status per cause for every tool subcommand (``kinetrace._cli.status``): each
subcommand run in-process for each cause (an unreadable file's in a subprocess as an
ordinary user: :mod:`support.users`), the table in ``kinetrace --help`` and docs/api.md.
A new tool subcommand joins by adding a row to :data:`TOOLS`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kinetrace import _cli
from kinetrace._cli import status
from support.aftermath import subprocess_env
from support.cli import run
from support.users import run_python

ROOT = Path(__file__).resolve().parent.parent

#: subcommand -> (the argv for SRC and a destination in a folder, the library function its
#: module calls). Each writes its output into ``out``; ``check`` writes none.
TOOLS: dict[str, tuple[Callable[[Path, Path], list[str | Path]], str]] = {
    "check": (lambda src, out: ["check", src], "check_trace"),
    "repair": (lambda src, out: ["repair", src, out / "r.json"], "repair_trace"),
    "compress": (lambda src, out: ["compress", src, out / "c.json.gz"], "compress_trace"),
    "split": (lambda src, out: ["split", src, "--max-mb", "1", "--out-dir", out], "split_trace"),
    "filter": (lambda src, out: ["filter", src, out / "f.json"], "filter_trace"),
    "merge": (lambda src, out: ["merge", src, "-o", out / "m.json"], "merge_traces"),
    "summary": (lambda src, out: ["summary", src, "--html", out / "s.html"], "summarize"),
    "diff": (lambda src, out: ["diff", src, src], "diff"),
    "parquet": (lambda src, out: ["parquet", src, "-o", out / "ds"], "to_parquet"),
    "ops": (lambda src, out: ["ops", src, "--html", out / "o.html"], "ops"),
}

EVENTS = [
    {"ph": "X", "name": "a", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
    {"ph": "X", "name": "b", "cat": "kernel", "ts": 5, "dur": 2, "pid": 1, "tid": 2},
]


def _args(tool: str, src: Path | str, out: Path) -> list[str | Path]:
    """``tool``'s argv for ``src``, writing into the folder ``out`` (made if missing and its
    parent is a folder)."""
    if out.parent.is_dir():
        out.mkdir(exist_ok=True)
    return TOOLS[tool][0](Path(src), out)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))
    return path


@pytest.mark.parametrize("tool", TOOLS)
def test_done(tool, trace, tmp_path, capsys):
    assert run(*_args(tool, trace, tmp_path / "out")) == status.DONE == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("tool", TOOLS)
def test_not_a_trace_fails(tool, tmp_path, capsys):
    src = tmp_path / "hello.json"
    src.write_text("hello")
    assert run(*_args(tool, src, tmp_path / "out")) == status.FAILED == 1
    captured = capsys.readouterr()
    assert "hello.json" in captured.out + captured.err


def test_check_findings_fail(tmp_path):
    """check's findings: a trace that does not load, or any warning with ``--strict``."""
    src = tmp_path / "w.json"
    src.write_text(json.dumps({"traceEvents": [{**EVENTS[0], "dur": -1}]}))
    assert run("check", src) == status.DONE
    assert run("check", "--strict", src) == status.FAILED


@pytest.mark.parametrize("tool", [tool for tool in TOOLS if tool not in ("check", "diff")])
def test_unwritable_output_fails(tool, trace, tmp_path, capsys):
    """The output cannot be written (its folder is a file): a failure, not an unreadable
    input."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run(*_args(tool, trace, blocker / "out")) == status.FAILED
    assert f"kinetrace {tool}: error: " in capsys.readouterr().err


@pytest.mark.parametrize("tool", [tool for tool in TOOLS if tool in ("repair", "compress")])
def test_refusing_to_overwrite_fails(tool, trace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    argv = _args(tool, trace, out)
    Path(argv[-1]).write_text("old")
    assert run(*argv) == status.FAILED
    assert Path(argv[-1]).read_text() == "old"
    assert run(*argv[:1], "--force", *argv[1:]) == status.DONE


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "missing.json"


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("{}")
    return tmp_path / "file" / "t.json"


def _directory(tmp_path: Path) -> Path:
    (tmp_path / "dir").mkdir()
    return tmp_path / "dir"


def _io_error(tmp_path: Path) -> Path:
    return Path("/proc/self/mem")  # opens, and reading its first byte fails with EIO


def _no_permission(tmp_path: Path) -> Path:
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))
    path.chmod(0)
    return path


UNREADABLE = {
    "missing": _missing,
    "under a file": _under_a_file,
    "directory": _directory,
    "I/O error": _io_error,
    "no permission": _no_permission,
}


@pytest.mark.parametrize("cause", UNREADABLE)
@pytest.mark.parametrize("tool", TOOLS)
def test_unreadable_input(tool, cause, tmp_path, capsys):
    if not Path("/proc/self/mem").exists() and cause == "I/O error":
        pytest.skip("no /proc/self/mem to fail a read")
    src = UNREADABLE[cause](tmp_path)
    argv = _args(tool, src, tmp_path / "out")
    if tool in ("merge", "summary", "parquet", "diff", "ops") and cause == "directory":
        # These read the traces in a directory: an empty one holds none, which the error
        # says in the tool's own name (one sources helper for them all).
        assert run(*argv) == status.FAILED
        err = capsys.readouterr().err
        assert f"{src}: no trace file (*.json, *.json.gz) in this directory for {tool}" in err
        return
    if cause == "no permission":
        # Root reads it whatever its mode: the command runs as an ordinary user.
        done = run_python("-m", "kinetrace", *argv)
        code, err = done.returncode, done.stderr
    else:
        code, err = run(*argv), capsys.readouterr().err
    assert code == status.UNREADABLE == 2, err
    assert err.startswith(f"kinetrace {tool}: error: cannot read {src}: "), err
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_fifo_input_loses_no_byte_to_the_check(tmp_path, capsys):
    """A FIFO (``kinetrace check <(zcat t.json.gz)``) is only looked up before the work:
    opening it would wait for a writer and reading would take the trace's first bytes."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    text = json.dumps({"traceEvents": EVENTS}).encode()

    done = threading.Event()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(text)
        if not done.wait(30):  # a second open waits for a writer: give it an empty one
            with open(fifo, "wb"):
                pass

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        assert run("check", fifo) == status.DONE, capsys.readouterr()
    finally:
        done.set()
        feeder.join(timeout=60)


@pytest.mark.parametrize("tool", TOOLS)
def test_input_gone_while_running_is_unreadable(tool, trace, tmp_path, monkeypatch):
    """An ``OSError`` from the work while an input has gone meanwhile: unreadable input."""
    module = getattr(_cli, "filter_" if tool == "filter" else tool)

    def vanish(*args, **kwargs):
        trace.unlink()
        raise FileNotFoundError(2, f"{trace}: No such file or directory")

    monkeypatch.setattr(module, TOOLS[tool][1], vanish)
    assert run(*_args(tool, trace, tmp_path / "out")) == status.UNREADABLE


@pytest.mark.parametrize("tool", TOOLS)
def test_usage_error(tool, trace, tmp_path, capsys):
    assert run(*_args(tool, trace, tmp_path / "out"), "--no-such-option") == status.USAGE == 2
    assert "unrecognized arguments" in capsys.readouterr().err


#: Numbers out of their range, per tool: a usage error (2) before the tool starts, as
#: ``compress -l 10`` is.
OUT_OF_RANGE: dict[str, list[list[str]]] = {
    "check": [],
    "repair": [],
    "compress": [["-l", "10"], ["-j", "0"], ["--threads", "257"]],
    "split": [["--max-mb", "0"]],
    "filter": [["--min-dur-us", "-1"]],
    "merge": [["-l", "10"], ["-j", "0"], ["--max-mb", "-5"]],
    "summary": [["-j", "0"], ["--threads", "2000"]],
    "diff": [["-j", "0"], ["--fail-above", "-1"], ["--skip-first", "-1"], ["--fail-above", "nan"]],
    "parquet": [["--level", "23"], ["-l", "0"], ["--threads", "2000"], ["-j", "0"]],
    "ops": [["--top", "0"], ["--top", "10001"]],
}


@pytest.mark.parametrize(
    ("tool", "option"), [(t, o) for t, options in OUT_OF_RANGE.items() for o in options]
)
def test_out_of_range_numbers_are_usage_errors(tool, option, trace, tmp_path, capsys):
    assert run(*_args(tool, trace, tmp_path / "out"), *option) == status.USAGE
    err = capsys.readouterr().err
    assert f"argument {option[0]}" in err or "must be" in err, err
    assert os.listdir(tmp_path / "out") == []


def test_ops_unknown_gpu_is_a_usage_error_naming_the_known_ones(trace, capsys):
    assert run("ops", trace, "--gpu", "h300") == status.USAGE
    err = capsys.readouterr().err
    assert "unknown GPU 'h300'; known: v100-sxm2-32gb, " in err and "mi300x" in err, err
    assert run("ops", trace, "--gpu", "H100 SXM") == status.DONE
    assert "GPU: NVIDIA H100 SXM5 80GB (h100-sxm, from --gpu)" in capsys.readouterr().out


#: One meaning, one spelling: the long flag and the short one every tool that has the
#: meaning gives it (older spellings stay as aliases).
SHARED_FLAGS = {"--output": "-o", "--force": "-f", "--threads": "-j", "--level": "-l"}


def test_shared_flags_are_spelled_alike_in_every_tool():
    parser = _cli.build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    seen = set()
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            for long, short in SHARED_FLAGS.items():
                if long in action.option_strings:
                    seen.add((name, long))
                    assert short in action.option_strings, (name, action.option_strings)
                elif short in action.option_strings:
                    raise AssertionError(f"{name}: {short} means {action.option_strings}")
    # parquet's first spelling, -o/--out, stays an alias of --output.
    assert ("parquet", "--output") in seen and ("merge", "--output") in seen
    assert {("parquet", "--threads"), ("summary", "--threads"), ("parquet", "--level")} <= seen


def test_parquet_keeps_its_old_out_spelling(trace, tmp_path):
    assert run("parquet", trace, "--out", tmp_path / "ds") == status.DONE
    assert (tmp_path / "ds" / "_kinetrace.json").is_file()


def test_demo_failure_is_one_line(tmp_path, capsys):
    """demo runs through run_tool too: an unwritable --out is status 1 and one line."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run("demo", "--iterations", "5", "--out", blocker / "out") == status.FAILED
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"kinetrace demo: error: {blocker / 'out'}: Not a directory", err
    assert not any("Traceback" in line for line in err), err


def test_demo_prints_its_own_output_not_torchs_log(tmp_path):
    """torch's profiler (Kineto) logs every start and stop of a profile to fd 2; the demo
    keeps that aside, so a CPU machine shows the demo's lines and its table alone."""
    done = subprocess.run(
        [sys.executable, "-m", "kinetrace", "demo", "--iterations", "20", "--out", tmp_path],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "profiling 20 steps" in done.stderr, done.stderr
    assert "profiler_start" not in done.stderr and "USDT" not in done.stderr, done.stderr
    assert "kinetrace      json" in done.stdout


def test_no_subcommand_is_a_usage_error(capsys):
    assert run() == status.USAGE
    assert "exit status" in capsys.readouterr().err


def _stop(signum: int) -> Callable[..., None]:
    def raise_(*args: object, **kwargs: object) -> None:
        raise _cli.Stopped(signum)

    return raise_


def _raise(exc: BaseException) -> Callable[..., None]:
    def raise_(*args: object, **kwargs: object) -> None:
        raise exc

    return raise_


ENDINGS = {
    "Ctrl-C": (_raise(KeyboardInterrupt()), 130),
    "SIGTERM": (_stop(signal.SIGTERM), 143),
    "SIGHUP": (_stop(signal.SIGHUP), 129),
    "closed stdout": (_raise(BrokenPipeError(32, "Broken pipe")), 141),
}


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("tool", TOOLS)
def test_signals_and_closed_stdout(tool, ending, trace, tmp_path, monkeypatch):
    """What ``main`` does when the work stops (the real signals: ``test_signals.py``)."""
    module = getattr(_cli, "filter_" if tool == "filter" else tool)
    action, code = ENDINGS[ending]
    monkeypatch.setattr(module, TOOLS[tool][1], action)
    assert run(*_args(tool, trace, tmp_path / "out")) == code


def test_every_tool_subcommand_is_tested():
    """Every subcommand but ``demo``, ``run`` and ``record`` (which run other code;
    test_record has record's statuses) is a tool with the statuses of the table."""
    names = {module.__name__.rsplit(".", 1)[1].rstrip("_") for module in _cli.SUBCOMMANDS}
    assert names - {"demo", "run", "record"} == set(TOOLS)


def _table_text(text: str) -> str:
    return " ".join(text.split())


def test_help_states_the_table(capsys):
    with pytest.raises(SystemExit):
        _cli.main(["--help"])
    out = _table_text(capsys.readouterr().out)
    for code, cause in status.TABLE:
        assert f"{code} {_table_text(cause)}" in out


def test_api_md_states_the_table():
    """docs/api.md's table of exit statuses is :data:`status.TABLE`, row for row."""
    text = (ROOT / "docs" / "api.md").read_text()
    rows = [
        tuple(cell.strip().strip("`") for cell in line.strip().strip("|").split("|"))
        for line in text.splitlines()
        if line.startswith("| `") and "|" in line[1:]
    ]
    codes = {code for code, _ in status.TABLE}
    table = [row for row in rows if len(row) == 2 and row[0] in codes]
    assert table == list(status.TABLE)
