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
# Bazel runs tests side by side in sandboxes with their own PID namespaces, so two mpiruns
# can have the same pid and so the same job id, and their files in the shared /dev/shm
# collide: PMIx's shared-memory store ("PMIX ERROR: OUT-OF-RESOURCE") and vader's segments
# (a segfault in mca_btl_vader_poll_handle_frag, one job reading the other's fragments).
# PMIx's hash store, and a session directory and vader backing directory per test, avoid it.
export PMIX_MCA_gds=hash
export OMPI_MCA_orte_tmpdir_base="${TEST_TMPDIR:-/tmp}"
export OMPI_MCA_btl_vader_backing_directory="${TEST_TMPDIR:-/tmp}"
store=$(mktemp -d "${TEST_TMPDIR:-/tmp}/mpi_test_store.XXXXXX")
timeout -k 10 540 mpirun --allow-run-as-root --oversubscribe --bind-to none \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  --mca btl_vader_single_copy_mechanism none \
  -np "$np" "$bin" "$store" </dev/null
rc=$?
echo "mpi_test with $np ranks: exit $rc"
exit "$rc"
