#!/usr/bin/env bash
# Smoke run of the coordinator scale benchmark: small, every mode, both message shapes. The
# binary exits non-zero on a wrong or missing plan or a missed deadline; no time is asserted.
set -euo pipefail
bench="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-hora}/tools/bench/coordinator_scale_bench"
[ -x "$bench" ] || bench="$(dirname "$0")/coordinator_scale_bench"
for batch in runtime 1 7 200; do
  "$bench" --modes=planner,local,grpc --ranks=1,8 --steps=5 --warmup=1 --batch="$batch" \
    --step_timeout_ms=30000
done
# 20 ranks on 3 simulated hosts: 12 of them through 2 host relays.
"$bench" --modes=grpc --ranks=20 --steps=3 --warmup=1 --batch=7 --relay=1 --step_timeout_ms=30000
echo "coordinator_scale_bench smoke: ok"
