#!/usr/bin/env bash
# Runs tests/collectives/mpi_test under Open MPI's mpirun: run_mpi_test.sh NP
# Loopback only (vader between local ranks, tcp on lo), root allowed, more ranks than cores
# allowed and yielding. The binary's rank 0 prints "N passed, N failed, N skipped" last.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
np="$1"
bin=tests/collectives/mpi_test
[ -x "$bin" ] || bin="bazel-bin/$bin"
command -v mpirun >/dev/null || { echo "mpirun is missing (tools/setup.sh installs openmpi-bin)"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
store=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mpi_test_store.XXXXXX")
timeout -k 10 540 mpirun --allow-run-as-root --oversubscribe --bind-to none \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  --mca btl_vader_single_copy_mechanism none \
  -np "$np" "$bin" "$store" </dev/null
rc=$?
echo "mpi_test with $np ranks: exit $rc"
exit "$rc"
