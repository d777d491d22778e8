"""The tools on a trace of over 1 GB (the slow set, ``nox -s slow``): every event lands
somewhere it is counted, and each tool's memory, measured in a fresh process, stays within
the bound docs/big-traces.md states, whatever the trace's size (``summary`` excepted: it
keeps a record per GPU activity), and near what it was measured to need.

The trace is written once for the module (``support.big``: Kineto's shape, ~1.05 GB of
JSON, 3.9M events, seconds of CPU) and read by every test.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import kinetrace
from support.aftermath import subprocess_env
from support.big import write_big_trace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="peak RSS of a child: Linux's wait4"),
]

MiB = 1 << 20

#: The bound on a tool's peak memory beyond the interpreter's (the same command on a 2 MB
#: trace), as docs/big-traces.md states it: a fixed 128 MiB (header, metadata, histogram,
#: buffers, the maps of ``check``; measured 3-68 MiB at 1 GB and 2 GB) plus the chunks in
#: flight, (reading threads + 2) x 8.25 MiB. Each tool is also held to a bound near its own
#: measured growth (:func:`tool_bound`), far tighter for most.
FIXED = 128 * MiB
CHUNK = int(8.25 * MiB)


def reading_threads() -> int:
    return min(8, len(os.sched_getaffinity(0)))


def memory_bound() -> int:
    return FIXED + (reading_threads() + 2) * CHUNK


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``big`` (rank 0 of 2, >1 GB), ``small`` (the same shape, 2 MB: the baseline) and
    ``rank1`` (the other rank, for merge)."""
    folder = tmp_path_factory.mktemp("big")
    paths = {name: folder / f"{name}.json" for name in ("big", "small", "rank1")}
    write_big_trace(paths["big"], 1_050_000_000, rank=0, world_size=2)
    write_big_trace(paths["small"], 2_000_000, rank=0, world_size=2)
    write_big_trace(paths["rank1"], 2_000_000, rank=1, world_size=2)
    return paths


def _check(src: Path, out: Path, rank1: Path) -> list[str]:
    return ["check", str(src)]


def _split(src: Path, out: Path, rank1: Path) -> list[str]:
    return ["split", str(src), "--max-mb", "250", "--out-dir", str(out / "parts")]


def _filter(src: Path, out: Path, rank1: Path) -> list[str]:
    """Kernels and their launches: both ends of every flow kept."""
    kept = out / "kernels.json"
    cats = ["--include-cat", "kernel", "--include-cat", "cuda_runtime"]
    return ["filter", str(src), str(kept), *cats]


def _filter_cutting_flows(src: Path, out: Path, rank1: Path) -> list[str]:
    """Kernels alone: every kernel's flow loses its start (the launch)."""
    return ["filter", str(src), str(out / "kernels.json"), "--include-cat", "kernel"]


def _merge(src: Path, out: Path, rank1: Path) -> list[str]:
    return ["merge", str(src), str(rank1), "-o", str(out / "merged.json")]


def _parquet(src: Path, out: Path, rank1: Path) -> list[str]:
    return ["parquet", str(src), "-o", str(out / "dataset")]


def _compress(src: Path, out: Path, rank1: Path) -> list[str]:
    """Two encoder threads (the default is one per core): buffers the same on every host."""
    return ["compress", str(src), str(out / "trace.json.gz"), "--threads", "2"]


def _repair(src: Path, out: Path, rank1: Path) -> list[str]:
    """The trace loads: a check, then a file-to-file copy."""
    return ["repair", str(src), str(out / "repaired.json")]


def _summary(src: Path, out: Path, rank1: Path) -> list[str]:
    return ["summary", str(src), "--json"]


def _ops(src: Path, out: Path, rank1: Path) -> list[str]:
    return ["ops", str(src), "--json"]


def _diff(src: Path, out: Path, rank1: Path) -> list[str]:
    """Two traces of the size: the trace against a link to it (two paths, so two reads, each
    its summary and its attribution in one pass; one path named on both sides would be
    read once), on two threads whatever the machine: one file at a time, two threads on
    it (more threads would read both at once)."""
    other = out / "new.json"
    other.symlink_to(src)
    return ["diff", str(src), str(other), "--json", "-j", "2"]


