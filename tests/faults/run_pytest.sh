#!/usr/bin/env bash
# Runs pytest files of tests/faults under /usr/bin/python3, as a Bazel sh_test or by hand from
# the repository root, and ends with the "N passed, N failed, N skipped" line (pytest test
# items) that .ci/test_summary.sh reads (convention: docs/testing.md).
# Usage: tests/faults/run_pytest.sh tests/faults/test_kill.py [pytest options]
set -uo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"
else
  cd "$(dirname "$0")/../.."
fi
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/tests/faults${PYTHONPATH:+:$PYTHONPATH}"
. tests/harness/pytest_cases.sh

# -s: the fault tests print their measured detection times.
run_pytest -s "$@"
