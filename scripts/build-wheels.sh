#!/usr/bin/env bash
# The release artifacts, into dist/: abi3 manylinux_2_28 wheels for x86_64 and aarch64 (built
# on this machine, aarch64 cross-compiled, both linked by zig against glibc 2.28's symbols, so
# no docker) and the sdist. Each wheel is checked before the script succeeds: its tag, the
# architecture of its .so, the newest glibc symbol version the .so needs (at most 2.28), and
# auditwheel's verdict.
#
#   scripts/build-wheels.sh                  # all three
#   scripts/build-wheels.sh x86_64           # any of: x86_64 aarch64 sdist
#
# Reproducible: the Rust toolchain is pinned by rust-toolchain.toml, the crates by Cargo.lock
# (--locked), maturin, zig and auditwheel by requirements-build.txt (`nox -s wheel` runs this
# script with them); file times in the archives
# come from SOURCE_DATE_EPOCH (the last commit's time) and source paths are remapped, so the
# same commit gives byte-identical wheels in any clone.
source "$(dirname "$0")/env.sh"
cd "$ROOT"

MANYLINUX=manylinux_2_28
MAX_GLIBC=2.28
declare -A RUST_TARGET=([x86_64]=x86_64-unknown-linux-gnu [aarch64]=aarch64-unknown-linux-gnu)
declare -A ELF_MACHINE=([x86_64]="Advanced Micro Devices X86-64" [aarch64]="AArch64")

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(x86_64 aarch64 sdist)
for w in "${wanted[@]}"; do
  case $w in x86_64 | aarch64 | sdist) ;; *)
    echo "build-wheels.sh: unknown artifact '$w' (x86_64, aarch64, sdist)" >&2
    exit 2
    ;;
  esac
done

# maturin, zig (the ziglang package, found through the python on PATH) and auditwheel, pinned
# by requirements-build.txt: `nox -s wheel` (or `install`) runs this script in a venv that has
# them; run by hand, activate such a venv first.
for tool in maturin auditwheel; do
  command -v "$tool" >/dev/null || {
    echo "build-wheels.sh: $tool is not on PATH: run nox -s wheel, or install requirements-build.txt" >&2
    exit 2
  }
done
python3 -c 'import ziglang' 2>/dev/null || {
  echo "build-wheels.sh: the ziglang package is missing (requirements-build.txt)" >&2
  exit 2
}
# The toolchain, components and targets of rust-toolchain.toml (a no-op once installed).
rustup toolchain install >/dev/null 2>&1 || rustup toolchain install
export ZIG_GLOBAL_CACHE_DIR="$CACHE/zig"
# KINETRACE_WHEEL_TARGET_DIR: another build folder (test.sh's fresh_demo builds from nothing in
# its own, so the venv paths it builds with never invalidate this one's build).
export CARGO_TARGET_DIR="${KINETRACE_WHEEL_TARGET_DIR:-$ROOT/target/release-wheels}"
SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 315532800)
export SOURCE_DATE_EPOCH
export RUSTFLAGS="--remap-path-prefix=$ROOT=kinetrace --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=cargo"
mkdir -p dist

