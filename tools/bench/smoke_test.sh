#!/usr/bin/env bash
# Smoke run of the allreduce benchmarks with tiny sizes and 2 ranks: every implementation
# runs, checks its results and prints rows; combine.py makes a report. No time is asserted.
# Prints "N passed, N failed" last.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
out="${TEST_TMPDIR:-$(mktemp -d)}/bench"
export HORA_BENCH_BIN=tools/bench/hora_allreduce_bench MPI_BENCH_BIN=tools/bench/mpi_allreduce_bench
[ -x "$HORA_BENCH_BIN" ] || HORA_BENCH_BIN=bazel-bin/$HORA_BENCH_BIN
[ -x "$MPI_BENCH_BIN" ] || MPI_BENCH_BIN=bazel-bin/$MPI_BENCH_BIN
bash tools/bench/run_allreduce_bench.sh --quick --no-build --np 2 --out-dir "$out" >"$out.md"
rc=$?
cat "$out.md"
rows=$(cat "$out"/*.csv | grep -cE '(^|: )(bw|lat),')
want=$(( 4 * (8 + 1) ))  # 4 implementations x (8 sizes 4 B..64 KiB + 1 latency row)
echo "rows: $rows of $want, exit $rc"
if [ "$rc" -eq 0 ] && [ "$rows" -eq "$want" ] && grep -q "Hora / torch gloo busbw" "$out.md"; then
  echo "1 passed, 0 failed"; exit 0
fi
echo "0 passed, 1 failed"; exit 1
