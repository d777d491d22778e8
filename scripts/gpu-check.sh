#!/usr/bin/env bash
# The checks only a machine with CUDA can run, kept ready for when one is at hand:
#   - the real-CUDA fidelity tests: torch's bytes on profiles with kernels, a memcpy and
#     kernels linked to record_param_comms (a one-process NCCL group on one GPU), by both
#     reading paths (torch's activities called directly, look-alikes read through Python),
#     and the NCCL ranks of tests/test_distributed.py;
#   - the export benchmark (short).
# Prints one summary line at the end. Without a CUDA device it fails at once ("no CUDA
# device"). With --dry-run it only collects the tests it would run (any machine: CI runs it
# through tests/test_gpu_check.py, so the list stays true).
#
#   scripts/gpu-check.sh [--dry-run]      # in a venv with torch (CUDA build) and kinetrace
#
# PYTHON (default: python) is the interpreter of that venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}

TESTS=(
  tests/test_fidelity_real.py::test_cuda_profile
  tests/test_fidelity_real.py::test_cuda_nccl_linked_activities
  tests/test_distributed.py::test_nccl_record_param_comms
)

if [ "${1:-}" = "--dry-run" ]; then
  "$PYTHON" -m pytest -q -p no:cacheprovider --collect-only "${TESTS[@]}"
  echo "gpu-check: dry run: ${#TESTS[@]} CUDA tests collected, nothing run"
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "usage: scripts/gpu-check.sh [--dry-run]" >&2
  exit 2
fi

device=$("$PYTHON" -c 'import torch
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")')
if [ -z "$device" ]; then
  echo "gpu-check: no CUDA device (torch.cuda.is_available() is False): nothing checked" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
"$PYTHON" -m pytest -q -p no:cacheprovider -rs --junitxml="$work/tests.xml" "${TESTS[@]}" || status=1
# A CUDA test that skips on a GPU machine is a failure here.
counts=$("$PYTHON" -c 'import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s[0]
print(s.get("tests"), s.get("failures"), s.get("errors"), s.get("skipped"))' "$work/tests.xml")
read -r total failures errors skipped <<<"$counts"
[ "$skipped" = "0" ] || status=1

bench=ok
"$PYTHON" benches/bench_export.py --iterations 5000 --repeat 1 --json "$work/bench.json" \
  >"$work/bench.txt" 2>&1 || { bench=failed; status=1; }
tail -n 20 "$work/bench.txt"

echo "gpu-check: $device: $total CUDA tests, $failures failed, $errors errors, $skipped skipped;" \
  "export benchmark $bench; $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
