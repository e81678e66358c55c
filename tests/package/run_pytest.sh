#!/usr/bin/env bash
# Runs the pytest files of tests/package under /usr/bin/python3, as a Bazel sh_test or by hand
# from the repository root, and ends with the "N passed, N failed, N skipped" line
# .ci/test_summary.sh reads (docs/testing.md). Unlike tests/python/run_pytest.sh it puts
# nothing of the repository on any path: the tests install the wheel and use only that.
# Usage: tests/package/run_pytest.sh tests/package/test_wheel.py [pytest options]
#   HORA_WHEEL=FILE  the wheel to test (default: the Bazel target's, else dist/hora-*.whl)
set -uo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"
else
  cd "$(dirname "$0")/../.."
fi
unset PYTHONPATH HORA_LIBRARY HORARUN LD_LIBRARY_PATH
export PYTHONDONTWRITEBYTECODE=1
echo "run_pytest: HORA_WHEEL=${HORA_WHEEL:-<runfiles or dist/>}"

. tests/harness/pytest_cases.sh

run_pytest "$@"
