"""kinetrace.install()/uninstall() and the ``kinetrace run`` command."""

from __future__ import annotations

import gzip
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.autograd.profiler
import torch.profiler
import torch.profiler.profiler as torch_profiler_module
from torch.profiler import ProfilerActivity
from torch.profiler._chrome_trace_export import export_chrome_trace as torch_python_export

import kinetrace
from kinetrace import _cli as cli
from kinetrace._export import export as _export
from kinetrace._export import handles as _handles
from kinetrace._export import profiler as _profiler
from support.aftermath import subprocess_env

CPU = [ProfilerActivity.CPU]
KINETO_PROFILE = torch_profiler_module._KinetoProfile
AUTOGRAD_PROFILE = torch.autograd.profiler.profile
# torch's own objects, taken before any test could patch them
ORIGINALS = {
    "kineto": vars(KINETO_PROFILE)["export_chrome_trace"],
    "autograd": vars(AUTOGRAD_PROFILE)["export_chrome_trace"],
    "handler": torch.profiler.tensorboard_trace_handler,
    "handler_module": torch_profiler_module.tensorboard_trace_handler,
}


def current() -> dict[str, Any]:
    return {
        "kineto": vars(KINETO_PROFILE)["export_chrome_trace"],
        "autograd": vars(AUTOGRAD_PROFILE)["export_chrome_trace"],
        "handler": torch.profiler.tensorboard_trace_handler,
        "handler_module": torch_profiler_module.tensorboard_trace_handler,
    }


def is_torch() -> bool:
    return all(current()[k] is v for k, v in ORIGINALS.items())


@pytest.fixture(autouse=True)
def restore_torch() -> Iterator[None]:
    assert is_torch() and not _profiler.installed()
    yield
    _profiler.uninstall()
    assert is_torch()


def work() -> None:
    x = torch.ones(8)
    (x + x).sum()


def torch_profile() -> torch.profiler.profile:
    with torch.profiler.profile(activities=CPU) as prof:
        work()
    return prof


def python_export_bytes(result: Any, path: Path, metadata: Any) -> bytes:
    """What torch's Python exporter writes at ``path`` (the file is removed)."""
    torch_python_export(result, str(path), metadata)
    data = path.read_bytes()
    path.unlink()
    return data


# ---------------------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------------------


def test_install_patches_and_uninstall_restores_the_same_objects() -> None:
    _profiler.install()
    assert _profiler.installed()
    assert current() == {
        "kineto": _profiler._kineto_profile_export_chrome_trace,
        "autograd": _profiler._autograd_profile_export_chrome_trace,
        "handler": _profiler.tensorboard_trace_handler,
        "handler_module": _profiler.tensorboard_trace_handler,
    }
    assert torch.profiler.profile.export_chrome_trace.__module__ == "kinetrace._export.profiler"
    _profiler.uninstall()
    assert not _profiler.installed()
    assert is_torch()
    assert torch.profiler.profile.export_chrome_trace is ORIGINALS["kineto"]
    assert "export_chrome_trace" not in vars(torch.profiler.profile)


def test_install_is_idempotent() -> None:
    _profiler.install()
    _profiler.install()
    assert len(_profiler._saved) == 4
    assert all(original in ORIGINALS.values() for _, _, original in _profiler._saved)
    _profiler.uninstall()
    assert is_torch()
    _profiler.uninstall()  # uninstalling twice is harmless too
    assert is_torch()


def test_installed_context() -> None:
    with _profiler.installed_context():
        assert _profiler.installed()
        with _profiler.installed_context():
            assert _profiler.installed()
        assert _profiler.installed()  # the inner block found it installed: left as is
    assert not _profiler.installed() and is_torch()
    _profiler.install()
    with _profiler.installed_context():
        pass
    assert _profiler.installed()
    with pytest.raises(ZeroDivisionError), _profiler.installed_context():
        1 / 0  # noqa: B018
    assert _profiler.installed()


def test_torch_export_differs_without_install(tmp_path: Path) -> None:
    """Kineto's C++ writer does not write torch's Python-exporter bytes, so the comparison
    in the next test tells whose code wrote the file."""
    prof = torch_profile()
    path = tmp_path / "t.json"
    expected = python_export_bytes(prof.profiler.kineto_results, path, prof._trace_metadata)
    prof.export_chrome_trace(str(path))
    assert path.read_bytes() != expected


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_torch_profile_export_goes_through_kinetrace(tmp_path: Path, name: str) -> None:
    prof = torch_profile()
    path = tmp_path / name
    expected = python_export_bytes(prof.profiler.kineto_results, path, prof._trace_metadata)
    _profiler.install()
    stats = prof.export_chrome_trace(str(path))
    assert isinstance(stats, kinetrace.ExportStats)
    data = path.read_bytes()
    if name.endswith(".gz"):
        assert data[:2] == b"\x1f\x8b"
        assert gzip.decompress(data) == gzip.decompress(expected)
    else:
        assert data == expected


