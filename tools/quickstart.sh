#!/usr/bin/env bash
# The quick start: installs what is missing (apt), builds Hora and installs it (libhora.so,
# hora.h, horarun, the Python package under /usr/local), builds the main job's programs, then
# runs the main job. (tools/test.sh builds everything.)
# Usage: tools/quickstart.sh    (as root, or with sudo available; from any directory)
#   HORA_BAZEL_ROOT=DIR  separate Bazel output root; HORA_KEEP_BAZEL=1 keep the server
#   (see .ci/bazel_env.sh; by default the Bazel server is shut down at exit)
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh
bzl_shutdown_on_exit

echo "== quickstart: installing system packages"
tools/setup.sh
HORARUN="${HORA_PREFIX:-/usr/local}/bin/horarun"

# The main job: a character-level GPT trained with hora.torch's DistributedOptimizer by 2 ranks
# on this host's CPU (examples/gpt_char_lm.py; it ends by checking that every rank holds the
# same parameters). MAIN_TARGETS are the Bazel targets it needs beyond what tools/install.sh
# builds and installs (libhora.so, horarun, the Python package); empty: none.
MAIN_TARGETS=()
MAIN_JOB=("$HORARUN" -np 2 /usr/bin/python3 "$PWD/examples/gpt_char_lm.py")

echo "== quickstart: building and installing Hora"
tools/install.sh
if [ ${#MAIN_TARGETS[@]} -gt 0 ]; then
  echo "== quickstart: building ${MAIN_TARGETS[*]}"
  bzl build "${MAIN_TARGETS[@]}"
fi

# Every program the job names must exist before it starts.
for arg in "${MAIN_JOB[@]}"; do
  case "$arg" in
    /*) [ -e "$arg" ] || { echo "quickstart: $arg does not exist (is it built?)" >&2; exit 1; } ;;
  esac
done
echo "== quickstart: running: ${MAIN_JOB[*]}"
set +e
"${MAIN_JOB[@]}"
rc=$?
set -e
echo "== quickstart: the main job exited with code $rc"
exit "$rc"
