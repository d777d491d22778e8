"""Huge-trace benchmark: millions of synthetic activities, GBs of JSON, peak memory vs budget.

    python benches/bench_huge.py                          # 10M events, .json and .json.gz
    python benches/bench_huge.py --events 2000000 --workers 1,auto
    python benches/bench_huge.py --big-gz                 # also a .json.gz above 4 GiB of JSON,
                                                          # decoded and checked end to end

Not part of CI (minutes, GBs of disk). Every export runs in a fresh subprocess
(``tests/synthetic.py export``, the lazy synthetic source), which reports wall time, sizes
and the peak memory growth during the export: ``rss`` for the exporting process,
``total`` including forked workers (PSS, shared pages counted once). The budget is
64 MiB + 32 bytes per activity. Prints a table; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = ROOT / "tests" / "synthetic.py"
#: JSON bytes per synthetic event (measured: ~366 without payload), for disk estimates.
BYTES_PER_EVENT = 370
MIB = 2**20


def run_export(
    n: int, path: Path, *, workers: str, payload: int = 0, timeout: float = 3600
) -> dict[str, Any]:
    """One export in a fresh interpreter; returns the worker's JSON report."""
    cmd = [sys.executable, str(SYNTHETIC), "export", str(n), str(path)]
    if workers != "auto":
        cmd += ["--workers", workers]
    if payload:
        cmd += ["--payload", str(payload)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"export failed ({done.returncode}):\n{done.stderr}")
    report = json.loads(done.stdout.splitlines()[-1])
    report["process_seconds"] = time.perf_counter() - started
    report["workers"] = workers
    report["format"] = "json.gz" if path.name.endswith(".gz") else "json"
    return report


def verify_gzip(path: Path, expected_len: int, chunk: int = 4 * MIB) -> dict[str, Any]:
    """Streams ``path`` through one ``zlib.decompressobj(31)``: the whole file must be one
    gzip member whose text has ``expected_len`` bytes; checks the trailer's CRC-32 and
    ISIZE (length mod 2**32) against the decoded text."""
    d = zlib.decompressobj(31)
    crc = 0
    total = 0
    started = time.perf_counter()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            if d.eof:
                raise AssertionError(f"data after the first gzip member at offset {f.tell()}")
            out = d.decompress(block)
            crc = zlib.crc32(out, crc)
            total += len(out)
        out = d.flush()
        crc = zlib.crc32(out, crc)
        total += len(out)
    if not d.eof:
        raise AssertionError("the gzip stream is truncated")
    if d.unused_data:
        raise AssertionError(f"{len(d.unused_data)} bytes after the first gzip member")
    with open(path, "rb") as f:
        f.seek(-8, os.SEEK_END)
        trailer = f.read(8)
    trailer_crc = int.from_bytes(trailer[:4], "little")
    isize = int.from_bytes(trailer[4:], "little")
    result = {
        "decoded_bytes": total,
        "expected_bytes": expected_len,
        "crc_ok": trailer_crc == crc,
        "isize": isize,
        "isize_ok": isize == total % 2**32,
        "length_ok": total == expected_len,
        "above_4gib": total >= 2**32,
        "decode_seconds": time.perf_counter() - started,
    }
    if not (result["crc_ok"] and result["isize_ok"] and result["length_ok"]):
        raise AssertionError(f"gzip check failed: {result}")
    return result


def type_scan_seconds(n: int) -> float:
    """What ``_extract._getters``' ``set(map(type, activities))`` costs on the lazy source
    (it builds every activity once, transiently)."""
    import benchlib  # noqa: F401  (puts tests/ on sys.path for support)

    from support.synthetic import SyntheticResult

    seq = SyntheticResult(n).trace_activities()
    started = time.perf_counter()
    kinds = set(map(type, seq))
    elapsed = time.perf_counter() - started
    assert len(kinds) == 1
    return elapsed


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'format':<8} {'events':>11} {'workers':>7} {'wall s':>8} {'MB/s':>7} "
        f"{'JSON MB':>9} {'file MB':>9} {'rss MiB':>8} {'total MiB':>9} {'budget':>7} {'ok':>3}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = r["total_growth"] <= r["budget"]
        lines.append(
            f"{r['format']:<8} {r['n']:>11,} {r['workers']:>7} {r['seconds']:>8.1f} "
            f"{r['uncompressed_bytes'] / 1e6 / r['seconds']:>7.0f} "
            f"{r['uncompressed_bytes'] / 1e6:>9.0f} {r['file_bytes'] / 1e6:>9.0f} "
            f"{r['rss_growth'] / MIB:>8.1f} {r['total_growth'] / MIB:>9.1f} "
            f"{r['budget'] / MIB:>7.0f} {'yes' if ok else 'NO':>3}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--formats", default="json,json.gz")
    parser.add_argument(
        "--workers",
        default="1",
        help="comma-separated worker counts to run, 'auto' for kinetrace's default",
    )
    parser.add_argument("--big-gz", action="store_true", help="also a .json.gz above 4 GiB")
    parser.add_argument(
        "--big-gz-events",
        type=int,
        default=12_500_000,
        help="events of the --big-gz export (12.5M = ~4.6 GB of JSON)",
    )
    parser.add_argument("--verify", action="store_true", help="strict-check every output")
    parser.add_argument("--out", default=None, help="directory for the traces (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the traces")
    parser.add_argument("--json", default=None, help="write the rows here as JSON")
    args = parser.parse_args(argv)

    out_dir = Path(args.out or tempfile.mkdtemp(prefix="kinetrace-huge-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    need = args.events * BYTES_PER_EVENT * 1.1
    free = shutil.disk_usage(out_dir).free
    if "json" in args.formats.split(",") and free < need:
        print(f"not enough disk in {out_dir}: {free / 1e9:.1f} GB free, need {need / 1e9:.1f}")
        return 1

    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    try:
        scan = type_scan_seconds(args.events)
        print(f"type scan of {args.events:,} lazy activities (_getters): {scan:.1f} s", flush=True)
        checks["type_scan_seconds"] = scan
        for workers in args.workers.split(","):
            for fmt in args.formats.split(","):
                path = out_dir / f"huge-w{workers}.{fmt}"
                print(f"exporting {args.events:,} events to {path.name} ...", flush=True)
                report = run_export(args.events, path, workers=workers)
                if args.verify:
                    from kinetrace import _kinetrace

                    check = _kinetrace.check_trace(str(path))
                    report["valid"] = check["valid"]
                    if not check["valid"]:
                        print(f"  INVALID: {check['errors'][:3]}")
                rows.append(report)
                print(format_table([report]).splitlines()[-1], flush=True)
                if not args.keep:
                    path.unlink()
        if args.big_gz:
            path = out_dir / "huge-big.json.gz"
            print(f"exporting {args.big_gz_events:,} events to {path.name} ...", flush=True)
            report = run_export(args.big_gz_events, path, workers=args.workers.split(",")[0])
            rows.append(report)
            print(format_table([report]).splitlines()[-1], flush=True)
            print("decoding it in one streaming pass ...", flush=True)
            checks["big_gz"] = verify_gzip(path, report["uncompressed_bytes"])
            print(f"  {checks['big_gz']}", flush=True)
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(out_dir, ignore_errors=True)

    print()
    print(format_table(rows))
    if args.json:
        import torch

        payload = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "torch": torch.__version__,
                "platform": platform.platform(),
            },
            "rows": rows,
            "checks": checks,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
