#!/usr/bin/env bash
# 1,024 ranks connect to one coordinator at once (issue 28's cold path): 1,024 real gRPC
# clients in this process and the real service in a child, with the soft open-file limit at
# the common default of 1024. Each process raises its soft limit toward the hard one at start
# (common/fd_limit.h, as hora_init does); without that, rank 0's accept fails with EMFILE and
# the last ranks never join. One step of batched notices, every plan checked; no time asserted.
set -euo pipefail
bench="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-hora}/tools/bench/coordinator_scale_bench"
[ -x "$bench" ] || bench="$(dirname "$0")/coordinator_scale_bench"
hard="$(ulimit -Hn)"
if [ "$hard" != unlimited ] && [ "$hard" -lt 5120 ]; then
  echo "coordinator_connections_test: the hard open-file limit is $hard; 1,024 ranks need" \
    "5120 (raise it: ulimit -Hn as root, or the container's nofile limit)" >&2
  exit 1
fi
ulimit -Sn 1024
"$bench" --modes=grpc --ranks=1024 --steps=1 --warmup=1 --batch=200 --step_timeout_ms=120000
echo "coordinator_connections_test: 1024 ranks joined and negotiated a step"
