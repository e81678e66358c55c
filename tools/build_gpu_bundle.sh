#!/usr/bin/env bash
# Packs what tools/gpu_check.sh runs on a machine without Bazel into dist/hora-gpu-tests.tar.gz:
# every gpu-tagged cc_test and the GPU benchmarks among //tools/bench's cc_binary targets
# (name with cuda, gpu or nccl), each with its non-system shared libraries
# (tools/wheel/bundle_libs.py: bin/<package>/<name>, lib/, rpath'd, stripped; NCCL and CUDA
# come from the machine), and bundle.json (manifest: "files", "tests", "benchmarks").
# Called by tools/build_wheel.sh.
# Usage: tools/build_gpu_bundle.sh [bazel build options]
#   HORA_GPU_TESTS_QUERY  the query for the tests (default: gpu-tagged cc_test under //...);
#                         to try the packing where no gpu test exists yet
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh

tests_query="${HORA_GPU_TESTS_QUERY:-attr(tags, \"\\bgpu\\b\", kind(cc_test, tests(//...)))}"
bench_query='kind(cc_binary, //tools/bench/...)'
out=dist/hora-gpu-tests.tar.gz
mapfile -t tests < <(bzl query "$tests_query" 2>/dev/null)
mapfile -t benches < <(bzl query "$bench_query" 2>/dev/null | grep -E ':[^:]*(cuda|gpu|nccl)[^:]*$' || true)
echo "build_gpu_bundle: ${#tests[@]} gpu test(s): ${tests[*]:-none}"
echo "build_gpu_bundle: ${#benches[@]} GPU benchmark(s): ${benches[*]:-none}"
rm -f "$out"
targets=("${tests[@]}" "${benches[@]}")
if [ ${#targets[@]} -eq 0 ]; then
  echo "build_gpu_bundle: nothing to pack; $out not written"
  exit 0
fi
bzl build "$@" "${targets[@]}"
bin="$(bzl info "$@" bazel-bin)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
args=()
for t in "${targets[@]}"; do
  rel="${t#//}"; rel="${rel/://}"
  [ -x "$bin/$rel" ] || { echo "build_gpu_bundle: $t built no executable at $bin/$rel" >&2; exit 1; }
  args+=("bin/$rel=$bin/$rel")
done
/usr/bin/python3 tools/wheel/bundle_libs.py "$stage" lib "${args[@]}" >/dev/null
/usr/bin/python3 - "$stage/bundle.json" "${#tests[@]}" <<'PY'
import json, sys
path, ntests = sys.argv[1], int(sys.argv[2])
m = json.load(open(path))
m["tests"], m["benchmarks"] = m["files"][:ntests], m["files"][ntests:]
json.dump(m, open(path, "w"), indent=1, sort_keys=True)
print("build_gpu_bundle: %d libraries; from the machine: %s; floor %s" % (
    len(m["libraries"]), ", ".join(m["from_environment"]) or "nothing",
    ", ".join("%s_%s" % (k, v[0]) for k, v in sorted(m["floor"].items()))))
PY
mkdir -p dist
tar -C "$stage" -czf "$out" .
echo "build_gpu_bundle: $out ($(du -h "$out" | cut -f1))"
