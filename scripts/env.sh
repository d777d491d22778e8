# Sourced by the other scripts: a cached virtual environment with torch and the tools,
# and a freshly built release wheel of kinetrace installed into it.
#
# The venv lives outside the clone (KINETRACE_VENV, default ~/.cache/kinetrace/venv) so
# every clone and every CI run on this machine reuses it and pip's download cache: only
# the first run downloads torch.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${KINETRACE_VENV:-$HOME/.cache/kinetrace/venv}
PYTHON_FOR_VENV=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*" >&2; }

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv at $VENV"
    "$PYTHON_FOR_VENV" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  # Reinstall the requirements only when they changed since the last run.
  local stamp="$VENV/.kinetrace-requirements"
  local wanted
  wanted=$(cat "$ROOT"/requirements-dev.txt "$ROOT"/requirements-consumers*.txt)
  if [ "$wanted" != "$(cat "$stamp" 2>/dev/null)" ]; then
    log "installing requirements (torch 2.15.0 is ~3 GB the first time)"
    "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-dev.txt" \
      -r "$ROOT/requirements-consumers-deps.txt"
    "$VENV/bin/python" -m pip install -q --no-deps -r "$ROOT/requirements-consumers.txt"
    printf '%s' "$wanted" > "$stamp"
  fi
  export PATH="$VENV/bin:$PATH"
}

build_wheel() {
  log "building the release abi3 wheel"
  rm -rf "$ROOT/dist"
  (cd "$ROOT" && maturin build --release --quiet --out dist)
  log "installing the wheel into the venv"
  python -m pip install -q --force-reinstall --no-deps "$ROOT"/dist/kinetrace-*.whl
}
