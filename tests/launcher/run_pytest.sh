#!/usr/bin/env bash
# Runs pytest files under /usr/bin/python3 as a Bazel sh_test (or by hand from the repo root)
# and ends with the "N passed, N failed, N skipped" line (pytest test items, from pytest's JUnit
# XML) that .ci/test_summary.sh reads (convention: docs/testing.md).
# Usage: run_pytest.sh FILE.py... [pytest options]   (paths relative to the workspace root)
set -uo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"
else
  cd "$(dirname "$0")/../.."
fi
export PYTHONDONTWRITEBYTECODE=1

. tests/harness/pytest_cases.sh

run_pytest "$@"
