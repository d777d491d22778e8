"""Real processes get terminated and killed: what is left afterwards.

- The command-line tools (``compress``, ``split``, ``filter``, ``merge``) stop on SIGTERM
  and SIGHUP as on Ctrl-C, at any point of their work: exit status 128 + the signal, every
  file they created removed, an existing destination untouched.
- SIGKILL (and SIGTERM to a program that exports without a handler of its own) leaves the
  temporary file of the process that died; the next export or tool run in that directory
  removes it, and nothing else (another live process's temporary, a look-alike name, a file
  of another user).
- A broken pipe ends a tool quietly (status 141, no traceback).
- ``kinetrace parquet`` killed mid-conversion or mid-spill leaves its temporary folder
  (partial tables, sorted runs); the next conversion into that place, or any other tool
  run there, removes it. ``summary --html`` killed before its page is in place leaves its
  temporary page, which the next run there removes.

Every case runs the tool or the exporting program in its own process (``sys.executable -m
kinetrace``, or a short script), watches its output directory every 2 ms and signals it when
the work reaches the point named. Before these changes: ``compress`` left
``.c.json.gz.PID.*.kinetrace-tmp``, ``split`` its ``.NAME.part-00N-of-006.json.PID.kinetrace-
part.json`` files, ``filter`` its temporary file, and nothing ever removed a killed export's.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import kinetrace
from kinetrace import _kinetrace as native
from support.aftermath import TMP_SUFFIX, subprocess_env, temp_files
from support.big import BLOCK_EVENTS, write_big_trace
from support.synthetic import SyntheticResult

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL") or sys.platform == "win32", reason="POSIX signals"
)

#: Activities of the source trace: ~110 MB of JSON, so every tool runs for seconds.
ACTIVITIES = 300_000
OLD = b"an older file that must survive\n"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "big.json"
    kinetrace.export_chrome_trace(SyntheticResult(ACTIVITIES), path, workers=1)
    return path


@pytest.fixture(scope="module")
def source_gz(source: Path) -> Path:
    path = source.with_name("big.json.gz")
    kinetrace.compress_trace(source, path, compresslevel=1)
    return path


# A point of the work, read off the output directory's listing (the names in ``planted``
# aside): (name, predicate).
Point = tuple[str, Callable[[Path, "set[str]"], bool]]


def _temps(directory: Path, planted: set[str]) -> list[str]:
    try:
        return [name for name in temp_files(directory) if name not in planted]
    except FileNotFoundError:  # not made yet
        return []


def _bytes(directory: Path, planted: set[str]) -> int:
    total = 0
    for name in _temps(directory, planted):
        try:
            total += (directory / name).stat().st_size
        except FileNotFoundError:
            pass
    return total


AT_START: Point = ("at-start", lambda d, p: True)
FIRST_TEMP: Point = ("first-temporary", lambda d, p: bool(_temps(d, p)))
MIDWAY: Point = ("midway", lambda d, p: _bytes(d, p) > 8 << 20)
#: Midway for a gzip output (a few MB in all).
MIDWAY_GZ: Point = ("midway", lambda d, p: _bytes(d, p) > 1 << 20)


def _run_until(
    argv: list[str],
    out: Path,
    point: Point,
    signum: int,
    *,
    planted: set[str] | None = None,
    timeout: float = 300,
) -> tuple[int, str]:
    """Starts ``argv``, sends ``signum`` once ``point`` holds in ``out``, waits for the end:
    (exit status, stderr). Fails when the work ended before the point was reached."""
    proc = subprocess.Popen(
        argv,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        name, reached = point
        while not reached(out, planted or set()):
            if proc.poll() is not None:
                pytest.fail(f"{argv[3:5]} ended (status {proc.returncode}) before {name}")
            if time.monotonic() > deadline:
                pytest.fail(f"{argv[3:5]} did not reach {name} within {timeout} s")
            time.sleep(0.002)
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err


def _kinetrace(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "kinetrace", *map(str, args)]


def _commands(source: Path, source_gz: Path, out: Path) -> dict[str, list[str]]:
    return {
        "compress": _kinetrace("compress", "-f", "-l", "9", "-j", "1", source, out / "c.json.gz"),
        "split": _kinetrace("split", source, "--max-mb", "20", "--out-dir", out),
        "split-gz": _kinetrace(
            "split", source_gz, "--max-mb", "20", "--out-dir", out, "-l", "9", "-j", "1"
        ),
        "filter": _kinetrace("filter", source, out / "f.json", "--min-dur-us", "1"),
        "merge": _kinetrace("merge", source, source_gz, "-o", out / "m.json"),
    }


# The points of each command: a temporary appears at once for compress and filter (the
# output is created before the source is read) and after the first pass for split; a
# gzip split writes its plain parts, then encodes each one into a second temporary.
POINTS: dict[str, list[Point]] = {
    "compress": [AT_START, FIRST_TEMP, MIDWAY_GZ],
    "split": [AT_START, FIRST_TEMP, MIDWAY],
    "split-gz": [
        FIRST_TEMP,
        MIDWAY,
        ("encoding", lambda d, p: len(_temps(d, p)) > 6),
    ],
    "filter": [AT_START, FIRST_TEMP, MIDWAY],
    "merge": [FIRST_TEMP, MIDWAY],
}
CASES = [(command, point) for command, points in POINTS.items() for point in points]


def _exited_by(status: int, signum: int, point: str) -> bool:
    """128 + the signal from the tool's own handler; at the very start, before the tool
    installed it, the signal's default action (the process ends by the signal)."""
    return status == 128 + signum or (point == "at-start" and status == -signum)


