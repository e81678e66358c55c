#!/usr/bin/env bash
# Runs a test job under Open MPI with the mpi data plane (HORA_CPU_OPERATIONS=mpi):
#   run_mpi_job.sh mpirun|horarun NP JOB_BINARY [args...]
# mpirun: plain mpirun, ranks from OMPI_COMM_WORLD_*, the token from Open MPI's job id, and
#   HORA_COORDINATOR_ADDR given by hand (a free loopback port), as a user would today.
# horarun: horarun --mpi -x HORA_CPU_OPERATIONS=mpi.
# Loopback only; every allreduce on the data plane (HORA_INLINE_THRESHOLD=0, unless set).
# Prints "1 passed, 0 failed" (or "0 passed, 1 failed") last for .ci/test_summary.sh.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
mode="$1"; np="$2"; job="$3"; shift 3
[ -x "$job" ] || job="bazel-bin/$job"
command -v mpirun >/dev/null || { echo "mpirun is missing (tools/setup.sh installs openmpi-bin)"; echo "0 passed, 1 failed"; exit 1; }
MCA="--mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
MCA="$MCA --mca btl_vader_single_copy_mechanism none"
export HORA_CPU_OPERATIONS=mpi HORA_INLINE_THRESHOLD="${HORA_INLINE_THRESHOLD:-0}"
# Bazel runs tests side by side in sandboxes with their own PID namespaces, so two mpiruns
# can have the same pid and so the same job id, and their files in the shared /dev/shm
# collide: PMIx's shared-memory store ("PMIX ERROR: OUT-OF-RESOURCE") and vader's segments
# (a segfault in mca_btl_vader_poll_handle_frag, one job reading the other's fragments).
# PMIx's hash store, and a session directory and vader backing directory per test, avoid it.
export PMIX_MCA_gds=hash
export OMPI_MCA_orte_tmpdir_base="${TEST_TMPDIR:-/tmp}"
export OMPI_MCA_btl_vader_backing_directory="${TEST_TMPDIR:-/tmp}"
start=$(date +%s)
case "$mode" in
  mpirun)
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # shellcheck disable=SC2086
    timeout -k 10 600 mpirun --allow-run-as-root --oversubscribe --bind-to none $MCA \
      -x HORA_CPU_OPERATIONS -x HORA_INLINE_THRESHOLD -x HORA_COORDINATOR_ADDR="127.0.0.1:$port" \
      -np "$np" "$job" "$@" </dev/null ;;
  horarun)
    timeout -k 10 600 /usr/bin/python3 tools/launcher/horarun -np "$np" --mpi \
      --mpi-args "--oversubscribe $MCA" -x HORA_CPU_OPERATIONS -x HORA_INLINE_THRESHOLD \
      "$job" "$@" </dev/null ;;
  *) echo "run_mpi_job.sh: unknown mode $mode"; exit 2 ;;
esac
rc=$?
echo "job $job with $np ranks under $mode, HORA_CPU_OPERATIONS=mpi: exit $rc after $(( $(date +%s) - start )) s"
if [ "$rc" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit "$rc"
