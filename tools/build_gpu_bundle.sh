#!/usr/bin/env bash
# Packs what tools/gpu_check.sh runs on a machine without Bazel into dist/hora-gpu-tests.tar.gz:
# every gpu-tagged cc_test ("tests"), the cc_tests named cuda_* or nccl_* that are not tagged
# gpu ("no_gpu_tests": they run with or without a GPU, e.g. cuda_no_device_test), and the GPU
# benchmarks among //tools/bench's cc_binary targets (name with cuda, gpu or nccl:
# "benchmarks"), each with its non-system shared libraries
# (tools/wheel/bundle_libs.py: bin/<package>/<name>, lib/, rpath'd, stripped; NCCL and CUDA
# come from the machine), and bundle.json (the manifest: those three lists, "files", the
# libraries and the glibc floor).
# Called by tools/build_wheel.sh.
# Usage: tools/build_gpu_bundle.sh [bazel build options]
#   HORA_GPU_TESTS_QUERY  the query for the tests (default: gpu-tagged cc_test under //...);
#                         to try the packing where no gpu test exists yet
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh

gpu_tag='attr(tags, "\bgpu\b", kind(cc_test, tests(//...)))'
tests_query="${HORA_GPU_TESTS_QUERY:-$gpu_tag}"
no_gpu_query="attr(name, \"^(cuda|nccl)_\", kind(cc_test, tests(//...))) except $gpu_tag"
bench_query='kind(cc_binary, //tools/bench/...)'
out=dist/hora-gpu-tests.tar.gz
# query EXPR: the labels, one a line; a failing query stops the script with Bazel's message.
query() {
  local labels
  labels="$(bzl query "$1" 2>"$stage/query.err")" || {
    echo "build_gpu_bundle: bazel query '$1' failed:" >&2; cat "$stage/query.err" >&2; exit 1; }
  [ -n "$labels" ] && echo "$labels"
  return 0
}
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mapfile -t tests < <(query "$tests_query")
mapfile -t no_gpu < <(query "$no_gpu_query")
mapfile -t benches < <(query "$bench_query" | grep -E ':[^:]*(cuda|gpu|nccl)[^:]*$' || true)
echo "build_gpu_bundle: ${#tests[@]} gpu test(s): ${tests[*]:-none}"
echo "build_gpu_bundle: ${#no_gpu[@]} CUDA/NCCL test(s) that run without a GPU: ${no_gpu[*]:-none}"
echo "build_gpu_bundle: ${#benches[@]} GPU benchmark(s): ${benches[*]:-none}"
rm -f "$out"
targets=("${tests[@]}" "${no_gpu[@]}" "${benches[@]}")
if [ ${#targets[@]} -eq 0 ]; then
  echo "build_gpu_bundle: nothing to pack; $out not written"
  exit 0
fi
bzl build "$@" "${targets[@]}"
bin="$(bzl info "$@" bazel-bin)"
rm -f "$stage/query.err"
args=()
for t in "${targets[@]}"; do
  rel="${t#//}"; rel="${rel/://}"
  [ -x "$bin/$rel" ] || { echo "build_gpu_bundle: $t built no executable at $bin/$rel" >&2; exit 1; }
  args+=("bin/$rel=$bin/$rel")
done
/usr/bin/python3 tools/wheel/bundle_libs.py "$stage" lib "${args[@]}" >/dev/null
/usr/bin/python3 - "$stage/bundle.json" "${#tests[@]}" "${#no_gpu[@]}" <<'PY'
import json, sys
path, ntests, nfree = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = json.load(open(path))
f = m["files"]
m["tests"], m["no_gpu_tests"], m["benchmarks"] = f[:ntests], f[ntests:ntests + nfree], f[ntests + nfree:]
json.dump(m, open(path, "w"), indent=1, sort_keys=True)
print("build_gpu_bundle: %d libraries; from the machine: %s; floor %s" % (
    len(m["libraries"]), ", ".join(m["from_environment"]) or "nothing",
    ", ".join("%s_%s" % (k, v[0]) for k, v in sorted(m["floor"].items()))))
PY
mkdir -p dist
tar -C "$stage" -czf "$out" .
echo "build_gpu_bundle: $out ($(du -h "$out" | cut -f1))"
