#!/usr/bin/env bash
# Runs pytest files of tests/python under /usr/bin/python3, as a Bazel sh_test or by hand
# from the repository root, against the built libhora.so, and ends with the
# "N passed, N failed, N skipped" line (pytest test items) that .ci/test_summary.sh reads
# (convention: docs/testing.md).
# Usage: tests/python/run_pytest.sh tests/python/test_api.py [pytest options]
set -uo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"
else
  cd "$(dirname "$0")/../.."
fi
root="$PWD"
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${HORA_LIBRARY:-}" ]; then
  for lib in "$root/bindings/c/libhora.so" "$root/bazel-bin/bindings/c/libhora.so"; do
    if [ -e "$lib" ]; then export HORA_LIBRARY="$lib"; break; fi
  done
fi
[ -z "${HORARUN:-}" ] && [ -e "$root/tools/launcher/horarun" ] && \
  export HORARUN="$root/tools/launcher/horarun"
echo "run_pytest: HORA_LIBRARY=${HORA_LIBRARY:-<search>} HORARUN=${HORARUN:-<none>}"

. tests/harness/pytest_cases.sh

run_pytest "$@"
