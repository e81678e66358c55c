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
echo "== test.sh: .ci/test_summary.sh --config=ci --test_tag_filters=-gpu //..."
.ci/test_summary.sh --config=ci --test_tag_filters=-gpu //...
