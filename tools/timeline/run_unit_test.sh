#!/usr/bin/env bash
# Runs tools/timeline/hora_timeline_test.py under /usr/bin/python3 (Debian's pytest).
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tools/timeline/hora_timeline_test.py "$@"
