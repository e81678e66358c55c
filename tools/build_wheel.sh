#!/usr/bin/env bash
# Builds Hora's wheel and copies it to dist/hora-VERSION-py3-none-linux_x86_64.whl: libhora.so
# with every non-system shared library it needs (rpath $ORIGIN, stripped), the Python package
# `hora` (hora.torch included), horarun as a console script (//tools/wheel:wheel, made by
# tools/wheel/make_wheel.py). Then the GPU test bundle, dist/hora-gpu-tests.tar.gz
# (tools/build_gpu_bundle.sh), for tools/gpu_check.sh on a machine with a GPU.
# Install: python3 -m venv ENV && ENV/bin/pip install --no-index dist/hora-*.whl
# Usage: tools/build_wheel.sh [--no-gpu-bundle] [bazel build options]
#   HORA_BAZEL_ROOT, HORA_KEEP_BAZEL: see .ci/bazel_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh
bzl_shutdown_on_exit

gpu_bundle=1
if [ "${1:-}" = "--no-gpu-bundle" ]; then gpu_bundle=0; shift; fi
MAX_MIB=60  # the wheel travels to the GPU machine with the tree under a 64 MiB limit

command -v patchelf >/dev/null || { echo "build_wheel: patchelf is missing: run tools/setup.sh" >&2; exit 1; }
bzl build "$@" //tools/wheel:wheel
bin="$(bzl info "$@" bazel-bin)"
wheel="$(ls "$bin"/tools/wheel/hora-*.whl)"
mkdir -p dist
rm -f dist/hora-*.whl
install -m 0644 "$wheel" dist/
size=$(stat -c %s "dist/$(basename "$wheel")")
echo "build_wheel: dist/$(basename "$wheel") ($(awk -v s="$size" 'BEGIN{printf "%.1f", s/1048576}') MiB)"
/usr/bin/python3 - "dist/$(basename "$wheel")" <<'PY'
import json, sys, zipfile
m = json.loads(zipfile.ZipFile(sys.argv[1]).read("hora/_bundle.json"))
print("build_wheel: %d bundled libraries; the system must provide %s" % (len(m["libraries"]),
      ", ".join("%s_%s (%s)" % (k, v[0], v[1]) for k, v in sorted(m["floor"].items()))))
PY
if [ "$size" -gt $((MAX_MIB * 1048576)) ]; then
  echo "build_wheel: the wheel is over $MAX_MIB MiB" >&2
  exit 1
fi
if [ "$gpu_bundle" = 1 ]; then
  tools/build_gpu_bundle.sh "$@"
fi
