#!/usr/bin/env bash
# What a CI run downloads, started early beside the CPU-bound stages (scripts/test.sh):
#   prefetch.sh packages the Debian packages of the suite (browser, Java; as root)
#   prefetch.sh rootfs   the arm64 root filesystem of the install test
#                        (scripts/arm64-rootfs.sh; as root)
#   prefetch.sh compat   every compat row's venv: its torch, the test tools and the wheel
#                        (nox's install-only mode: nothing is run)
# Each part is also done by the stage that needs it when it was not done here, so this only
# moves time, never adds a step a stage depends on.
source "$(dirname "$0")/env.sh"
ensure_tools
cd "$ROOT"
case ${1:-} in
  packages) "$NOX" -s packages ;;
  rootfs)
    if [ "$(id -u)" = 0 ]; then
      "$ROOT/scripts/arm64-rootfs.sh" >/dev/null
    else
      log "not root: the arm64 root filesystem is left to the install test"
    fi
    ;;
  compat) "$NOX" -s compat --install-only ;;
  *)
    echo "usage: prefetch.sh packages|rootfs|compat" >&2
    exit 2
    ;;
esac
