#!/usr/bin/env bash
# Runs pytest files of tests/multihost under /usr/bin/python3, as a Bazel sh_test or by hand
# from the repository root, and ends with the "N passed, N failed, N skipped" line.
# Usage: tests/multihost/run_pytest.sh tests/multihost/test_multihost.py [pytest options]
set -uo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"
else
  cd "$(dirname "$0")/../.."
fi
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/tests/multihost${PYTHONPATH:+:$PYTHONPATH}"
extra=()
[ -n "${XML_OUTPUT_FILE:-}" ] && extra+=("--junitxml=$XML_OUTPUT_FILE")

log="$(mktemp "${TEST_TMPDIR:-${TMPDIR:-/tmp}}/pytest.XXXXXX")"
/usr/bin/python3 -m pytest -q -s -rs -p no:cacheprovider "${extra[@]}" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# pytest -q ends with e.g. "2 failed, 27 passed, 3 skipped, 1 error in 3.1s": errors count as
# failed.
summary="$(grep -E '[0-9]+ (passed|failed|errors?|skipped)' "$log" | tail -n 1)"
count() { grep -oE "[0-9]+ $1" <<<"$summary" | awk '{s+=$1} END {print s+0}'; }
passed=$(count passed)
failed=$(( $(count failed) + $(count 'errors?') ))
skipped=$(count skipped)
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # crashed, or nothing collected
rm -f "$log"
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