def test_autograd_profile_export_goes_through_kinetrace(tmp_path: Path) -> None:
    with torch.autograd.profiler.profile() as prof:
        work()
    path = tmp_path / "t.json"
    metadata = {"note": '"autograd"'}
    expected = python_export_bytes(prof.kineto_results, path, metadata)
    without = python_export_bytes(prof.kineto_results, path, None)
    _profiler.install()
    prof.export_chrome_trace(str(path), metadata)
    assert path.read_bytes() == expected
    prof.export_chrome_trace(str(path))
    assert path.read_bytes() == without


@pytest.mark.skipif(
    "graph_lanes" not in inspect.signature(KINETO_PROFILE.export_chrome_trace).parameters,
    reason="this torch has no graph_lanes",
)
def test_graph_lane_arguments_through_the_installed_methods(tmp_path: Path) -> None:
    _profiler.install()
    prof = torch_profile()
    with pytest.raises(ValueError, match="graph_lanes must be 'all' or 'none'"):
        prof.export_chrome_trace(str(tmp_path / "a.json"), graph_lanes="sideways")
    with pytest.raises(ValueError, match="graph_lanes must be 'all' or 'none'"):
        prof.profiler.export_chrome_trace(str(tmp_path / "b.json"), graph_lanes="sideways")
    ours = _profiler.profile(activities=CPU)
    with ours:
        work()
    with pytest.raises(ValueError, match="graph_lanes must be 'all' or 'none'"):
        ours.export_chrome_trace(str(tmp_path / "c.json"), graph_lanes="sideways")
    # an annotated export is kinetrace's, with the bytes of torch's Python exporter
    path = tmp_path / "annotated.json"
    annotations = {12345: {"tag": "x"}}
    expected = python_export_bytes(prof.profiler.kineto_results, path, prof._trace_metadata)
    stats = prof.export_chrome_trace(str(path), cuda_graph_annotations=annotations)
    assert isinstance(stats, _export.ExportStats)
    assert path.read_bytes() == expected
    stats = prof.profiler.export_chrome_trace(str(path), None, False, annotations, "all", 3)
    assert isinstance(stats, _export.ExportStats)


def test_disabled_autograd_profile_behaves_as_torch(tmp_path: Path) -> None:
    prof = torch.autograd.profiler.profile(enabled=False)
    with prof:
        work()
    with pytest.raises(AttributeError) as theirs:
        prof.export_chrome_trace(str(tmp_path / "t.json"))
    _profiler.install()
    with pytest.raises(AttributeError) as ours:
        prof.export_chrome_trace(str(tmp_path / "t.json"))
    assert str(ours.value) == str(theirs.value)


def test_torch_handler_after_install(tmp_path: Path) -> None:
    _profiler.install()
    assert torch.profiler.tensorboard_trace_handler is _profiler.tensorboard_trace_handler
    checked: list[bool] = []

    def on_ready(prof: Any) -> None:
        # torch's signature: (dir_name, worker_name, use_gzip, use_python_export)
        handler = torch.profiler.tensorboard_trace_handler(str(tmp_path), "w", False, False)
        handler(prof)
        (path,) = tmp_path.iterdir()
        written = path.read_bytes()
        expected = python_export_bytes(prof.profiler.kineto_results, path, prof._trace_metadata)
        checked.append(written == expected)

    with torch.profiler.profile(activities=CPU, on_trace_ready=on_ready):
        work()
    assert checked == [True]


# ---------------------------------------------------------------------------------------
# kinetrace run
# ---------------------------------------------------------------------------------------

PROBE = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.profiler
    from torch.profiler._chrome_trace_export import export_chrome_trace as python_export

    out = sys.argv[1]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (torch.ones(4) + 1).sum()
    path = os.path.join(out, "trace.json")
    prof.export_chrome_trace(path)  # unchanged torch code
    written = open(path, "rb").read()
    os.remove(path)
    python_export(prof.profiler.kineto_results, path, prof._trace_metadata)
    report = {
        "module": torch.profiler.profile.export_chrome_trace.__module__,
        "handler": torch.profiler.tensorboard_trace_handler.__module__,
        "same_as_python_export": written == open(path, "rb").read(),
        "argv": sys.argv,
        "name": __name__,
        "path0": sys.path[0],
    }
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f)
    """
)


def test_run_subprocess(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROBE)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "kinetrace", "run", str(script), str(out), "--lr", "-m", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report == {
        "module": "kinetrace._export.profiler",
        "handler": "kinetrace._export.profiler",
        "same_as_python_export": True,
        "argv": [str(script), str(out), "--lr", "-m", "x"],
        "name": "__main__",
        "path0": str(tmp_path),
    }


def write_script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return script


def test_run_in_process(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        """
        import json, sys
        from kinetrace._export import profiler as _profiler
        with open(sys.argv[1], "w") as f:
            json.dump({"argv": sys.argv, "name": __name__,
                       "installed": _profiler.installed()}, f)
        """,
    )
    report = tmp_path / "report.json"
    argv_before, path_before = sys.argv[:], sys.path[:]
    assert cli.main(["run", str(script), str(report), "--help"]) == 0
    assert json.loads(report.read_text()) == {
        "argv": [str(script), str(report), "--help"],
        "name": "__main__",
        "installed": True,
    }
    assert sys.argv == argv_before and sys.path == path_before
    assert not _profiler.installed()


def test_run_keeps_an_existing_install(tmp_path: Path) -> None:
    script = write_script(tmp_path, "pass\n")
    _profiler.install()
    assert cli.main(["run", str(script)]) == 0
    assert _profiler.installed()


@pytest.mark.parametrize(
    ("body", "status", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit()", 0, ""),
        ("import sys; sys.exit('boom')", 1, "boom\n"),
        ("raise SystemExit(False)", 0, ""),
    ],
)
def test_run_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, status: int, stderr: str
) -> None:
    script = write_script(tmp_path, body)
    assert cli.main(["run", str(script)]) == status
    assert capsys.readouterr().err == stderr
    assert not _profiler.installed()


def test_run_exception_is_the_scripts_and_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception of the script's ends it as ``python script.py`` would: its traceback,
    status 1; kinetrace's state is restored."""
    script = write_script(tmp_path, "raise KeyError('from the script')\n")
    argv_before = sys.argv[:]
    assert cli.main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):"), err
    assert err.rstrip().endswith("KeyError: 'from the script'"), err
    assert sys.argv == argv_before
    assert not _profiler.installed()


