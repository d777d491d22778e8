#!/usr/bin/env bash
# Every test, as CI runs it (.ci/run): first the README's first command as a new user runs it
# (./scripts/demo.sh from an empty KINETRACE_CACHE, see fresh_demo), then nox's sessions
# (noxfile.py), in this order --
#   lint       ruff, cargo fmt and clippy
#   rust       the Rust core's tests (release: the >4 GiB gzip test runs in seconds there)
#   suite      the release wheel users install (built and checked by scripts/build-wheels.sh),
#              mypy (strict), the stub check, pytest (arguments given here go to it), and the
#              panic tests against a build with the test-hooks feature
#   slow       the slow tests (tools on a >1 GB trace, memory measured; ~8 minutes)
#   install    both manylinux wheels and the sdist, installed as users do (x86_64, aarch64)
#   workflows  .github/workflows against GitHub's schema and zizmor, offline
#   compat     tests/compat and the timings on every torch x Python row of docs/supported.md
#   bench      the short benchmarks, ratios against the last full run (never failing)
# Venvs and torch downloads are cached in ~/.cache/kinetrace (see noxfile.py); a run beside
# another one on this machine gets venvs of its own (claim_slot in env.sh).
source "$(dirname "$0")/env.sh"
need_commands python3 rustup cc readelf flock git
ensure_tools
claim_slot
cd "$ROOT"

# fresh_demo: ./scripts/demo.sh as on a machine where kinetrace never ran: an empty
# KINETRACE_CACHE (its tools venv, nox's venvs, zig's cache made from nothing) and no slot of
# ours, so a set-up step that only works with an earlier run's cache fails here, every run.
# Only the downloads are shared: uv's cache (UV_CACHE_DIR, this cache's), which its venvs
# hard-link from, so the folder is made inside $CACHE (one filesystem) and costs minutes, not
# gigabytes. The wheel is built from nothing, in a folder of its own (a build made with this
# run's venv paths would be rebuilt by the suite's). A short workload: this checks the set-up
# and that the comparison prints.
fresh_demo() {
  local fresh status=0
  fresh=$(mktemp -d "$CACHE/fresh-demo.XXXXXX")
  trap 'rm -rf "'"$fresh"'" "'"$fresh"'.out"' EXIT # also when this script is stopped
  log "./scripts/demo.sh from an empty KINETRACE_CACHE ($fresh)"
  env -u KINETRACE_SLOT KINETRACE_CACHE="$fresh" UV_CACHE_DIR="$UV_CACHE_DIR" \
    KINETRACE_WHEEL_TARGET_DIR="$fresh/target" \
    ./scripts/demo.sh --iterations 2000 --out "$fresh/demo" | tee "$fresh.out" || status=$?
  if [ $status = 0 ] && ! grep -q '^kinetrace  *json' "$fresh.out"; then
    echo "fresh_demo: ./scripts/demo.sh succeeded but printed no comparison table" >&2
    status=1
  fi
  rm -rf "$fresh" "$fresh.out"
  trap - EXIT
  return $status
}

fresh_demo
"$NOX" -s lint
"$NOX" -s rust -- --release
"$NOX" -s suite -- "$@"
"$NOX" -s slow
"$NOX" -s install workflows
"$NOX" -s compat
"$NOX" -s bench
