# Sourced by the other scripts: cached virtual environments with torch and the tools, and a
# freshly built release wheel of kinetrace installed into the main one.
#
# Everything cached lives outside the clone, under KINETRACE_CACHE (default
# ~/.cache/kinetrace), so every clone and every CI run on this machine reuses it. Packages are
# installed with uv, whose cache hard-links identical files into each venv: the ~3 GB of NVIDIA
# libraries a torch wheel depends on are downloaded once per version and shared by every venv
# that uses them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KINETRACE_CACHE:-$HOME/.cache/kinetrace}
VENV=${KINETRACE_VENV:-$CACHE/venv}
PYTHON_FOR_VENV=${PYTHON:-python3}
UV_VERSION=0.13.9
export UV_CACHE_DIR=${UV_CACHE_DIR:-$CACHE/uv}
export UV_LINK_MODE=${UV_LINK_MODE:-hardlink}

log() { printf '\n== %s\n' "$*" >&2; }

# uv itself, pinned, in a small venv of its own.
ensure_uv() {
  UV="$CACHE/tools/bin/uv"
  if [ ! -x "$UV" ] || [ "$("$UV" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    log "installing uv $UV_VERSION"
    rm -rf "$CACHE/tools"
    mkdir -p "$CACHE"
    "$PYTHON_FOR_VENV" -m venv "$CACHE/tools"
    "$CACHE/tools/bin/python" -m pip install -q "uv==$UV_VERSION"
  fi
}

# find_python X.Y: the full path of a working Python X.Y interpreter. pyenv shims answer
# `command -v pythonX.Y` for every installed version but fail when X.Y is not pyenv's selected
# one, so each candidate is run, and pyenv's own install directories come first.
find_python() {
  local want=$1 candidate
  local candidates=()
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python"$want" \
    /usr/bin/python"$want" /usr/local/bin/python"$want" "$(command -v "python$want" || true)"; do
    [ -n "$candidate" ] && candidates+=("$candidate")
  done
  for candidate in "${candidates[@]}"; do
    if [ -x "$candidate" ] && [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$want" ]; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  echo "no working Python $want found (looked at: ${candidates[*]})" >&2
  return 1
}

# make_venv DIR PYTHON STAMP REQUIREMENT_ARGS...: (re)create DIR with Python PYTHON (X.Y, found
# by find_python) and install the requirements, only when STAMP's text changed since the last
# successful run. A half-made venv has no stamp, so the next run starts it again.
make_venv() {
  local dir=$1 python=$2 stamp_text=$3
  shift 3
  ensure_uv
  local stamp="$dir/.kinetrace-requirements"
  if [ -x "$dir/bin/python" ] && [ "$stamp_text" == "$(cat "$stamp" 2>/dev/null)" ]; then
    return 0
  fi
  local interpreter
  interpreter=$(find_python "$python")
  log "creating $dir (Python $python; torch is ~3 GB the first time, shared after)"
  rm -rf "$dir"
  "$UV" venv -q --seed --no-python-downloads --python "$interpreter" "$dir"
  VIRTUAL_ENV="$dir" "$UV" pip install -q "$@"
  printf '%s' "$stamp_text" > "$stamp"
}

ensure_venv() {
  local wanted
  wanted=$(cat "$ROOT"/requirements-dev.txt "$ROOT"/requirements-consumers*.txt)
  # The trace consumers go in with --no-deps: their declared dependencies would move torch.
  make_venv "$VENV" "${KINETRACE_PYTHON:-3.11}" "$wanted" \
    -r "$ROOT/requirements-dev.txt" -r "$ROOT/requirements-consumers-deps.txt"
  if ! "$VENV/bin/python" -c 'import hta, torch_tb_profiler' 2>/dev/null; then
    VIRTUAL_ENV="$VENV" "$UV" pip install -q --no-deps -r "$ROOT/requirements-consumers.txt"
  fi
  export PATH="$VENV/bin:$PATH"
}

# The pinned build tools of requirements-build.txt (maturin, zig, auditwheel) in a venv of
# their own (scripts/build-wheels.sh puts its bin/ first on PATH).
BUILD_TOOLS=${KINETRACE_BUILD_TOOLS:-$CACHE/build-tools}
ensure_build_tools() {
  make_venv "$BUILD_TOOLS" "${KINETRACE_PYTHON:-3.11}" "$(cat "$ROOT/requirements-build.txt")" \
    -r "$ROOT/requirements-build.txt"
}

# The wheel the test suite runs against is the one users install: the abi3 manylinux_2_28
# wheel for this machine's architecture, built and checked by scripts/build-wheels.sh into dist/.
suite_wheel() {
  ls "$ROOT"/dist/kinetrace-*-manylinux_2_28_"$(uname -m)".whl
}
build_wheel() {
  log "building the release wheel users install (scripts/build-wheels.sh $(uname -m))"
  "$ROOT/scripts/build-wheels.sh" "$(uname -m)"
  log "installing the wheel into the venv"
  ensure_uv
  "$UV" pip install -q --python "$VENV/bin/python" --reinstall --no-deps "$(suite_wheel)"
}

# The panic tests (tests/test_panics.py) need hooks a release wheel must not carry: build the
# extension once more with the cargo feature test-hooks (the fast profile, into its own target
# folder), unpack it beside the venv's kinetrace and run that one file with it first on the
# path; KINETRACE_REQUIRE_TEST_HOOKS turns a missing hook into a failure instead of a skip.
test_hooks_suite() {
  local dir
  dir=$(mktemp -d)
  maturin build --quiet --profile fast --features test-hooks --out "$dir/wheel" >/dev/null
  python -m zipfile -e "$dir"/wheel/kinetrace-*.whl "$dir/site"
  PYTHONPATH="$dir/site" KINETRACE_REQUIRE_TEST_HOOKS=1 \
    python -m pytest -q -p no:cacheprovider tests/test_panics.py
  rm -rf "$dir"
}
