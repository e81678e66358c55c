#!/usr/bin/env bash
# The GPU checks of the fusion kernels, in one short run on a machine with a GPU (docs/gpu.md):
#   1. //tests/collectives:cuda_batch_copy_test (tag gpu): bit-exactness against ScaleCopy;
#   2. //tests/collectives:cuda_no_device_test and :cuda_link_test, which on a GPU machine
#      require Create(0) to succeed;
#   3. //tools/bench:cuda_batch_copy_bench, whose table and SUMMARY line go to stdout.
# Usage: tools/bench/run_cuda_checks.sh [OUT_DIR]   (logs copied to OUT_DIR when given)
# Exit status: 0 when every test passed and the bench measured (its result may be BELOW).
set -uo pipefail
cd "$(dirname "$0")/../.."
. .ci/bazel_env.sh
out="${1:-}"
rc=0
bzl test --test_output=errors \
  //tests/collectives:cuda_batch_copy_test //tests/collectives:cuda_no_device_test \
  //tests/collectives:cuda_link_test //tests/collectives:cuda_scale_math_test || rc=1
testlogs="$(bzl info bazel-testlogs 2>/dev/null)"
if [ -n "$out" ]; then
  mkdir -p "$out"
  for t in cuda_batch_copy_test cuda_no_device_test cuda_link_test cuda_scale_math_test; do
    cp "$testlogs/tests/collectives/$t/test.log" "$out/$t.log" 2>/dev/null || true
  done
fi
bench_log="$(mktemp)"
bzl run //tools/bench:cuda_batch_copy_bench 2>&1 | tee "$bench_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
[ -n "$out" ] && cp "$bench_log" "$out/cuda_batch_copy_bench.txt"
grep '^SUMMARY cuda_batch_copy ' "$bench_log" || { echo "no SUMMARY line"; rc=1; }
rm -f "$bench_log"
exit "$rc"
