# Sourced by the other scripts: where things are, and the two pinned tools everything else is
# made with, uv and nox (in a small venv of their own). The venvs themselves are nox's
# (noxfile.py, uv backend), cached outside the clone under KINETRACE_CACHE (default
# ~/.cache/kinetrace), so every clone and every CI run on this machine reuses them; uv's cache
# hard-links identical files into each venv, so the ~3 GB of NVIDIA libraries a torch wheel
# depends on are downloaded once per version and shared by every venv that uses them.
set -Eeuo pipefail

# No script ends without a word: a command that fails (set -e) is named, with its file and
# line, before the script exits with its status (-E: in functions too; only the top shell
# reports, so a failure inside $(...) is named once, by the line that ran it).
on_error() {
  local what="\`$3\` failed"
  case $3 in return*) what="stopped (the reason is above)" ;; esac # a set-up step's own message
  printf '\n%s: %s at %s (exit status %s)\n' "$(basename "$0")" "$what" "$2" "$1" >&2
}
trap 'status=$?; [ "$BASH_SUBSHELL" != 0 ] || on_error "$status" "${BASH_SOURCE[0]:-$0}:$LINENO" "$BASH_COMMAND"' ERR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KINETRACE_CACHE:-$HOME/.cache/kinetrace}
export KINETRACE_CACHE=$CACHE
PYTHON_FOR_VENV=${PYTHON:-python3}
UV_VERSION=0.13.9
NOX_VERSION=2026.10.20
export UV_CACHE_DIR=${UV_CACHE_DIR:-$CACHE/uv}
export UV_LINK_MODE=${UV_LINK_MODE:-hardlink}

log() { printf '\n== %s\n' "$*" >&2; }

# need_commands CMD...: what this machine must have besides what the scripts install (they
# install nothing system-wide); every missing one is named with how to get it, then it fails.
need_commands() {
  local key cmd missing=0
  declare -A how=(
    [python3]="Python >= 3.10 with its venv module (or set PYTHON to one)"
    [rustup]="the Rust toolchain installer, https://rustup.rs (the toolchain itself is pinned by rust-toolchain.toml and installed on first use)"
    [cc]="a C compiler and linker, for Rust's build scripts (Debian/Ubuntu: apt-get install build-essential)"
    [readelf]="binutils, to check the wheel's .so (Debian/Ubuntu: apt-get install binutils)"
    [flock]="util-linux, for the venv slots' locks"
    [git]="git"
  )
  for key in "$@"; do
    cmd=$key
    if [ "$key" = python3 ]; then cmd=$PYTHON_FOR_VENV; fi
    if ! command -v "$cmd" >/dev/null 2>&1; then
      echo "missing: $cmd, ${how[$key]:-}" >&2
      missing=1
    fi
  done
  if [ $missing = 1 ]; then
    echo "install the above, then run $(basename "$0") again" >&2
    return 1
  fi
}

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
  echo "all 8 venv slots in $CACHE are held by other runs: wait for one to end, or set" \
    "KINETRACE_CACHE to another folder" >&2
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
    if ! "$PYTHON_FOR_VENV" -m venv "$CACHE/tools"; then
      rm -rf "$CACHE/tools" # half made: the next run starts over
      echo "could not make a venv with $PYTHON_FOR_VENV (above: why). It needs Python >= 3.10" \
        "with its venv module (Debian/Ubuntu: apt-get install python3-venv), or set PYTHON" \
        "to such an interpreter." >&2
      return 1
    fi
  fi
  # `|| true`: a new venv has neither, and grep's exit 1 must not end the script (set -e).
  have=$("$CACHE/tools/bin/python" -m pip list --format=freeze 2>/dev/null |
    { grep -iE '^(uv|nox)==' || true; } | sort | tr '\n' ' ')
  if [ "$have" != "nox==$NOX_VERSION uv==$UV_VERSION " ]; then
    log "installing uv $UV_VERSION and nox $NOX_VERSION"
    if ! "$CACHE/tools/bin/python" -m pip install -q "uv==$UV_VERSION" "nox==$NOX_VERSION"; then
      echo "could not install uv and nox from PyPI into $CACHE/tools (above: pip's reason)." \
        "Check the network (or pip's index settings: PIP_INDEX_URL) and run again." >&2
      return 1
    fi
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
