#!/usr/bin/env bash
# Every test, as CI runs it (.ci/run), in under 50 minutes on 2 cores from an empty cache.
# Arguments go to the main suite's pytest. The stages (nox's sessions, noxfile.py):
#
#   fresh-demo  ./scripts/demo.sh as a new user runs it, from an empty KINETRACE_CACHE; the
#               release wheel it builds (from nothing) is the one every later stage tests
#   suite       the release wheel installed, mypy (strict), the stub check, every test but the
#               slow ones; its 25 slowest tests printed
#   lint        ruff, cargo fmt and clippy
#   rust        the Rust core's tests (cargo test, fast profile)
#   counts      the instruction-count gate: every tool's native work and `import kinetrace`
#               counted under Valgrind, red on a count 1% above benches/counts-baseline.json
#   count-hooks test_count_gate: the counts program built with count-hooks turns the count
#               gate red on ~3% more work in a hot path, an unchanged one stays green
#   hooks-build the extension with the test-hooks feature (nox -s hooks -- --build-only)
#   hooks       test_panics and test_bench_gate against that build
#   install     both manylinux wheels and the sdist, installed as users do (x86_64, aarch64)
#   workflows   .github/workflows against GitHub's schema and zizmor, offline
#   compat      tests/compat on every torch x Python row of docs/supported.md
#   slow        the slow tests (tools on a >1 GB trace, memory measured)
#   bench       the benchmark gate: ratios against stock torch, torch's Python exporter and
#               HTA in one run, red below their floors (benches/gate.py)
#
# Two lanes share the 2 cores: the fresh demo, the suite, then hooks in the foreground
# (pytest is mostly one thread), and in the background, from the start, lint, rust and
# hooks-build (no wheel needed: beside the fresh demo, whose build links on one core), then
# counts, count-hooks, install, workflows, compat, bench and slow one after the other (their
# output is shown when the lane ends). Each stage follows what it needs (the background's
# checks the fresh demo's wheel; hooks the background's build), and nothing runs alone: a
# core left idle at the end (hooks after the background lane, then the bench gate alone)
# cost ~8 minutes of a 56-minute trial. Downloads start first, beside the CPU-bound stages:
# the Debian packages the suite and the install test need, the arm64 root filesystem, and
# every compat row's torch (scripts/prefetch.sh). The run ends with every stage's wall time.
#
# What every run checks the same way (CI's own settings, not left to the environment):
# Hypothesis's derandomized `ci` profile, a per-test timeout (pytest-timeout: 600 s, the
# slow set 2400 s), every skip's reason on tests/allowed-skips.txt, and the switches that
# make a missing tool or trace fail instead of skip (the real traces of ../shared/traces,
# HTA, TensorBoard's plugin, pyarrow, DuckDB, Spark, the browser).
#
# Venvs and torch downloads are cached in ~/.cache/kinetrace (see noxfile.py); a run beside
# another one on this machine gets venvs of its own (claim_slot in env.sh).
source "$(dirname "$0")/env.sh"
need_commands python3 rustup cc readelf flock git setsid
ensure_tools
claim_slot
cd "$ROOT"

export HYPOTHESIS_PROFILE=ci
# Each crate build of a run has features of its own (rust, counts, count-hooks, hooks, the
# wheels), so none reuses another's incremental state: a run writes none.
export CARGO_INCREMENTAL=0
export KINETRACE_ALLOWED_SKIPS="$ROOT/tests/allowed-skips.txt"
export KINETRACE_REQUIRE_REAL_TRACES=1

# need_space DIR GB: fails now, naming DIR, where its disk has less than GB free; a full disk
# otherwise shows as one test's ENOSPC half an hour in. Measured peaks of a run on one disk:
# ~6 GB written beyond the caches (the slow set's 1 GB traces and their outputs, the fresh
# demo's build), plus ~20 GB of downloads when uv's cache is empty.
need_space() {
  local free
  free=$(df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }')
  log "free space: $free GB where $1 is"
  if [ "$free" -lt "$2" ]; then
    echo "test.sh: $1 has $free GB free; a run needs at least $2 GB there" \
      "(KINETRACE_MIN_FREE_GB overrides; uv's cache: $UV cache prune)" >&2
    exit 1
  fi
}
need_space "${TMPDIR:-/tmp}" "${KINETRACE_MIN_FREE_GB:-10}"
need_space "$CACHE" "${KINETRACE_MIN_FREE_GB:-10}"