def test_run_missing_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable script is a status of the table (2), one line, as for every tool."""
    missing = tmp_path / "nope.py"
    assert cli.main(["run", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kinetrace run: error: cannot read {missing}: "), err
    assert "Traceback" not in err


def test_run_failed_background_export_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A background export the script left that fails: the run's status 1 with one line,
    not a traceback (run_tool)."""
    script = write_script(
        tmp_path,
        """
        import torch, kinetrace
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            (torch.ones(4) + 1).sum()
        kinetrace.export_chrome_trace(p, "/dev/full", background=True)
        """,
    )
    assert cli.main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kinetrace run: error: ") and "Traceback" not in err, err
    assert not _profiler.installed()


def test_run_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text(
        "import json, sys\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    json.dump({'argv': sys.argv[1:], 'name': __name__}, f)\n"
    )
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    assert cli.main(["run", "-m", "probe_pkg.tool", str(report), "x"]) == 0
    assert json.loads(report.read_text()) == {"argv": [str(report), "x"], "name": "__main__"}
    sys.modules.pop("probe_pkg", None)


def test_run_waits_for_background_exports(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        """
        import sys, torch, kinetrace
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            (torch.ones(4) + 1).sum()
        handler = torch.profiler.tensorboard_trace_handler(sys.argv[1])
        handler(p)
        kinetrace.export_chrome_trace(p, sys.argv[1] + "/bg.json.gz", background=True)
        """,
    )
    out = tmp_path / "out"
    assert cli.main(["run", str(script), str(out)]) == 0
    assert _handles._pending == []
    names = sorted(os.listdir(out))
    assert len(names) == 2 and names[0] == "bg.json.gz"
    assert re.fullmatch(r".+_\d+\.\d+\.pt\.trace\.json", names[1])


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "run" in capsys.readouterr().err


def test_unknown_command() -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["bogus"])
    assert info.value.code == 2


@pytest.mark.skipif(
    bool(os.environ.get("KINETRACE_REQUIRE_TEST_HOOKS")), reason="running a test-hooks build"
)
def test_the_installed_build_carries_no_test_hooks(tmp_path: Path) -> None:
    """The test hooks exist only in a build with the cargo feature ``test-hooks``
    (``noxfile.py``'s ``hooks`` session makes one for ``tests/test_panics.py`` and
    ``tests/test_bench_gate.py``), never in the wheel: no panic hooks, and
    ``KINETRACE_TEST_SLOWDOWN`` changes nothing (in a test-hooks build, 999 would hold this
    summary, ~20 ms, for ~20 s; the bound, 10 s, is far above its time on a busy machine),
    nor does ``KINETRACE_TEST_PANIC_READING`` (a test-hooks build's reader of that file
    panics); the instruction-count program's benchmarks and extra work are not in it
    either."""
    from kinetrace import _kinetrace

    trace = tmp_path / "t.json"
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": i * 10}
        | {"dur": 5, "args": {"stream": 7}}
        for i in range(20_000)
    ]
    trace.write_text(json.dumps({"traceEvents": events}))
    code = (
        "import sys, time, kinetrace; t = time.perf_counter(); "
        "kinetrace.summarize(sys.argv[1]); print(time.perf_counter() - t)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(trace)],
        env={
            **subprocess_env(),
            "KINETRACE_TEST_SLOWDOWN": "999",
            "KINETRACE_TEST_PANIC_READING": trace.name,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert float(done.stdout) < 10, done.stdout
    assert not hasattr(_kinetrace, "_panic_for_tests")
    assert not hasattr(_kinetrace._Exporter, "_inject_panic")
    assert not hasattr(_kinetrace, "format_microseconds")
    # Nor the count gate's program or its extra work (cargo features counts, count-hooks).
    native = Path(_kinetrace.__file__).read_bytes()
    assert b"KINETRACE_TEST_EXTRA_WORK" not in native
    assert b"export-input" not in native
