"""Export a synthetic trace and report its time and peak memory (a test and benchmark worker).

    python tests/synthetic.py export N PATH [--seed S] [--gpu] [--base-time-ns B] ...
    python tests/synthetic.py export N PATH --rank R --world-size W ...   # one rank's trace

exports ``support.synthetic.SyntheticResult(N)`` (with ``--torch-steps S``, a real torch
profile of S steps instead) to each PATH in turn and prints one JSON line
per export: the export's stats plus the peak resident-memory growth during the export
(``rss_growth``, bytes; ``total_growth`` with forked workers), measured against a baseline
taken right before ``export_chrome_trace`` is called (after the source is built). The tests
and ``benches/bench_huge.py`` run it in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from support.measure import export_measured
from support.synthetic import ListResult, SyntheticResult, distributed_info


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="export a synthetic trace (test/bench worker)")
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="export N synthetic activities to each PATH in turn")
    exp.add_argument("n", type=int)
    exp.add_argument("paths", nargs="+", metavar="PATH")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--gpu", action="store_true")
    exp.add_argument("--name-len", type=int, default=None)
    exp.add_argument("--no-metadata", action="store_true")
    exp.add_argument("--payload", type=int, default=0)
    exp.add_argument("--pid", type=int, default=None, help="the activities' process id")
    exp.add_argument("--base-time-ns", type=int, default=None)
    exp.add_argument(
        "--rank",
        type=int,
        default=None,
        help="write distributedInfo for this rank (a rank's trace)",
    )
    exp.add_argument("--world-size", type=int, default=None, help="with --rank (default rank + 1)")
    exp.add_argument("--compresslevel", type=int, default=None)
    exp.add_argument("--threads", type=int, default=None)
    exp.add_argument("--workers", type=int, default=None)
    exp.add_argument(
        "--each-workers",
        default=None,
        help="comma-separated worker counts, one for each PATH in turn (instead of --workers)",
    )
    exp.add_argument(
        "--list", action="store_true", help="build the activities into a list first (as torch)"
    )
    exp.add_argument(
        "--cpus",
        type=int,
        default=None,
        help="the cores (all idle) the default worker count assumes",
    )
    exp.add_argument(
        "--torch-steps",
        type=int,
        default=None,
        help="export a real torch profile of this many steps (6 activities each) instead",
    )
    args = parser.parse_args(argv)
    if args.cpus is not None:
        from kinetrace._export import workers as _workers

        _workers.available_cpus = lambda: args.cpus  # type: ignore[assignment]
        _workers.idle_cpus = lambda: args.cpus  # type: ignore[assignment]
    kwargs: dict[str, Any] = {}
    for key in ("base_time_ns", "compresslevel", "threads", "workers"):
        if getattr(args, key) is not None:
            kwargs[key] = getattr(args, key)
    if args.rank is not None:
        kwargs["metadata"] = distributed_info(args.rank, args.world_size or args.rank + 1)
    each = _each_path(args.paths, kwargs, args.each_workers)
    if args.torch_steps is not None:
        return _export_torch_profile(args.torch_steps, args.paths, each)
    result = SyntheticResult(
        args.n,
        seed=args.seed,
        gpu=args.gpu,
        name_len=args.name_len,
        with_metadata=not args.no_metadata,
        payload=args.payload,
        pid=args.pid,
    )
    source: SyntheticResult | ListResult = ListResult(result) if args.list else result
    if args.list:
        import gc

        gc.collect()
    for path, path_kwargs in zip(args.paths, each, strict=True):
        print(json.dumps(export_measured(source, path, **path_kwargs)), flush=True)
    return 0


def _each_path(paths: list[str], kwargs: dict[str, Any], workers: str | None) -> list[dict]:
    """The export's arguments for each path: ``kwargs``, with ``--each-workers``' count."""
    each = [dict(kwargs) for _ in paths]
    if workers is not None:
        counts = [int(w) for w in workers.split(",")]
        if len(counts) != len(paths):
            raise SystemExit("--each-workers needs one count for each PATH")
        for path_kwargs, count in zip(each, counts, strict=True):
            path_kwargs["workers"] = count
    return each


def _export_torch_profile(steps: int, paths: list[str], each: list[dict[str, Any]]) -> int:
    """A real profile (``kinetrace._bench``'s workload) exported to each path; its activity
    list is held before measuring, so the figures are beyond what ``trace_activities()``
    holds (the export's own call returns the same objects)."""
    import gc

    from kinetrace import _bench

    prof = _bench.record_workload(steps)
    result = prof.profiler.kineto_results
    held = result.trace_activities()
    gc.collect()
    for path, kwargs in zip(paths, each, strict=True):
        print(json.dumps(export_measured(result, path, n=len(held), **kwargs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