# check_wheel ARCH WHEEL: the tag, the .so's architecture and glibc needs, auditwheel.
check_wheel() {
  local arch=$1 wheel=$2 tmp so machine newest sym
  case $(basename "$wheel") in
    kinetrace-*-cp310-abi3-${MANYLINUX}_${arch}.whl) ;;
    *) echo "FAIL $wheel: expected the tag cp310-abi3-${MANYLINUX}_${arch}" >&2; return 1 ;;
  esac
  tmp=$(mktemp -d)
  python3 -m zipfile -e "$wheel" "$tmp"
  so=$(find "$tmp" -name '_kinetrace*.so')
  if [ "$(printf '%s\n' "$so" | grep -c .)" != 1 ]; then
    echo "FAIL $wheel: expected one _kinetrace .so, found: $so" >&2
    return 1
  fi
  machine=$(readelf -h "$so" | sed -n 's/^ *Machine: *//p')
  if [ "$machine" != "${ELF_MACHINE[$arch]}" ]; then
    echo "FAIL $wheel: the .so is for '$machine', not $arch" >&2
    return 1
  fi
  # The versions the .so asks the dynamic linker for, newest last, and a symbol that needs it.
  newest=$(readelf -W -V "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V | tail -n1)
  sym=$(readelf -W --dyn-syms "$so" | awk -v v="@$newest" '!s && index($8, v) { s = $8 } END { print s }')
  if [ -z "$newest" ] || [ "$(printf '%s\n' "GLIBC_$MAX_GLIBC" "$newest" | sort -V | tail -n1)" != "GLIBC_$MAX_GLIBC" ]; then
    echo "FAIL $wheel: the .so needs $newest ($sym), newer than GLIBC_$MAX_GLIBC" >&2
    return 1
  fi
  if ! auditwheel show "$wheel" >"$tmp/audit" 2>&1 || ! grep -q "\"${MANYLINUX}_${arch}\"" "$tmp/audit"; then
    echo "FAIL $wheel: auditwheel does not give ${MANYLINUX}_${arch}:" >&2
    cat "$tmp/audit" >&2
    return 1
  fi
  printf 'ok %s: .so %s, newest glibc symbol %s (%s), auditwheel: %s\n' \
    "$(basename "$wheel")" "$machine" "$newest" "$sym" \
    "$(tr '\n' ' ' <"$tmp/audit" | grep -o "consistent with the following platform tag: \"[^\"]*\"")"
  rm -rf "$tmp"
}

# current_wheel ARCH: prints dist/'s ARCH wheel if it was built from this very tree (its
# WHEEL.source equals scripts/tree-stamp.sh's output); fails otherwise.
current_wheel() {
  local wheel
  wheel=$(ls dist/kinetrace-*-"$MANYLINUX"_"$1".whl 2>/dev/null) || return 1
  [ "$(printf '%s\n' "$wheel" | grep -c .)" = 1 ] && [ -f "$wheel.source" ] || return 1
  [ "$(cat "$wheel.source")" = "$("$ROOT/scripts/tree-stamp.sh")" ] || return 1
  printf '%s\n' "$wheel"
}

for w in "${wanted[@]}"; do
  if [ "$w" == sdist ]; then
    log "building the sdist"
    rm -f dist/kinetrace-*.tar.gz
    maturin sdist --out dist 2>&1 | grep -v '^📦\|^🍹' >&2 || true
    sdist=$(ls dist/kinetrace-*.tar.gz)
    members=$(tar -tzf "$sdist")
    # What a build from the sdist needs must be in it.
    for member in Cargo.toml Cargo.lock pyproject.toml rust-toolchain.toml src/lib.rs python/kinetrace/__init__.py; do
      grep -q "^kinetrace-[^/]*/$member\$" <<<"$members" ||
        { echo "FAIL $sdist: $member missing" >&2; exit 1; }
    done
    echo "ok $(basename "$sdist"): $(grep -c . <<<"$members") files"
    continue
  fi
  # A wheel this tree already built (and checked) is kept: the same tree builds the same
  # bytes, so one CI run builds each wheel once (KINETRACE_REBUILD_WHEELS=1: always build).
  if [ "${KINETRACE_REBUILD_WHEELS:-0}" != 1 ] && current_wheel "$w" >/dev/null; then
    echo "ok $(basename "$(current_wheel "$w")"): built from this tree already, kept"
    continue
  fi
  log "building the $MANYLINUX $w wheel (zig, target ${RUST_TARGET[$w]})"
  stamp=$("$ROOT/scripts/tree-stamp.sh") # before the build: what it is built from
  rm -f dist/kinetrace-*_"$w".whl dist/kinetrace-*_"$w".whl.source
  maturin build --release --locked --quiet --zig --compatibility "$MANYLINUX" \
    --target "${RUST_TARGET[$w]}" --out dist
  check_wheel "$w" dist/kinetrace-*-"$MANYLINUX"_"$w".whl
  printf '%s\n' "$stamp" >"$(ls dist/kinetrace-*-"$MANYLINUX"_"$w".whl).source"
done
