#!/usr/bin/env bash
# The main job: profile a built-in workload, export it with kinetrace and with torch's two
# exporters on the same result, and print how they compare. Arguments go to `kinetrace demo`
# (e.g. --iterations 10000). nox (noxfile.py, session demo) makes the venv with torch and the
# release wheel.
source "$(dirname "$0")/env.sh"
ensure_tools
cd "$ROOT"
"$NOX" -s demo -- "$@"
