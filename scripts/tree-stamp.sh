#!/usr/bin/env bash
# Prints what identifies the state of this work tree: the commit, and a digest of every
# uncommitted change (tracked diffs, untracked files and their contents; dist/ and the build
# folders excluded). scripts/build-wheels.sh writes it beside each wheel it builds
# (WHEEL.source), so a wheel is reused only by the tree it was built from (noxfile.py's
# `wheel` session and _suite_wheel, scripts/test-install.sh): the same commit builds
# byte-identical wheels, so building twice in one CI run only costs time.
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse HEAD
{
  git diff HEAD --binary -- . ':(exclude)dist'
  git ls-files --others --exclude-standard -z -- . ':(exclude)dist' |
    xargs -0 -r sha256sum --
} | sha256sum | cut -d' ' -f1
