#!/usr/bin/env bash
# Every test, as CI runs it (.ci/run): nox's sessions (noxfile.py), in this order --
#   lint       ruff, cargo fmt and clippy
#   rust       the Rust core's tests (release: the >4 GiB gzip test runs in seconds there)
#   suite      the release wheel users install (built and checked by scripts/build-wheels.sh),
#              mypy (strict), the stub check, pytest (arguments given here go to it), and the
#              panic tests against a build with the test-hooks feature
#   install    both manylinux wheels and the sdist, installed as users do (x86_64, aarch64)
#   workflows  .github/workflows against GitHub's schema and zizmor, offline
#   compat     tests/compat and the timings on every torch x Python row of docs/supported.md
#   bench      the short benchmarks, ratios against the last full run (never failing)
# Venvs and torch downloads are cached in ~/.cache/kinetrace (see noxfile.py); a run beside
# another one on this machine gets venvs of its own (claim_slot in env.sh).
source "$(dirname "$0")/env.sh"
ensure_tools
claim_slot
cd "$ROOT"

"$NOX" -s lint
"$NOX" -s rust -- --release
"$NOX" -s suite -- "$@"
"$NOX" -s install workflows
"$NOX" -s compat
"$NOX" -s bench
