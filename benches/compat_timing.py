"""kinetrace against torch's own ``prof.export_chrome_trace`` on the installed torch.

    python benches/compat_timing.py --iterations 10000 --repeat 2

Works on every torch kinetrace supports (2.11 to 2.15), so ``nox -s compat`` runs
it in each compatibility venv. Each run profiles the same workload afresh (not timed:
Kineto's ``save`` works once per result) and times one export: torch's own
``export_chrome_trace`` to ``.json`` (Kineto's C++ writer) and to ``.json.gz`` (that file
gzipped by torch at level 9, torch's own sequence), and ``kinetrace.export_chrome_trace``
to both (torch 2.13+: kinetrace's formatter, the bytes of torch's Python exporter; older
torch: Kineto's writer streamed through kinetrace's sink and parallel gzip).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import warnings

import torch

from kinetrace import _bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000, help="workload steps, 6 ops each")
    parser.add_argument("--repeat", type=int, default=2, help="best of N per exporter")
    args = parser.parse_args()
    # torch 2.11/2.12 say once that a profile clears its events each cycle: not our concern.
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
    with tempfile.TemporaryDirectory() as out:
        rows = _bench.compare_kineto_writer(
            lambda: _bench.record_workload(args.iterations), out, repeat=args.repeat
        )
    writer = "kinetrace formatter" if _bench.has_trace_activities() else "Kineto fallback"
    print(
        f"torch {torch.__version__}, Python {platform.python_version()}, {writer}, "
        f"{args.iterations} steps (record_shapes), best of {args.repeat}"
    )
    print(_bench.format_table(rows))


if __name__ == "__main__":
    main()
