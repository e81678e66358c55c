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
. tests/harness/pytest_cases.sh
run_pytest -s "$@"