@pytest.mark.parametrize(("command", "point"), CASES, ids=[f"{c}-{p[0]}" for c, p in CASES])
def test_sigterm_stops_a_tool_and_leaves_nothing(
    source: Path, source_gz: Path, tmp_path: Path, command: str, point: Point
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    existing = {"c.json.gz": OLD, "f.json": OLD}
    for name, content in existing.items():
        (out / name).write_bytes(content)
    argv = _commands(source, source_gz, out)[command]
    status, err = _run_until(argv, out, point, signal.SIGTERM)
    assert _exited_by(status, signal.SIGTERM, point[0]), (status, err)
    if status > 0:
        assert "stopped by SIGTERM" in err and "Traceback" not in err, err
    assert sorted(p.name for p in out.iterdir()) == sorted(existing)
    for name, content in existing.items():
        assert (out / name).read_bytes() == content


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP")
@pytest.mark.parametrize("command", ["compress", "split", "filter"])
def test_sighup_stops_a_tool_like_sigterm(
    source: Path, source_gz: Path, tmp_path: Path, command: str
) -> None:
    argv = _commands(source, source_gz, tmp_path)[command]
    status, err = _run_until(argv, tmp_path, FIRST_TEMP, signal.SIGHUP)
    assert status == 128 + signal.SIGHUP, (status, err)
    assert "stopped by SIGHUP" in err
    assert list(tmp_path.iterdir()) == []


#: Runs the command line after it with SIGHUP ignored, as ``nohup`` does (an ignored signal
#: stays ignored across ``exec``).
NOHUP = (
    "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP")
def test_a_tool_started_under_nohup_outlives_a_hangup(
    source: Path, source_gz: Path, tmp_path: Path
) -> None:
    """``nohup kinetrace compress ...``: the user asked for the hang-up to be ignored, so
    the tool finishes its work (a SIGHUP it handled would have stopped it with 129)."""
    argv = _commands(source, source_gz, tmp_path)["compress"]
    status, err = _run_until(
        [sys.executable, "-c", NOHUP, *argv], tmp_path, FIRST_TEMP, signal.SIGHUP
    )
    assert status == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["c.json.gz"]
    assert kinetrace.check_trace(tmp_path / "c.json.gz").valid


def test_sigterm_removes_the_folders_split_made(source: Path, tmp_path: Path) -> None:
    parts = tmp_path / "new" / "parts"
    argv = _kinetrace("split", source, "--max-mb", "20", "--out-dir", parts)
    status, err = _run_until(argv, parts, MIDWAY, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, err
    assert list(tmp_path.iterdir()) == []


def test_a_second_sigterm_does_not_break_the_cleanup(source: Path, tmp_path: Path) -> None:
    """Schedulers and process-group kills often deliver SIGTERM twice: the second one,
    arriving while the first is being handled, changes nothing."""
    argv = _commands(source, source, tmp_path)["split"]
    proc = subprocess.Popen(
        argv, env=subprocess_env(), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        while not MIDWAY[1](tmp_path, set()):
            assert proc.poll() is None, "split ended before the signal"
            time.sleep(0.002)
        for _ in range(5):
            os.kill(proc.pid, signal.SIGTERM)
            time.sleep(0.001)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def _plant_others(directory: Path) -> dict[str, bytes]:
    """Names the stale-temporary removal must leave alone: a live process's temporary (this
    test's own pid), a look-alike of another shape, the old shape of the name, a file that
    is no temporary at all."""
    live = Path(native.create_temporary(directory, "live.json"))
    live.write_bytes(b"live")
    pid_max = (
        int(Path("/proc/sys/kernel/pid_max").read_text())
        if os.path.exists("/proc/sys/kernel/pid_max")
        else 4_194_304
    )
    others = {
        live.name: b"live",
        f".t.json.{pid_max + 1}.0123456789abcdef{TMP_SUFFIX}": b"old shape",
        f".t.json.{pid_max + 1}.DEADBEEF.0123456789abcdef{TMP_SUFFIX}": b"look-alike",
        "notes.txt": b"not a temporary",
    }
    for name, content in others.items():
        (directory / name).write_bytes(content)
    return others


@pytest.mark.parametrize("command", ["compress", "split", "split-gz", "filter", "merge"])
def test_sigkill_litter_is_removed_by_the_next_run(
    source: Path, source_gz: Path, tmp_path: Path, command: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    others = _plant_others(out)
    argv = _commands(source, source_gz, out)[command]
    midway = MIDWAY_GZ if command == "compress" else MIDWAY
    status, _ = _run_until(argv, out, midway, signal.SIGKILL, planted=set(others))
    assert status == -signal.SIGKILL
    left = [n for n in temp_files(out) if n not in others]
    assert left, "SIGKILL left no temporary file (nothing to test)"
    time.sleep(0.02)  # the next run starts after the litter was last written
    # The next run of any tool in that directory (filter here) removes it.
    done = subprocess.run(
        _kinetrace("filter", source, out / "next.json", "--min-dur-us", "100000"),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*others, "next.json"])
    for name, content in others.items():
        assert (out / name).read_bytes() == content


def test_broken_pipe_ends_a_tool_quietly(tmp_path: Path) -> None:
    """``kinetrace check F | head -3`` on a report longer than the pipe holds: status 141,
    no traceback, nothing on stderr."""
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps({"traceEvents": [{"name": "no ph"}] * 20_000}))
    for extra in ([], ["--json"]):
        reader = subprocess.Popen(["head", "-3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert reader.stdin is not None
        done = subprocess.run(
            _kinetrace("check", "--examples", "20000", *extra, trace),
            env=subprocess_env(),
            stdout=reader.stdin,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
        reader.stdin.close()
        assert reader.stdout is not None
        head = reader.stdout.read()
        reader.stdout.close()
        reader.wait(timeout=30)
        assert len(head.splitlines()) == 3
        assert done.returncode == 141, done.stderr
        assert done.stderr == "", done.stderr


# --------------------------------------------------------------------------------------------
# In-process exports: the program has no handler, so SIGTERM kills it like SIGKILL
# --------------------------------------------------------------------------------------------

EXPORT = textwrap.dedent(
    """
    import sys
    import kinetrace
    from support.measure import warm_up
    from support.synthetic import SyntheticResult
    warm_up()
    path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = {"foreground": {"workers": 1}, "workers": {"workers": 2},
               "background": {"workers": 1, "background": True}}[mode]
    handle = kinetrace.export_chrome_trace(SyntheticResult(n), path, **options)
    if mode == "background":
        handle.result()
    """
)

EXPORT_MODES = ["foreground", "workers", "background"]


def _start_export(path: Path, mode: str, log: Path, *, session: bool) -> subprocess.Popen[bytes]:
    """The exporting program, its stderr in ``log`` (read it with ``log.read_text()``)."""
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", EXPORT, str(path), mode, str(ACTIVITIES)],
            env=subprocess_env(),
            stderr=err,
            start_new_session=session,
        )


def _group_of(pid: int) -> set[int]:
    """``pid`` and the process groups of its descendants (the background child has its own)."""
    groups = {pid}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:  # ppid
            groups.add(int(stat[2]))  # pgrp
    return groups


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("mode", EXPORT_MODES)
@pytest.mark.parametrize("point", [FIRST_TEMP, MIDWAY_GZ], ids=["first-temporary", "midway"])
def test_a_killed_export_leaves_litter_the_next_export_removes(
    tmp_path: Path, mode: str, signame: str, point: Point
) -> None:
    """The exporting program is killed (its background child and workers with it: a job
    scheduler kills them all). Its temporary is left (nothing can run in a process killed
    this way); the next export into that directory removes it and nothing else."""
    signum = getattr(signal, signame)
    out = tmp_path / "out"
    out.mkdir()
    (out / "t.json").write_bytes(OLD)
    others = _plant_others(out)
    log = tmp_path / "stderr"
    proc = _start_export(out / "t.json", mode, log, session=True)
    try:
        while not point[1](out, set(others)):
            assert proc.poll() is None, log.read_text()
            time.sleep(0.002)
        groups = _group_of(proc.pid)
        for group in groups:
            os.killpg(group, signum)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signum
    # Wait for the killed processes (workers, the background child) to be gone.
    deadline = time.monotonic() + 30
    while any(_alive_in(group) for group in groups) and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [n for n in temp_files(out) if n not in others]
    assert left, "the kill left no temporary file"
    assert (out / "t.json").read_bytes() == OLD
    time.sleep(0.02)
    kinetrace.export_chrome_trace(SyntheticResult(100), out / "next.json")
    assert sorted(p.name for p in out.iterdir()) == sorted([*others, "t.json", "next.json"])
    assert (out / "t.json").read_bytes() == OLD


def _alive_in(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_sigterm_to_a_program_leaves_its_background_export_to_finish(tmp_path: Path) -> None:
    """Only the program is terminated (``kill PID``): its background child, in a process
    group of its own, finishes the file, so nothing is left half written."""
    out = tmp_path / "out"
    out.mkdir()
    path = out / "t.json"
    log = tmp_path / "stderr"
    proc = _start_export(path, "background", log, session=False)
    try:
        while not temp_files(out):
            assert proc.poll() is None, log.read_text()
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 300
    while (temp_files(out) or not path.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.name for p in out.iterdir()] == ["t.json"]
    assert len(json.loads(path.read_bytes())["traceEvents"]) > ACTIVITIES


def test_gzip_litter_too(tmp_path: Path) -> None:
    """A killed ``.json.gz`` export's temporary (compressed, partial) goes the same way."""
    out = tmp_path / "out"
    out.mkdir()
    proc = _start_export(out / "t.json.gz", "foreground", tmp_path / "stderr", session=False)
    try:
        while not MIDWAY_GZ[1](out, set()) and proc.poll() is None:
            time.sleep(0.002)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert temp_files(out)
    time.sleep(0.02)
    kinetrace.export_chrome_trace(SyntheticResult(100), out / "next.json.gz")
    assert [p.name for p in out.iterdir()] == ["next.json.gz"]
    assert json.loads(gzip.decompress((out / "next.json.gz").read_bytes()))["traceEvents"]


# --------------------------------------------------------------------------------------------
# parquet's temporary folder and summary's page: the one scheme, the one sweep
# --------------------------------------------------------------------------------------------

#: Bytes of JSON of the parquet sources. Four of 16 MB (~19 MB written) hold less than the
#: 48 MiB of rows that make a table spill: converted one at a time (-j 1) they took 4.3 s
#: (rank 0's tables written at 1.5 s); one of 120 MB (~124 MB) spilled its first run at
#: 1.4 s and took 6.2 s (2 busy cores, load ~8). The tests stop at what they watch for,
#: with the 300 s timeout of ``_run_until`` as the margin.
SMALL_BYTES = 16 << 20
BIG_BYTES = 120 << 20


@pytest.fixture(scope="module")
def parquet_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The sources of each case: four ranks (no spill), one big rank (spills)."""
    folder = tmp_path_factory.mktemp("parquet-sources")
    small = [folder / f"rank-{r}.json" for r in range(4)]
    for rank, path in enumerate(small):
        write_big_trace(path, SMALL_BYTES, rank=rank, world_size=4)
    big = folder / "big.json"
    write_big_trace(big, BIG_BYTES)
    return {"mid-conversion": small, "mid-spill": [big]}


def _folders(parent: Path, name: str) -> list[Path]:
    """The temporary folders for ``name`` in ``parent``."""
    return [p for p in parent.glob(f".{name}.*{TMP_SUFFIX}") if p.is_dir()]


def _written(parent: Path, pattern: str) -> bool:
    """Whether a file matching ``pattern`` holds bytes in a temporary folder for ``ds``."""
    for folder in _folders(parent, "ds"):
        for path in folder.glob(pattern):
            try:
                if path.stat().st_size > 0:
                    return True
            except FileNotFoundError:  # a run merged and removed meanwhile
                pass
    return False


PARQUET_POINTS: dict[str, Point] = {
    # rank 0's four tables written, three sources still to read
    "mid-conversion": ("mid-conversion", lambda d, p: _written(d, "meta/rank=0/part-*")),
    # a sorted run of the big source on disk, more being read
    "mid-spill": ("mid-spill", lambda d, p: _written(d, ".runs-*/*/run-*")),
}


def _assert_complete(dataset: Path, sources: list[Path]) -> None:
    """Every table holds every row of ``sources`` (``write_big_trace``'s: per launch 4
    events and 2 flow ends, and 6 metadata events a source)."""
    pads = pytest.importorskip("pyarrow.dataset", reason="pyarrow (requirements-dev.txt)")
    launches = 0
    for source in sources:
        text = source.read_bytes()
        launches += text.count(b'"name":"cudaLaunchKernel"')
    rows = {
        t: pads.dataset(dataset / t, format="parquet", partitioning="hive").count_rows()
        for t in ("events", "flows", "tracks", "meta")
    }
    assert BLOCK_EVENTS == 6
    assert rows == {
        "events": 4 * launches,
        "flows": 2 * launches,
        "tracks": 6 * len(sources),
        "meta": len(sources),
    }
    ranks = json.loads((dataset / "_kinetrace.json").read_text())["ranks"]
    assert len(ranks) == len(sources)


PARQUET_CASES = [("mid-conversion", "parquet"), ("mid-spill", "parquet"), ("mid-spill", "filter")]


@pytest.mark.parametrize(
    ("point", "next_run"), PARQUET_CASES, ids=["-".join(c) for c in PARQUET_CASES]
)
def test_a_killed_parquets_folder_is_removed_by_the_next_run_there(
    parquet_sources: dict[str, list[Path]], tmp_path: Path, point: str, next_run: str
) -> None:
    """SIGKILL leaves the conversion's temporary folder beside DIR (its partial tables, or
    its sorted runs); the next ``kinetrace parquet`` into that folder removes it and makes
    the whole dataset, and so does any tool that makes a temporary there (``filter``)."""
    parent = tmp_path / "out"
    parent.mkdir()
    others = _plant_others(parent)
    live = Path(native.create_temporary_dir(parent, "ds"))  # this process's: kept
    (live / "part.parquet").write_bytes(b"live")
    others[live.name] = b""
    sources = parquet_sources[point]
    argv = _kinetrace("parquet", *sources, "-o", parent / "ds", "-j", "1")
    status, _ = _run_until(argv, parent, PARQUET_POINTS[point], signal.SIGKILL)
    assert status == -signal.SIGKILL
    (left,) = [p for p in _folders(parent, "ds") if p != live]
    assert bool(list(left.glob(".runs-*/*/run-*"))) == (point == "mid-spill")
    assert bool(list(left.glob("events/rank=0/part-*"))) == (point == "mid-conversion")
    assert not (parent / "ds").exists()
    time.sleep(0.02)  # the next run starts after the litter was last written
    if next_run == "parquet":
        rerun = argv
    else:
        small = parquet_sources["mid-conversion"][0]
        rerun = _kinetrace("filter", small, parent / "next.json", "--min-dur-us", "6")
    done = subprocess.run(rerun, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    made = "ds" if next_run == "parquet" else "next.json"
    assert sorted(p.name for p in parent.iterdir()) == sorted([*others, made])
    assert (live / "part.parquet").read_bytes() == b"live"
    if next_run == "parquet":
        _assert_complete(parent / "ds", sources)


#: ``kinetrace summary`` whose page takes its time: rendered once the temporary page is
#: made, then a wait in which the test kills it (the page never reaches its place).
SLOW_PAGE = textwrap.dedent(
    """
    import sys
    import time
    import kinetrace._tools.summary_html as page
    render = page.render_html
    def render_then_wait(summary):
        text = render(summary)
        time.sleep(600)
        return text
    page.render_html = render_then_wait
    from kinetrace._cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_a_killed_summarys_page_temporary_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """``summary --html`` writes its page through a temporary named and swept as every
    temporary is: SIGKILL leaves it (the old page untouched), the next run removes it."""
    source = tmp_path / "t.json"
    write_big_trace(source, 1 << 20)
    out = tmp_path / "out"
    out.mkdir()
    page = out / "page.html"
    page.write_bytes(OLD)
    others = _plant_others(out)
    argv = [sys.executable, "-c", SLOW_PAGE, "summary", str(source), "--html", str(page)]
    status, _ = _run_until(argv, out, FIRST_TEMP, signal.SIGKILL, planted=set(others))
    assert status == -signal.SIGKILL
    (left,) = [n for n in temp_files(out) if n not in others]
    assert left.startswith(".page.html.") and page.read_bytes() == OLD
    time.sleep(0.02)
    done = subprocess.run(
        _kinetrace("summary", source, "--html", page),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*others, "page.html"])
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.endswith("</html>\n")
