#!/usr/bin/env bash
# Builds and runs the C++ unit and ranks-as-threads tests under a sanitizer (gcc):
#   tools/sanitize.sh asan [bazel test options...]   AddressSanitizer + UndefinedBehaviorSanitizer
#   tools/sanitize.sh tsan [bazel test options...]   ThreadSanitizer
# The configs are in .bazelrc (their own output directory). The last line is
# "N passed, N failed, N skipped" (.ci/test_summary.sh). Only C++ tests with no other
# process in them are listed: Python tests load the instrumented libhora.so into an
# uninstrumented interpreter, and the multi-process jobs exec mpirun and horarun.
# HORA_BAZEL_ROOT as for tools/test.sh (.ci/bazel_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-}"
case "$config" in
  asan|tsan) shift ;;
  *) echo "usage: tools/sanitize.sh asan|tsan [bazel test options...]" >&2; exit 2 ;;
esac

TARGETS=(
  //tests/common:common_test
  //tests/common:copy_test
  //tests/common:node_cache_test
  //tests/coordinator:planner_test
  //tests/coordinator:convert_test
  //tests/coordinator:service_test
  //tests/coordinator:session_test
  //tests/coordinator:session_fault_test
  //tests/coordinator:tls_test
  //tests/coordinator:fuzz_test
  //tests/coordinator:diagnosis_test
  //tests/runtime:options_test
  //tests/runtime:handle_table_test
  //tests/runtime:flight_recorder_test
  //tests/runtime:engine_test
  //tests/runtime:engine_sets_test
  //tests/runtime:timeline_test
  //tests/runtime:launch_env_test
  //tests/runtime:slurm_lists_test
  //tests/runtime:steady_board_test
  //tests/runtime:steady_held_test
  //tests/collectives:registry_test
  //tests/collectives:gloo_test
  //tests/collectives:shm_test
  //tests/collectives:chunk_pipeline_test
)

# Instrumented code runs several times slower: medium targets (shm_test) get 15 minutes.
extra=(--test_timeout=300,900,2700,3600)
if [ "$config" = tsan ]; then
  # The system libraries' races (tools/tsan.supp); an absolute path, as the test runs elsewhere.
  extra+=(--test_env=TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$PWD/tools/tsan.supp)
fi
exec .ci/test_summary.sh --config=ci --config="$config" "${extra[@]}" "$@" "${TARGETS[@]}"
