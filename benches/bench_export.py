"""Export benchmark: stock torch, torch's Python exporter and kinetrace, each through the call
its users make, on profiles of the same workload.

    python benches/bench_export.py --save --readme     # a full run (50k steps), into README
    python benches/bench_export.py --render benches/results/RUN.json --readme  # redraw it
    python benches/bench_export.py --iterations 5000 --repeat 1 --compare  # the CI run

Workloads: ``shapes`` (record_shapes, op-heavy) and ``stack`` (with_stack, python_function
events). Every timed call (every exporter, every ``tensorboard_trace_handler`` row) exports
a fresh profile of its own; ``--repeat`` rounds run every row once, in alternating order, and
each row is the median of its rounds (``kinetrace._bench.method_note``, printed under the
tables). Then the gzip encoder alone runs on the kinetrace ``.json`` text.

``--save`` writes the run (figures and machine facts) to ``benches/results/`` as JSON, with
its chart (SVG) and its tables (Markdown) beside it: docs/benchmarks.md's tables and chart come from
such a run. ``--compare`` prints every ratio (never an absolute time) next to the last full
run committed there and marks those that moved by more than 25%; it never fails the run.
Ratios, not seconds, are what carry over between machines. The synthetic multi-GB run is
``benches/bench_huge.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import benchlib

from kinetrace import _bench

WORKLOADS = {
    "shapes": {"record_shapes": True, "with_stack": False},
    "stack": {"record_shapes": False, "with_stack": True},
}


def measure(args: argparse.Namespace, argv: list[str]) -> dict:
    """Run the benchmark; the results with the machine facts."""
    payload: dict = {
        "iterations": args.iterations,
        "repeat": args.repeat,
        "command": " ".join(["python benches/bench_export.py", *(argv)]),
        "machine": benchlib.machine_facts(),
        "workloads": {},
    }
    encoder_text = b""
    for name in args.workloads.split(","):
        options = WORKLOADS[name]
        t0 = time.perf_counter()

        def record(options: dict = options) -> object:
            return _bench.record_workload(args.iterations, **options)

        with tempfile.TemporaryDirectory(prefix="kinetrace-bench-") as out:
            rows = _bench.compare(
                record,
                out,
                formats=args.formats.split(","),
                repeat=args.repeat,
                worker_counts=[None if w == "default" else int(w) for w in args.workers.split(",")],
            )
            text_path = os.path.join(out, "kinetrace.w1.json")
            if not encoder_text and os.path.exists(text_path):
                with open(text_path, "rb") as f:
                    encoder_text = f.read()
        n = rows[0].activities
        print(f"[{name}] {time.perf_counter() - t0:.1f} s in all", file=sys.stderr)
        print(f"\nworkload {name}: {options}")
        print(_bench.format_table(rows, n))
        payload["workloads"][name] = {
            "options": options,
            "activities": n,
            "rows": benchlib.rows_as_dicts(rows),
        }

    if encoder_text and not args.no_encoder:
        encoder = benchlib.encoder_throughput(encoder_text)
        print()
        print(benchlib.format_encoder_table(encoder, len(encoder_text)))
        payload["encoder"] = {"text_bytes": len(encoder_text), "rows": encoder}
    del encoder_text

    if not args.no_handler:
        with tempfile.TemporaryDirectory(prefix="kinetrace-bench-") as out:
            handler = benchlib.handler_blocking(args.iterations, out, args.repeat)
        print()
        print(benchlib.format_handler_table(handler))
        payload["handler"] = handler
    return payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--iterations", type=int, default=50_000, help="workload steps (6 ops each)"
    )
    parser.add_argument(
        "--repeat",
        "--rounds",
        dest="repeat",
        type=int,
        default=3,
        help="rounds: every row is the median of N runs, each on a fresh profile",
    )
    parser.add_argument("--workloads", default="shapes,stack", help="comma-separated")
    parser.add_argument("--formats", default="json,json.gz")
    parser.add_argument(
        "--workers",
        default="default,1,2",
        help="kinetrace rows: worker counts, 'default' for the default settings (comma-separated)",
    )
    parser.add_argument("--no-encoder", action="store_true", help="skip the encoder-alone run")
    parser.add_argument(
        "--no-handler", action="store_true", help="skip the on_trace_ready blocking run"
    )
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    parser.add_argument(
        "--save",
        action="store_true",
        help="a full run for the record: JSON, chart and Markdown under benches/results/",
    )
    parser.add_argument("--chart", default=None, help="write the chart here (.svg or .png)")
    parser.add_argument(
        "--markdown", default=None, help="append the tables here as Markdown (e.g. a job summary)"
    )
    parser.add_argument(
        "--render",
        metavar="RUN.json",
        help="no measuring: draw the chart and tables of a saved run again (beside it)",
    )
    parser.add_argument(
        "--readme",
        action="store_true",
        help=(
            "with --save: the summary into README.md, the tables and chart into "
            "docs/benchmarks.md (between their markers)"
        ),
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="compare the ratios with the last full run under benches/results/",
    )
    args = parser.parse_args(argv)

    if args.render:  # a saved run, drawn again: its chart and tables beside it
        with open(args.render) as f:
            payload = json.load(f)
        stem = os.path.splitext(args.render)[0]
        json_path, saved = args.json, args.render
        chart_path = args.chart or f"{stem}.svg"
        markdown_path = args.markdown or f"{stem}.md"
    else:
        payload = measure(args, sys.argv[1:] if argv is None else argv)
        json_path, chart_path, markdown_path = args.json, args.chart, args.markdown
        if args.save:
            m = payload["machine"]
            stem = str(benchlib.RESULTS / f"bench-{m['cpus']}core-{m['date'][:10]}")
            json_path = json_path or f"{stem}.json"
            chart_path = chart_path or f"{stem}.svg"
            markdown_path = markdown_path or f"{stem}.md"
        saved = json_path
    if args.save or args.render:
        if markdown_path and os.path.exists(markdown_path):
            os.remove(markdown_path)  # a saved run's tables are replaced whole
    if json_path:
        with open(json_path, "w") as f:
            json.dump(payload, f, indent=2)
            f.write("\n")
        print(f"\nresults: {json_path}", file=sys.stderr)
    if chart_path:
        benchlib.write_chart(payload, chart_path)
        print(f"chart: {chart_path}", file=sys.stderr)
    if markdown_path:
        with open(markdown_path, "a") as f:
            f.write(benchlib.markdown_tables(payload) + "\n")

    if args.readme:
        if not (chart_path and saved):
            parser.error("--readme needs --save or --render (the README shows a saved run)")
        root = benchlib.RESULTS.parent.parent
        readme = root / "README.md"
        readme.write_text(
            benchlib.replace_between(
                readme.read_text(), "bench-summary", benchlib.summary_markdown(payload)
            )
        )
        page = root / "docs" / "benchmarks.md"
        chart = os.path.relpath(chart_path, page.parent)
        body = f"![seconds per exporter and format]({chart})\n\n" + benchlib.markdown_tables(
            payload
        )
        page.write_text(benchlib.replace_between(page.read_text(), "bench-tables", body))
        print(f"README.md (summary), docs/benchmarks.md (tables, chart): {saved}", file=sys.stderr)

    if args.compare:
        last = benchlib.last_full_run()
        print()
        if last is None:
            print("no full run under benches/results/ to compare ratios with")
        else:
            path, previous = last
            lines, moved = benchlib.compare_with(previous, payload)
            print(f"ratios against the last full run, {path.name} (never fails the build):")
            print("\n".join(lines))
            if moved:
                print(
                    f"\n!!! {moved} ratio(s) moved by more than {benchlib.MOVED:.0%} since "
                    f"{path.name} (marked <<< MOVED above; a short run on a busy machine moves "
                    "some on its own)"
                )
            else:
                print(f"\nno ratio moved by more than {benchlib.MOVED:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
