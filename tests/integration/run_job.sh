#!/usr/bin/env bash
# Runs a test job through horarun as real processes: run_job.sh NP JOB_BINARY [args...]
# Prints "1 passed, 0 failed" (or "0 passed, 1 failed") last for .ci/test_summary.sh.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
np="$1"; shift
job="$1"; shift
[ -x "$job" ] || job="bazel-bin/$job"
start=$(date +%s)
timeout -k 10 600 /usr/bin/python3 tools/launcher/horarun -np "$np" "$job" "$@"
rc=$?
echo "job $job with $np ranks: exit $rc after $(( $(date +%s) - start )) s"
if [ "$rc" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit "$rc"
