#!/usr/bin/env bash
# Runs tests/timeline/test_timeline_job.py under /usr/bin/python3 (Debian's pytest), as a
# Bazel sh_test or by hand from the repository root (after building :timeline_job).
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${HORA_LIBRARY:-}" ]; then
  for lib in "$PWD/bindings/c/libhora.so" "$PWD/bazel-bin/bindings/c/libhora.so"; do
    if [ -e "$lib" ]; then export HORA_LIBRARY="$lib"; break; fi
  done
fi
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/timeline/test_timeline_job.py "$@"
