#!/usr/bin/env bash
# apt-get ARGS...: one at a time among this project's scripts, and waiting out another
# program's apt lock. On a fresh machine CI's lanes install packages at once (the browser
# and Java for the suite, qemu and debootstrap for the arm64 check); apt-get's own
# DPkg::Lock::Timeout waits for dpkg's lock but not for the package lists' lock that
# `update` takes, on which it fails at once ("Could not get lock /var/lib/apt/lists/lock").
set -euo pipefail
lock=/run/lock/kinetrace-apt-get.lock
[ -d /run/lock ] || lock=/tmp/kinetrace-apt-get.lock
exec 9>>"$lock"
flock -w 1800 9
# apt-get says 100 for every failure; another program's lock is waited out by trying again.
status=0
for attempt in 1 2 3 4 5; do
  apt-get -o DPkg::Lock::Timeout=600 "$@" && exit 0 || status=$?
  [ "$attempt" -lt 5 ] && sleep 20
done
exit "$status"