#: Each tool's command line on (source, output folder, the other rank).
TOOLS: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    "check": _check,
    "compress": _compress,
    "diff": _diff,
    "split": _split,
    "filter": _filter,
    "filter-cutting-flows": _filter_cutting_flows,
    "merge": _merge,
    "ops": _ops,
    "parquet": _parquet,
    "repair": _repair,
    "summary": _summary,
}

#: What a tool holds beyond the bound of :func:`memory_bound`: ``parquet`` keeps up to 48
#: MiB of rows (estimated) before it spills a sorted run to disk, and one row group
#: (``GROUP_BYTES``, 128 MiB estimated) while it merges the runs into the file (measured:
#: 254 MiB beyond a 2 MB trace's at 1.05 GB, 2026-12-02).
EXTRA = {"parquet": (48 + 128) * MiB}

#: Each tool's growth (MiB) beyond a 2 MB trace's at 1.05 GB, measured on the project's 2
#: cores at load 5-7 (2026-12-03; check, split, filter and merge as on 2026-12-02). Its own
#: bound is 1.5x that plus 8 MiB (the chunks in flight, 4 on 2 cores of 2 to 8.25 MiB, are
#: full or not as the load has it), plus a chunk per reading thread beyond 2 on bigger
#: hosts: a tool that starts to keep much more fails it well before the general bound.
MEASURED_MIB = {
    "check": 65,
    "compress": 8,
    # 243 MiB at 1.05 GB (2026-12-04, 2 cores busy): two files of the size, one at a time
    # on two threads, each pass filling the attribution's records only (~154 MB: 48-byte
    # operators and runtime calls, 24-byte GPU activities and their 32-byte links, flow
    # ends), of which the summary's figures are made before the groups; glibc keeps some of
    # the first file's heap (docs/benchmarks.md). 361 MiB with the two files read at once;
    # 447 MiB when the summary kept its own records (~73 MB) beside the attribution's;
    # 560 MiB when the attribution kept ops' float times and sequence numbers too and was
    # held through the figures; 583 MiB for one file's attribution alone before its
    # records were made fixed-size.
    "diff": 243,
    "filter": 3,
    "filter-cutting-flows": 192,  # past the general bound: see GROWING
    "merge": 8,
    # 388 MiB at 1.05 GB (2026-12-03, 2 cores busy): the attribution while it is read,
    # then 0.66M instance rows kept natively (~150 B each; a row becomes a dict only as it
    # is printed). 1748 MiB when every row was a Python dict of 23 keys (~1.6 KB).
    "ops": 388,
    # 212 / 223 / 251 MiB at 0.26 / 0.52 / 1.05 GB: the merge of the spilled runs reads
    # each through a 1 MiB buffer, so it grows by ~1 MiB a run (25 runs at 0.52 GB).
    # The general bound plus EXTRA (337 MiB on 2 cores, 1.34x) is the tighter one here.
    # 251-252 MiB with the ops table too (2026-12-03, 2 cores busy): it is written first,
    # a row group at a time, and its attribution (0.66M operators; diff's figure at most)
    # freed before the other tables merge; 608 MiB when the attribution was held to the end.
    "parquet": 251,
    "repair": 68,  # the trace loads: a check (65 MiB), then a file-to-file copy
    "split": 26,
    # 112 MiB at 1.05 GB (2026-12-04): ~88 B per GPU activity (1.3M here): the 40-byte
    # records, the launch map and the figures' working lists (docs/summary.md). 165 MiB
    # when the unions were copied and the sweep sorted two points per interval.
    "summary": 112,
}


def tool_bound(tool: str) -> int:
    return int(1.5 * MEASURED_MIB[tool] * MiB) + 8 * MiB + max(0, reading_threads() - 2) * CHUNK


#: Tools whose memory grows with the GPU activities or the operators by design: held to
#: their own bound, not to the general one.
BY_ACTIVITY = {"diff", "ops", "summary"}