RUN_LOGS=$(mktemp -d "${TMPDIR:-/tmp}/kinetrace-test.XXXXXX")
RUN_START=$(date +%s)
declare -A LANE_PID=() LANE_START=()

# record NAME START STATUS [END]: one row of the closing table (END: now).
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${4:-$(date +%s)}" "$3" >>"$RUN_LOGS/times"
}

# print_times: the closing table, every stage's wall time (lanes overlap: see the clock).
print_times() {
  local name start end status
  printf '\n== stage wall times (minutes; from the start of the run, lanes overlap)\n'
  printf '%-34s %7s %7s %7s  %s\n' stage from to took status
  [ -f "$RUN_LOGS/times" ] && while IFS=$'\t' read -r name start end status; do
    printf '%-34s %7.1f %7.1f %7.1f  %s\n' "$name" "$(((start - RUN_START) * 10 / 60))e-1" \
      "$(((end - RUN_START) * 10 / 60))e-1" "$(((end - start) * 10 / 60))e-1" \
      "$([ "$status" = 0 ] && echo ok || echo "FAILED ($status)")"
  done < <(sort -t $'\t' -k2,2n -s "$RUN_LOGS/times")
  printf '%-34s %7s %7s %7.1f\n' "the whole run" "" "" "$((($(date +%s) - RUN_START) * 10 / 60))e-1"
}

# stage NAME CMD...: CMD in the foreground, timed; a failure ends the run.
stage() {
  local name=$1 start status=0
  shift
  start=$(date +%s)
  log "stage $name: $*"
  "$@" || status=$?
  record "$name" "$start" "$status"
  return "$status"
}

# lane NAME CMD...: CMD in the background, in its own process group (so an ended run stops
# it whole), its output kept for `join`.
lane() {
  local name=$1
  shift
  log "lane $name started in the background: $*"
  LANE_START[$name]=$(date +%s)
  setsid bash -c '"$@"; status=$?; date +%s >"$0"; exit $status' "$RUN_LOGS/$name.end" "$@" \
    >"$RUN_LOGS/$name.log" 2>&1 </dev/null &
  LANE_PID[$name]=$!
}

# join NAME: waits for lane NAME, shows its output, and times it from its start to its end;
# its failure ends the run.
join() {
  local name=$1 status=0
  wait "${LANE_PID[$name]}" || status=$?
  unset "LANE_PID[$name]"
  record "lane: $name" "${LANE_START[$name]}" "$status" \
    "$(cat "$RUN_LOGS/$name.end" 2>/dev/null || date +%s)"
  log "lane $name ended (status $status); its output:"
  cat "$RUN_LOGS/$name.log" >&2
  return "$status"
}

finish() {
  local status=$? name
  for name in "${!LANE_PID[@]}"; do # lanes not joined: the run ended before them
    kill -- "-${LANE_PID[$name]}" 2>/dev/null || true
    log "lane $name stopped unfinished (the run ended); the end of its output:"
    tail -n 100 "$RUN_LOGS/$name.log" >&2 || true
  done
  print_times
  rm -rf "$RUN_LOGS"
  # What no venv uses any more leaves uv's shared cache (it waits for, or skips, entries a
  # run beside this one holds): the cache only grows by what later runs reuse.
  timeout 120 "$UV" cache prune -q || log "uv cache prune did not finish; the cache is as it was"
  exit "$status"
}
trap finish EXIT

