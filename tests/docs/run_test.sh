#!/usr/bin/env bash
# Runs a pytest file of tests/docs under /usr/bin/python3, from the repository root (Bazel's
# runfiles, or the checkout by hand).
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
export PYTHONDONTWRITEBYTECODE=1
. tests/harness/pytest_cases.sh
run_pytest "$@"
