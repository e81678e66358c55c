#!/usr/bin/env bash
# Smoke run of the coordinator scale benchmark: small, every mode, both message shapes. The
# binary exits non-zero on a wrong or missing plan or a missed deadline; no time is asserted.
set -euo pipefail
bench="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-hora}/tools/bench/coordinator_scale_bench"
[ -x "$bench" ] || bench="$(dirname "$0")/coordinator_scale_bench"
for batch in 1 7 200; do
  "$bench" --modes=planner,local,grpc --ranks=1,8 --steps=5 --warmup=1 --batch="$batch" \
    --step_timeout_ms=30000
done
echo "coordinator_scale_bench smoke: ok"
