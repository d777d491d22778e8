#!/usr/bin/env bash
# The main job: profile a built-in workload, export it with kinetrace and with torch's two
# exporters on the same result, and print how they compare. Arguments go to `kinetrace demo`
# (e.g. --iterations 10000). nox (noxfile.py, session demo) builds the release wheel and makes
# a venv with torch and that wheel, nothing else; nothing is installed system-wide.
source "$(dirname "$0")/env.sh"
need_commands python3 rustup cc readelf
ensure_tools
cd "$ROOT"
"$NOX" -s demo -- "$@"
