#!/usr/bin/env bash
# Prints the path of a Debian arm64 root filesystem with python3, for running the aarch64
# wheel under qemu-user (scripts/test-install.sh). Made once with debootstrap (as root: it
# installs qemu-user-static, debootstrap and binfmt-support when missing) and cached in
# $KINETRACE_CACHE/arm64-rootfs; scripts/prefetch.sh makes it early in a CI run, beside the
# CPU-bound stages. Two runs making it at once each make their own; the first to finish wins.
source "$(dirname "$0")/env.sh"

rootfs="$CACHE/arm64-rootfs"
# apt_install PACKAGE...: install what is missing (a fresh machine of this kind has none),
# one apt-get at a time with the other lanes (scripts/apt-get.sh).
apt_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  "$ROOT/scripts/apt-get.sh" update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive "$ROOT/scripts/apt-get.sh" install -y -q \
    "${missing[@]}" >/dev/null
}
apt_install qemu-user-static >&2
if [ ! -x "$rootfs/usr/bin/python3" ]; then
  log "making the arm64 root filesystem (once; cached in $rootfs)"
  apt_install debootstrap binfmt-support >&2
  # debootstrap's second stage runs arm64 programs: the kernel must hand them to qemu.
  if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  fi
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  # A folder of this run's own: another run may be making one at the same time.
  rootfs_tmp="$rootfs.tmp.$$"
  rm -rf "$rootfs_tmp"
  mkdir -p "$CACHE"
  debootstrap --arch=arm64 --variant=minbase --include=python3 bookworm "$rootfs_tmp" \
    http://deb.debian.org/debian >"$rootfs_tmp.log" 2>&1 ||
    { tail -n 30 "$rootfs_tmp.log" >&2; rm -rf "$rootfs_tmp" "$rootfs_tmp.log"; exit 1; }
  rm -rf "$rootfs_tmp"/var/cache/apt/archives/*.deb "$rootfs_tmp.log"
  # -T: never into a folder another run has put there meanwhile (then this one is dropped).
  mv -T "$rootfs_tmp" "$rootfs" 2>/dev/null || rm -rf "$rootfs_tmp"
fi
printf '%s\n' "$rootfs"
