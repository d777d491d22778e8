#!/usr/bin/env bash
# The instruction-count gate alone (CI runs it as the `counts` stage of scripts/test.sh):
# the native work of every tool counted under Valgrind and compared with
# benches/counts-baseline.json. Arguments go to benches/counts.py; the baseline is updated
# with
#
#   ./scripts/counts.sh --update
#
# (commit it saying why the counts moved). Needs the release wheel of this tree in dist/
# (./scripts/demo.sh or nox -s wheel builds it) for the `python-import` count.
source "$(dirname "$0")/env.sh"
need_commands python3 rustup cc
ensure_tools
claim_slot
cd "$ROOT"
"$NOX" -s wheel counts -- "$@"