#: Known to break the bound (strict: the test fails once it holds, to remove the mark).
GROWING = {
    "filter-cutting-flows": "filter's memory grows with the flows it cuts, ~190 B each "
    "(peak 221 MiB at 1.05 GB and 0.92M cut flows, 79 MiB at 0.25 GB; 31 MiB keeping both "
    "ends): a bug to fix in the filter's flow bookkeeping",
}


#: ``kinetrace ARGS`` run in a fresh interpreter, which writes its peak resident memory
#: (``VmHWM``, KiB: this process alone, from its exec on) as its last line on stderr. (A
#: child's ``ru_maxrss`` would count the pages of the forking test process.)
_MEASURED = """
import sys
from kinetrace._cli import main
try:
    status = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as f:
        peak = [line.split()[1] for line in f if line.startswith("VmHWM:")][0]
    sys.stderr.write(f"\\nVmHWM {peak}\\n")
sys.exit(status)
"""


def peak_rss(args: list[str]) -> int:
    """Runs ``kinetrace ARGS`` in a fresh process; its peak resident memory (bytes). The
    command must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *args],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("VmHWM "), done.stderr
    return int(last.split()[1]) * 1024


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(tool, marks=pytest.mark.xfail(strict=True, reason=GROWING[tool]))
        if tool in GROWING
        else tool
        for tool in sorted(TOOLS)
    ],
)
def test_memory_does_not_grow_with_the_trace(
    traces: dict[str, Path], tmp_path: Path, tool: str, record_property
) -> None:
    command = TOOLS[tool]
    assert traces["big"].stat().st_size > 10**9
    (tmp_path / "small").mkdir()
    (tmp_path / "big").mkdir()
    baseline = peak_rss(command(traces["small"], tmp_path / "small", traces["rank1"]))
    peak = peak_rss(command(traces["big"], tmp_path / "big", traces["rank1"]))
    growth = peak - baseline
    bound = tool_bound(tool)
    if tool not in BY_ACTIVITY:
        bound = min(bound, memory_bound() + EXTRA.get(tool, 0))
    record_property("memory", {"tool": tool, "baseline": baseline, "peak": peak})
    print(
        f"\nkinetrace {tool} on {traces['big'].stat().st_size / 1e9:.2f} GB: peak RSS "
        f"{peak / MiB:.0f} MiB, {growth / MiB:.0f} MiB beyond a 2 MB trace's "
        f"(bound {bound / MiB:.0f} MiB)"
    )
    assert growth <= bound, f"{growth / MiB:.0f} MiB > {bound / MiB:.0f} MiB"


def test_split_and_filter_keep_every_event(traces: dict[str, Path], tmp_path: Path) -> None:
    """Split into ~250 MB parts and filtered: parts and source agree on every count
    ``kinetrace check`` reports; every flow the split drops is counted."""
    src = traces["big"]
    source = kinetrace.check_trace(src)
    assert source.valid and source.info.json_bytes > 10**9
    result = kinetrace.split_trace(src, 250, out_dir=tmp_path / "parts")
    assert len(result.parts) >= 4 and result.oversized_parts == 0
    phases: collections.Counter[str] = collections.Counter()
    for part in result.parts:
        report = kinetrace.check_trace(part.path)
        assert report.valid, report.errors
        assert report.info.flows_unpaired == 0 and part.json_bytes <= 250e6
        phases.update({k: v for k, v in report.info.phases.items() if k != "M"})
        os.remove(part.path)
    want = collections.Counter({k: v for k, v in source.info.phases.items() if k != "M"})
    lost = want - phases
    assert set(lost) <= {"s", "f"}, lost  # only flows cut by a part's edge
    assert sum(lost.values()) == result.flow_events_cut + result.flow_events_unpaired
    assert phases["X"] == want["X"]
    kept = tmp_path / "kernels.json"
    filtered = kinetrace.filter_trace(src, kept, include_cats=["kernel"])
    report = kinetrace.check_trace(kept)
    assert report.valid
    assert report.info.categories.get("kernel") == source.info.categories["kernel"]
    assert filtered.events_written < source.info.events
