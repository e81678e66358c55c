#!/usr/bin/env bash
# Runs pytest files of tests/python under /usr/bin/python3, as a Bazel sh_test or by hand
# from the repository root, against the built libhora.so, and ends with the
# "N passed, N failed, N skipped" line (pytest test items) that .ci/test_summary.sh reads
# (convention: docs/testing.md).
# Usage: tests/python/run_pytest.sh tests/python/test_api.py [pytest options]
#   HORA_TEST_INSTALLED=VENV  test an installed package instead (the wheel: tools/test_installed.sh):
#   pytest, the ranks and horarun are VENV's; nothing of bindings/python or Bazel on any path.
set -uo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"
else
  cd "$(dirname "$0")/../.."
fi
root="$PWD"
export PYTHONDONTWRITEBYTECODE=1
if [ -n "${HORA_TEST_INSTALLED:-}" ]; then
  venv="$HORA_TEST_INSTALLED"
  [ -x "$venv/bin/python" ] && [ -x "$venv/bin/horarun" ] || {
    echo "run_pytest: HORA_TEST_INSTALLED=$venv has no bin/python and bin/horarun" >&2; exit 1; }
  unset HORA_LIBRARY PYTHONPATH
  export HORA_TEST_PYTHON="${HORA_TEST_PYTHON:-$venv/bin/python}" HORARUN="$venv/bin/horarun"
  export HORA_PYTEST_PYTHON="$venv/bin/python"
else
  export PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -z "${HORA_LIBRARY:-}" ] && [ -z "${HORA_TEST_INSTALLED:-}" ]; then
  for lib in "$root/bindings/c/libhora.so" "$root/bazel-bin/bindings/c/libhora.so"; do
    if [ -e "$lib" ]; then export HORA_LIBRARY="$lib"; break; fi
  done
fi
[ -z "${HORARUN:-}" ] && [ -e "$root/tools/launcher/horarun" ] && \
  export HORARUN="$root/tools/launcher/horarun"
echo "run_pytest: HORA_LIBRARY=${HORA_LIBRARY:-<search>} HORARUN=${HORARUN:-<none>}" \
  "${HORA_TEST_INSTALLED:+HORA_TEST_INSTALLED=$HORA_TEST_INSTALLED}"

. tests/harness/pytest_cases.sh

run_pytest "$@"
