#!/usr/bin/env bash
# The test command: installs what is missing (apt), builds everything, installs Hora, runs
# every test that needs no GPU. The last line is "N passed, N failed, N skipped" (test cases
# summed over every test target, docs/testing.md); the exit code is non-zero on any failure,
# and under CI=true on any skip.
# Usage: tools/test.sh          (as root, or with sudo available; from any directory)
#   HORA_BAZEL_ROOT=DIR  separate Bazel output root; HORA_KEEP_BAZEL=1 keep the server
#   (see .ci/bazel_env.sh; by default the Bazel server is shut down at exit)
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh
bzl_shutdown_on_exit

step() {
  echo "== test.sh: $*"
  if ! "$@"; then
    echo "test.sh: FAILED: $*" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
}

step tools/setup.sh
step bzl build --config=ci //...
step tools/install.sh --config=ci

# Each counted part ends its output with "N passed, N failed, N skipped"; the last line of
# this script is their sum, and its exit code is non-zero when any part failed.
sum_p=0; sum_f=0; sum_s=0; rc=0
counted() {  # counted NAME COMMAND...: runs a part, adds its counts (1 failed when it has none)
  local name="$1" out line r; shift
  echo "== test.sh: [$name] $*"
  out="$(mktemp "${TMPDIR:-/tmp}/hora-test-part.XXXXXX")"
  if "$@" 2>&1 | tee "$out"; then r=0; else r=${PIPESTATUS[0]}; [ "$r" -ne 0 ] || r=1; fi
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$out" | tail -n 1 || true)"
  rm -f "$out"
  if [ -z "$line" ]; then
    if [ "$r" -eq 0 ]; then line="1 passed, 0 failed, 0 skipped"; else line="0 passed, 1 failed, 0 skipped"; fi
  fi
  read -r p _ f _ s _ <<<"$line"
  [ "$r" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  [ "$r" -ne 0 ] && rc=1
  echo "== test.sh: [$name] $p passed, $f failed, $s skipped"
  sum_p=$((sum_p + p)); sum_f=$((sum_f + f)); sum_s=$((sum_s + s))
}
thread_safety() {  # one case: clang's thread-safety analysis finds nothing
  tools/check_tsa.sh --config=ci && echo "1 passed, 0 failed, 0 skipped"
}

counted tests .ci/test_summary.sh --config=ci --config=ci-tests --test_tag_filters=-gpu //...
counted thread-safety thread_safety
# One case: every C/C++ file is as clang-format (.clang-format) writes it.
counted format tools/check_format.sh
# The C++ unit and ranks-as-threads tests again under AddressSanitizer + UBSan (each case
# counted; their own output directory, so the plain build above is kept).
counted asan tools/sanitize.sh asan
echo "$sum_p passed, $sum_f failed, $sum_s skipped"
exit "$rc"
