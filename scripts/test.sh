#!/usr/bin/env bash
# Every test: lint, Rust unit tests, the Python suite against the installed release wheel,
# the release artifacts' build checks and install test, the workflow checks, and a short
# benchmark table compared with the last full run. This is what CI runs (.ci/run).
source "$(dirname "$0")/env.sh"
ensure_venv
cd "$ROOT"

log "rust: fmt, clippy, unit tests"
cargo fmt --all -- --check
cargo clippy --all-targets --all-features --quiet -- -D warnings
cargo test --release --quiet  # release: the >4 GiB gzip test runs in seconds there

build_wheel

log "python: ruff, mypy (strict, python/kinetrace), stub check"
ruff check python tests benches
ruff format --check python tests benches
python -m mypy
python -m mypy.stubtest kinetrace._kinetrace

log "python: test suite (against the installed wheel)"
set +e
python -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

log "python: the panic tests, against a build with the test-hooks feature (never released)"
test_hooks_suite

"$ROOT/scripts/test-install.sh"    # both wheels + sdist built and checked, installed, run
"$ROOT/scripts/check-workflows.sh"  # .github/workflows: schema and zizmor, offline

log "compatibility suite: torch 2.11 to 2.15, Python 3.10 to 3.13 (scripts/test-compat.sh)"
"$ROOT/scripts/test-compat.sh"

log "benchmark (short run; the full one is benches/bench_export.py --save)"
python benches/bench_export.py --iterations 5000 --repeat 1 --compare

log "benchmark: a training loop's blocked step and throughput (short run of benches/bench_training.py)"
python benches/bench_training.py --quick
