#!/usr/bin/env bash
# The GitHub workflows, checked offline (run by scripts/test.sh): against GitHub's workflow
# schema (check-jsonschema's vendored copy) and by zizmor's security audits, failing on any
# finding of medium or higher severity (unpinned actions, excessive permissions, template
# injection, credentials left in the checkout, ...). Both tools come from PyPI, pinned, in a
# cached venv of their own.
source "$(dirname "$0")/env.sh"
cd "$ROOT"

tools="check-jsonschema==0.39.0 zizmor==1.32.0"
tool_venv="$CACHE/workflow-tools"
# shellcheck disable=SC2086 # one argument per requirement
make_venv "$tool_venv" "${KINETRACE_PYTHON:-3.11}" "$tools" $tools

log "workflows: check-jsonschema (vendor.github-workflows), zizmor --offline"
"$tool_venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows .github/workflows/*.yml
"$tool_venv/bin/zizmor" --offline --min-severity medium --no-progress .github/workflows/
