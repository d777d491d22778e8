#!/usr/bin/env bash
# The release artifacts as users get them (`nox -s install`, which scripts/test.sh runs, with the
# build tools of requirements-build.txt on PATH):
#  1. scripts/build-wheels.sh: both manylinux_2_28 wheels and the sdist, with their checks
#     (tag, .so architecture, newest glibc symbol <= 2.28, auditwheel); a wheel this tree
#     built already (scripts/test.sh's fresh demo built the x86_64 one) is kept;
#  2. x86_64: a clean venv with no Rust toolchain on PATH, torch installed, then `pip install`
#     of the wheel from dist/ (offline: pip must find torch already satisfying the wheel's
#     dependency); a real profile exported, `kinetrace check`, `kinetrace demo`;
#  3. aarch64: the wheel's torch-free parts (import, GzipWriter, check_trace, compress) run by
#     an arm64 Python of a Debian arm64 root filesystem under qemu-user. The root filesystem
#     is made once with debootstrap and cached in $KINETRACE_CACHE/arm64-rootfs
#     (scripts/arm64-rootfs.sh).
source "$(dirname "$0")/env.sh"
cd "$ROOT"

"$ROOT/scripts/build-wheels.sh"
x86_wheel=$(ls "$ROOT"/dist/kinetrace-*-manylinux_2_28_x86_64.whl)
arm_wheel=$(ls "$ROOT"/dist/kinetrace-*-manylinux_2_28_aarch64.whl)
torch_pin=$(grep -m1 '^torch==' "$ROOT/requirements-dev.txt")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- x86_64 ------------------------------------------------------------------------------
log "install test: $(basename "$x86_wheel") + $torch_pin in a clean venv, no Rust on PATH"
ensure_tools
claim_slot
venv=$(slot_dir install-test)
rm -rf "$venv"
"$UV" venv -q --seed --no-python-downloads --python "$(find_python "${KINETRACE_PYTHON:-3.11}")" "$venv"
"$UV" pip install -q --python "$venv/bin/python" "$torch_pin"
# A PATH with the venv and the system only: no cargo, rustc, maturin or zig.
clean_path="$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
in_clean_env() {
  (cd "$work" && env -i HOME="$HOME" PATH="$clean_path" LANG=C.UTF-8 TMPDIR="$work" "$@")
}
for tool in cargo rustc maturin zig; do
  if in_clean_env sh -c "command -v $tool" >/dev/null; then
    echo "FAIL: $tool is on the clean PATH" >&2
    exit 1
  fi
done
in_clean_env python -m pip install -q --no-index --no-cache-dir "$x86_wheel"
in_clean_env python - <<'EOF'
import gzip, json, os
import torch
import kinetrace
from kinetrace import _kinetrace

assert "site-packages" in kinetrace.__file__, kinetrace.__file__
assert _kinetrace.__file__.endswith(".abi3.so"), _kinetrace.__file__
with torch.profiler.profile(record_shapes=True) as prof:
    for _ in range(20):
        (torch.randn(16, 16) @ torch.randn(16, 16)).relu().sum()
stats = kinetrace.export_chrome_trace(prof, "trace.json.gz")
with gzip.open("trace.json.gz") as f:
    trace = json.load(f)
names = {e.get("name") for e in trace["traceEvents"]}
assert {"aten::mm", "aten::relu"} <= names, sorted(map(str, names))[:20]
report = kinetrace.check_trace("trace.json.gz")
assert report.valid and report.info.events == len(trace["traceEvents"]), report.format()
print(f"exported {stats.events} events, {os.path.getsize('trace.json.gz')} bytes, "
      f"kinetrace {kinetrace.__version__}, torch {torch.__version__}")
EOF
in_clean_env kinetrace check trace.json.gz
in_clean_env kinetrace demo --iterations 200 --out demo
echo "install test x86_64: ok"

# --- aarch64 -----------------------------------------------------------------------------
# The arm64 root filesystem (made once and cached; scripts/prefetch.sh makes it early in CI).
rootfs=$("$ROOT/scripts/arm64-rootfs.sh")

log "aarch64: $(basename "$arm_wheel") under qemu-user, $(cat "$rootfs/etc/debian_version" 2>/dev/null) arm64 Python"
# A wheel is a zip laid out as site-packages: unpacking it is installing it (minus scripts).
mkdir -p "$work/arm-site" "$work/arm"
python3 -m zipfile -e "$arm_wheel" "$work/arm-site"
# qemu-aarch64 -L: the arm64 dynamic loader and libraries come from the root filesystem; no
# binfmt registration is needed to run.
arm_python() {
  (cd "$work/arm" && env -i PATH=/usr/bin:/bin LANG=C.UTF-8 PYTHONPATH="$work/arm-site" \
    PYTHONDONTWRITEBYTECODE=1 qemu-aarch64-static -L "$rootfs" "$rootfs/usr/bin/python3" "$@")
}
arm_python - <<'EOF'
import gzip, json, platform, sys
import kinetrace
from kinetrace import _kinetrace
from kinetrace._cli import main

assert "torch" not in sys.modules, "import kinetrace must not import torch"
print(f"python {platform.python_version()} on {platform.machine()}, "
      f"kinetrace {kinetrace.__version__} from {_kinetrace.__file__}")
assert platform.machine() == "aarch64", platform.machine()

payload = b"".join(b'{"ph": "X", "ts": %d}\n' % i for i in range(200_000))
with kinetrace.GzipWriter("blob.gz", compresslevel=6, threads=2) as w:
    w.write(payload)
assert gzip.decompress(open("blob.gz", "rb").read()) == payload

events = [{"name": f"op{i}", "ph": "X", "cat": "cpu_op", "ts": i * 2.0, "dur": 1.5,
           "pid": 1, "tid": 1, "args": {}} for i in range(5000)]
with open("trace.json", "w") as f:
    json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
report = kinetrace.check_trace("trace.json")
assert report.valid and report.info.events == 5000, report.format()

# `kinetrace compress trace.json`, in this process: a child would need binfmt to start
assert main(["compress", "trace.json"]) == 0
with gzip.open("trace.json.gz") as f:
    assert json.load(f)["traceEvents"] == events
report = kinetrace.check_trace("trace.json.gz")
assert report.valid and report.info.events == 5000 and report.info.gzip_members == 1, report.format()
with open("broken.json", "w") as f:  # a truncated file is reported, not a crash
    f.write('{"traceEvents": [{"ph": "X"')
assert not kinetrace.check_trace("broken.json").valid
print("aarch64: import, GzipWriter, check_trace, compress: ok")
EOF
echo "install test aarch64 (qemu-user): ok"