# after_lane NAME: waits until lane NAME has ended (for a lane started by this script's
# parent shell, which alone can `wait` for it); its status is the parent's to report. Also
# waits for a stage another lane marks done (`mark`), or for the fresh demo.
after_lane() {
  while [ ! -e "$RUN_LOGS/$1.end" ]; do sleep 2; done
}

# mark NAME: tells the other lane that NAME is done (after_lane NAME returns).
mark() {
  date +%s >"$RUN_LOGS/$1.end"
}

# The background lane's stages, timed into the same table (the lane is a child shell of
# this script), from the start of the run: first the builds that need no wheel (beside the
# fresh demo, whose build leaves a core idle while it links), then the checks of the wheel
# the fresh demo built, each after what it needs. The bench gate runs here, beside the
# suite: its floors and confirmation are measured to hold with the suite beside them
# (docs/benchmarks.md, "The ratio gate").
background_stages() {
  stage lint "$NOX" -s lint
  stage rust "$NOX" -s rust
  # The test-hooks extension for the foreground's hooks stage (after the suite).
  stage hooks-build "$NOX" -s hooks -- --build-only
  mark hooks-build
  after_lane fresh-demo # the release wheel, in dist/
  stage counts "$NOX" -s counts # its program shares the fast profile's build with rust's
  stage count-hooks "$NOX" -s count_hooks # the same program with count-hooks
  after_lane prefetch-rootfs
  stage install "$NOX" -s install workflows
  after_lane prefetch-compat
  stage "compat (6 rows)" "$NOX" -s compat
  stage bench "$NOX" -s bench
  stage slow "$NOX" -s slow
}

# fresh_demo: ./scripts/demo.sh as on a machine where kinetrace never ran: an empty
# KINETRACE_CACHE (its tools venv, nox's venvs, zig's cache made from nothing) and no slot of
# ours, so a set-up step that only works with an earlier run's cache fails here, every run.
# Only the downloads are shared: uv's cache (UV_CACHE_DIR, this cache's), which its venvs
# hard-link from, so the folder is made inside $CACHE (one filesystem) and costs minutes, not
# gigabytes. The wheel is built from nothing, in a build folder of its own, into dist/: the
# release wheel every later stage tests (scripts/build-wheels.sh stamps it with this tree).
fresh_demo() {
  local fresh status=0
  fresh=$(mktemp -d "$CACHE/fresh-demo.XXXXXX")
  log "./scripts/demo.sh from an empty KINETRACE_CACHE ($fresh)"
  env -u KINETRACE_SLOT KINETRACE_CACHE="$fresh" UV_CACHE_DIR="$UV_CACHE_DIR" \
    KINETRACE_WHEEL_TARGET_DIR="$fresh/target" KINETRACE_REBUILD_WHEELS=1 \
    ./scripts/demo.sh --iterations 2000 --out "$fresh/demo" | tee "$fresh.out" || status=$?
  if [ $status = 0 ] && ! grep -q '^kinetrace  *json' "$fresh.out"; then
    echo "fresh_demo: ./scripts/demo.sh succeeded but printed no comparison table" >&2
    status=1
  fi
  rm -rf "$fresh" "$fresh.out"
  return $status
}

lane prefetch-packages "$ROOT/scripts/prefetch.sh" packages
lane prefetch-rootfs "$ROOT/scripts/prefetch.sh" rootfs
export -f stage record log after_lane mark
export RUN_LOGS NOX
lane background bash -c "$(declare -f background_stages); set -Eeuo pipefail; background_stages"
stage fresh-demo fresh_demo
mark fresh-demo
# Every compat row's torch (it installs the wheel the fresh demo built too).
lane prefetch-compat "$ROOT/scripts/prefetch.sh" compat
join prefetch-packages # the suite's browser and Java
stage suite "$NOX" -s suite -- "$@"
# The extension the background lane built (a stopped lane marks nothing: then its end).
while [ ! -e "$RUN_LOGS/hooks-build.end" ] && [ ! -e "$RUN_LOGS/background.end" ]; do sleep 2; done
stage hooks "$NOX" -s hooks
join background
join prefetch-rootfs
join prefetch-compat
