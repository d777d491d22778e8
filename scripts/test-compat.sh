#!/usr/bin/env bash
# The compatibility suite (tests/compat) on every torch x Python combination kinetrace
# claims, each in its own venv cached under $KINETRACE_CACHE/compat (created on the first
# run, reused after: uv hard-links torch and its NVIDIA libraries from its cache, so only the
# first download of each torch version costs time). The abi3 wheel the main suite tests
# (`suite_wheel` in env.sh, built by scripts/test.sh, or here when missing) is installed into each.
#
#   scripts/test-compat.sh                 every combination
#   scripts/test-compat.sh 2.12.1/3.11     only those given (TORCH/PYTHON)
#   KINETRACE_COMPAT_VENVS_ONLY=1 ...      create the venvs, run nothing
source "$(dirname "$0")/env.sh"
cd "$ROOT"
ensure_uv  # here, not only inside $(compat_venv ...), whose subshell keeps its UV to itself

#: torch/Python pairs CI tests besides the main suite's torch 2.15 on Python 3.11. torch 2.15 has
#: no wheels for Python 3.10, so 3.10 is tested with 2.14, the newest torch built for it.
COMBINATIONS=(2.11.0/3.11 2.12.1/3.11 2.13.0/3.11 2.14.1/3.11 2.14.1/3.10 2.15.0/3.13)
[ "$#" -gt 0 ] && COMBINATIONS=("$@")

compat_venv() {
  local torch_version=${1%/*} python=${1#*/}
  local dir="$CACHE/compat/torch-$torch_version-py$python"
  make_venv "$dir" "$python" "torch==$torch_version
$(cat "$ROOT/requirements-compat.txt")" "torch==$torch_version" -r "$ROOT/requirements-compat.txt"
  printf '%s\n' "$dir"
}

if [ -n "${KINETRACE_COMPAT_VENVS_ONLY:-}" ]; then
  for combo in "${COMBINATIONS[@]}"; do
    started=$SECONDS
    compat_venv "$combo" >/dev/null
    log "venv for $combo ready ($((SECONDS - started)) s)"
  done
  exit 0
fi

if ! suite_wheel >/dev/null 2>&1; then
  ensure_venv
  build_wheel
fi
wheel=$(suite_wheel)

failed=()
for combo in "${COMBINATIONS[@]}"; do
  started=$SECONDS
  dir=$(compat_venv "$combo")
  "$UV" pip install -q --python "$dir/bin/python" --reinstall --no-deps "$wheel"
  log "compat: torch ${combo%/*} on Python ${combo#*/}"
  if "$dir/bin/python" -m pytest -q -p no:cacheprovider tests/compat; then
    log "compat: torch ${combo%/*} on Python ${combo#*/} passed ($((SECONDS - started)) s); timings:"
    "$dir/bin/python" benches/compat_timing.py --compare --iterations "${KINETRACE_COMPAT_ITERATIONS:-10000}"
  else
    failed+=("$combo")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "compatibility suite failed on: ${failed[*]}" >&2
  exit 1
fi
