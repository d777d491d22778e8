# Sourced by the other scripts: where things are, and the two pinned tools everything else is
# made with, uv and nox (in a small venv of their own). The venvs themselves are nox's
# (noxfile.py, uv backend), cached outside the clone under KINETRACE_CACHE (default
# ~/.cache/kinetrace), so every clone and every CI run on this machine reuses them; uv's cache
# hard-links identical files into each venv, so the ~3 GB of NVIDIA libraries a torch wheel
# depends on are downloaded once per version and shared by every venv that uses them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KINETRACE_CACHE:-$HOME/.cache/kinetrace}
export KINETRACE_CACHE=$CACHE
PYTHON_FOR_VENV=${PYTHON:-python3}
UV_VERSION=0.13.9
NOX_VERSION=2026.10.20
export UV_CACHE_DIR=${UV_CACHE_DIR:-$CACHE/uv}
export UV_LINK_MODE=${UV_LINK_MODE:-hardlink}

log() { printf '\n== %s\n' "$*" >&2; }

# claim_slot: the set of venvs this run uses, one no other run on this machine holds. Slot 0
# is $CACHE/nox and $CACHE/install-test, slot N $CACHE/nox.N and $CACHE/install-test.N: a run
# takes the first slot whose lock ($CACHE/slot-N.lock, held on fd 9 until this shell and its
# children exit) is free, so two runs at once (two clones, CI beside a contributor) never
# install into one venv, and runs one after the other reuse slot 0's venvs. noxfile.py claims
# a slot the same way when it runs without one (KINETRACE_SLOT unset).
claim_slot() {
  local slot
  [ -n "${KINETRACE_SLOT:-}" ] && return 0
  mkdir -p "$CACHE"
  for slot in 0 1 2 3 4 5 6 7; do
    exec 9>"$CACHE/slot-$slot.lock"
    if flock -n 9; then
      export KINETRACE_SLOT=$slot
      return 0
    fi
  done
  exec 9>&-
  echo "all 8 venv slots in $CACHE are held by other runs" >&2
  return 1
}

# slot_dir NAME: this run's copy of the cached folder NAME (see claim_slot).
slot_dir() {
  if [ "${KINETRACE_SLOT:-0}" = 0 ]; then
    printf '%s\n' "$CACHE/$1"
  else
    printf '%s\n' "$CACHE/$1.$KINETRACE_SLOT"
  fi
}

# uv and nox, pinned, in a small venv of their own ($CACHE/tools): UV and NOX name them.
ensure_tools() {
  UV="$CACHE/tools/bin/uv"
  NOX="$CACHE/tools/bin/nox"
  local have
  if [ ! -x "$CACHE/tools/bin/python" ]; then
    mkdir -p "$CACHE"
    "$PYTHON_FOR_VENV" -m venv "$CACHE/tools"
  fi
  have=$("$CACHE/tools/bin/python" -m pip list --format=freeze 2>/dev/null |
    grep -iE '^(uv|nox)==' | sort | tr '\n' ' ')
  if [ "$have" != "nox==$NOX_VERSION uv==$UV_VERSION " ]; then
    log "installing uv $UV_VERSION and nox $NOX_VERSION"
    "$CACHE/tools/bin/python" -m pip install -q "uv==$UV_VERSION" "nox==$NOX_VERSION"
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
