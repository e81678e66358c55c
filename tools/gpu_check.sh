#!/usr/bin/env bash
# The GPU check, for a machine with a GPU and no Bazel (ENVIRONMENT.md, "The GPU machine"):
# from a tree that carries dist/ (tools/build_wheel.sh: the wheel and hora-gpu-tests.tar.gz),
#   1. gpu      nvidia-smi and torch.cuda see a GPU (else it stops at once: "no GPU: ...")
#   2. install  a fresh venv with --system-site-packages (the machine's torch), pip install
#               --no-index dist/hora-*.whl; hora and libhora.so are the venv's; the glibc floor
#   3. pytest   every tests/gpu/test_*.py, `python -m pytest` against the installed hora
#   4. cc       the bundle's gpu-tagged Catch2 binaries, and the cuda_*/nccl_* ones that also
#               run without a GPU
#   5. bench    the bundle's GPU benchmarks (cuda_batch_copy_bench, ...) and
#               tools/bench/gpu_allreduce_bench.py under horarun -np 1 (what exists)
#   6. horovod  Horovod's pytorch_synthetic_benchmark.py, import changed
#               (examples/horovod/), on the GPU under horarun -np 1
# then a summary, one line per part, within 8 minutes (each part under its own `timeout`, all
# under one deadline). Exit 0 only when nothing failed.
# Usage: tools/gpu_check.sh [--no-gpu-ok] [--keep]
#   --no-gpu-ok  no GPU is not fatal: run what runs without one (install, imports, the cc
#                tests that run without a GPU, the CPU run of the benchmark script, the
#                listing of what would run); the GPU-only parts are reported as skipped
#   --keep       keep the work folder (venv, logs) and print its path
#   HORA_GPU_PYTHON  the interpreter whose torch the venv reuses (default: python3; with
#                    --no-gpu-ok and a python3 without torch, /usr/bin/python3)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
NO_GPU_OK=0
KEEP=0
for a in "$@"; do
  case "$a" in
    --no-gpu-ok) NO_GPU_OK=1 ;;
    --keep) KEEP=1 ;;
    *) echo "usage: tools/gpu_check.sh [--no-gpu-ok] [--keep]" >&2; exit 2 ;;
  esac
done
BUDGET_S=480
START=$(date +%s)
WORK="$(mktemp -d /tmp/hora-gpu-check.XXXXXX)"
if [ "$KEEP" = 1 ]; then echo "gpu_check: work folder $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
SUMMARY=()
FAILED=0
say() { echo "gpu_check: $*"; }
line() { SUMMARY+=("$(printf '%-8s %s' "$1" "$2")"); }
fail_line() { line "$1" "FAILED: $2"; FAILED=1; }
# seconds for a part: its own limit, cut to what is left of the budget (10 s kept for the end)
limit() { local left=$((BUDGET_S - ($(date +%s) - START) - 10)); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }
# run_part NAME SECONDS CMD...: runs CMD under timeout, output in $WORK/NAME.log (its tail on
# failure); returns CMD's status (124: timed out).
run_part() {
  local name="$1" secs; secs="$(limit "$2")"; shift 2
  timeout -k 5 "$secs" "$@" >"$WORK/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    say "$name: exit $rc$([ "$rc" = 124 ] && echo " (timed out after ${secs}s)"); its last lines:"
    tail -25 "$WORK/$name.log" | sed 's/^/    /'
  fi
  return "$rc"
}
finish() {
  echo
  echo "== gpu_check summary ($(( $(date +%s) - START ))s)"
  printf '%s\n' "${SUMMARY[@]}"
  if [ "$FAILED" = 0 ]; then echo "gpu_check: PASSED"; else echo "gpu_check: FAILED"; fi
  exit "$FAILED"
}

# ---- 1. the GPU ---------------------------------------------------------------------------
PY="${HORA_GPU_PYTHON:-python3}"
GPU=1
why=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  why="nvidia-smi is not installed (no NVIDIA driver)"
elif ! gpus="$(timeout 20 nvidia-smi -L 2>&1)" || ! grep -q '^GPU ' <<<"$gpus"; then
  why="nvidia-smi lists no GPU: $(head -1 <<<"$gpus")"
fi
if [ -z "$why" ] && ! cuda="$(timeout 60 "$PY" -c 'import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False (torch %s, CUDA %s)" % (torch.__version__, torch.version.cuda)
print("%s, torch %s, CUDA %s" % (torch.cuda.get_device_name(0), torch.__version__, torch.version.cuda))' 2>&1)"; then
  why="$PY: $(tail -1 <<<"$cuda")"
fi
if [ -n "$why" ]; then
  if [ "$NO_GPU_OK" = 0 ]; then
    echo "gpu_check: no GPU: $why (tools/gpu_check.sh --no-gpu-ok runs what runs without one)" >&2
    exit 1
  fi
  GPU=0
  line gpu "none: $why (--no-gpu-ok: the GPU-only parts are skipped)"
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then PY=/usr/bin/python3; fi
else
  line gpu "$(head -1 <<<"$gpus" | sed 's/ (UUID.*//'); $cuda"
fi
say "Python for the venv: $PY ($("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1))"

# ---- 2. install -----------------------------------------------------------------------------
VENV="$WORK/venv"
wheel="$(ls dist/hora-*.whl 2>/dev/null | tail -1)"
if [ -z "$wheel" ]; then
  fail_line install "no dist/hora-*.whl (build it with tools/build_wheel.sh and carry dist/)"
  finish
fi
floor_check() {  # the machine's glibc and libstdc++ against the wheel's floor
  "$PY" - "$wheel" <<'PY'
import json, os, re, sys, zipfile
floor = json.loads(zipfile.ZipFile(sys.argv[1]).read("hora/_bundle.json"))["floor"]
key = lambda v: tuple(int(x) for x in v.split("."))
have_glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
path = None
for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
    if os.path.exists(os.path.join(d, "libstdc++.so.6")):
        path = os.path.realpath(os.path.join(d, "libstdc++.so.6"))
        break
data = open(path, "rb").read() if path else b""
have_cxx = max((m.decode()[8:] for m in set(re.findall(rb"GLIBCXX_[0-9.]+[0-9]", data))),
               key=key, default="0")
problems = []
if key(have_glibc) < key(floor["GLIBC"][0]):
    problems.append("glibc %s < GLIBC_%s (needed by %s)" % (have_glibc, *floor["GLIBC"]))
if key(have_cxx) < key(floor["GLIBCXX"][0]):
    problems.append("libstdc++ %s has GLIBCXX_%s < GLIBCXX_%s (needed by %s)"
                    % (path, have_cxx, *floor["GLIBCXX"]))
print("glibc %s, GLIBCXX_%s; the wheel needs GLIBC_%s, GLIBCXX_%s" % (
    have_glibc, have_cxx, floor["GLIBC"][0], floor["GLIBCXX"][0]))
if problems:
    print("this machine is below the wheel's floor: " + "; ".join(problems))
    sys.exit(1)
PY
}
if ! floor="$(floor_check 2>&1)"; then
  fail_line install "$(tail -1 <<<"$floor")"
  finish
fi
# A Python without ensurepip makes the venv without pip and installs with its own pip.
if ! run_part install 120 bash -c "{ '$PY' -m venv --system-site-packages '$VENV' &&
      '$VENV/bin/python' -m pip install --no-index --disable-pip-version-check '$wheel'; } ||
    { rm -rf '$VENV' && '$PY' -m venv --system-site-packages --without-pip '$VENV' &&
      '$PY' -m pip --python '$VENV/bin/python' install --no-index --disable-pip-version-check '$wheel'; }"; then
  fail_line install "venv or pip install --no-index $wheel failed ($WORK/install.log)"
  finish
fi
# When $PY is itself a venv's, --system-site-packages reaches its base Python, not the
# site-packages holding torch: a .pth adds $PY's own site directories (after the venv's).
"$PY" -c 'import site, sys
dirs = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
print("\n".join(dirs))' > "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_gpu_check_base.pth"
if ! torch_in_venv="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>&1)"; then
  fail_line install "torch does not import in the venv over $PY: $(tail -1 <<<"$torch_in_venv")"
  finish
fi
# From here on nothing of the tree is on the Python path, and no HORA_LIBRARY.
unset PYTHONPATH HORA_LIBRARY
export PATH="$VENV/bin:$PATH" HORARUN="$VENV/bin/horarun" PYTHONDONTWRITEBYTECODE=1
where="$(cd "$WORK" && "$VENV/bin/python" -c 'import hora, hora._lib as l, hora.torch; l.lib()
print(hora.__file__, l.lib_path(), hora.version())' 2>&1)"
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
if ! grep -q "^$site/hora/__init__.py $site/hora/libhora.so " <<<"$where"; then
  fail_line install "hora does not load from the venv: $(tail -1 <<<"$where")"
  finish
fi
if ! (cd "$WORK" && run_part check_build 60 "$VENV/bin/horarun" --check-build); then
  fail_line install "horarun --check-build failed ($WORK/check_build.log)"
fi
built="$(grep -E '^(CUDA|NCCL):' "$WORK/check_build.log" | tr '\n' ' ')"
line install "passed: hora $(awk '{print $3}' <<<"$where") with torch $torch_in_venv in a fresh venv ($(basename "$wheel"), $(du -h "$wheel" | cut -f1)); $floor; horarun --check-build: ${built:-unavailable}"
# NCCL for binaries that link it: torch's nvidia-nccl wheel, else CUDA's.
NCCL_DIR="$("$VENV/bin/python" -c 'import importlib.util, os
s = importlib.util.find_spec("nvidia.nccl")
print(os.path.join(list(s.submodule_search_locations)[0], "lib") if s else "")' 2>/dev/null)"
[ -z "$NCCL_DIR" ] && [ -e /usr/local/cuda/lib64/libnccl.so.2 ] && NCCL_DIR=/usr/local/cuda/lib64
say "NCCL for the test binaries: ${NCCL_DIR:-none found}"
# with_nccl CMD...: CMD with that NCCL first on the loader's path and as HORA_NCCL_LIBRARY
with_nccl() {
  if [ -n "$NCCL_DIR" ] && [ -e "$NCCL_DIR/libnccl.so.2" ]; then
    LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      HORA_NCCL_LIBRARY="${HORA_NCCL_LIBRARY:-$NCCL_DIR/libnccl.so.2}" "$@"
  else
    "$@"
  fi
}

# ---- 3. tests/gpu ---------------------------------------------------------------------------
# counts "P passed, F failed, S skipped" from a JUnit XML file
junit_counts() {
  "$VENV/bin/python" - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("0 passed, 1 failed, 0 skipped"); sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
bad = n["failures"] + n["errors"]
print("%d passed, %d failed, %d skipped" % (n["tests"] - bad - n["skipped"], bad, n["skipped"]))
PY
}
shopt -s nullglob
gpu_tests=("$ROOT"/tests/gpu/test_*.py)
if [ ${#gpu_tests[@]} -eq 0 ]; then
  line pytest "skipped: tests/gpu/ has no test_*.py in this tree"
else
  # from the work folder: `python -m` puts the working directory on sys.path
  (cd "$WORK" && run_part pytest 240 "$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider \
    --junitxml="$WORK/pytest.xml" "${gpu_tests[@]}")
  rc=$?
  counts="$(junit_counts "$WORK/pytest.xml")"
  [ "$rc" -ne 0 ] && [ "${counts#* passed, 0 failed}" != "$counts" ] && counts="${counts/0 failed/1 failed}"
  skipped_why="$(grep -E '^SKIPPED' "$WORK/pytest.log" | head -1 | sed 's/^SKIPPED \[[0-9]*\] //')"
  files="$(for f in "${gpu_tests[@]}"; do basename "$f"; done | tr '\n' ' ')"
  if [ "$rc" -ne 0 ]; then fail_line pytest "$counts (${files% })"
  else line pytest "$counts (${files% })${skipped_why:+; skip: $skipped_why}"; fi
fi

# ---- 4. the Catch2 binaries -------------------------------------------------------------------
bundle=dist/hora-gpu-tests.tar.gz
BUNDLE="$WORK/gpu-tests"
if [ ! -f "$bundle" ]; then
  line cc "skipped: no $bundle (tools/build_gpu_bundle.sh packs gpu-tagged cc_tests; none built)"
  bench_bins=()
else
  mkdir -p "$BUNDLE" && tar -C "$BUNDLE" -xzf "$bundle"
  list() { "$VENV/bin/python" -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$BUNDLE/bundle.json" "$1"; }
  mapfile -t gpu_bins < <(list tests | grep .)
  mapfile -t free_bins < <(list no_gpu_tests | grep .)
  mapfile -t bench_bins < <(list benchmarks | grep .)
  # catch2_counts LOG: "P passed, F failed" test cases from Catch2's totals
  catch2_counts() {
    local t
    t="$(grep -E '^(test cases:|All tests passed)' "$1" | tail -1)"
    if [[ "$t" =~ All\ tests\ passed.*\ ([0-9]+)\ test\ case ]]; then echo "${BASH_REMATCH[1]} 0"
    elif [[ "$t" =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ passed\ \|\ *([0-9]+)\ failed ]]; then
      echo "${BASH_REMATCH[2]} ${BASH_REMATCH[3]}"
    elif [[ "$t" =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ failed ]]; then echo "0 ${BASH_REMATCH[2]}"
    else echo "0 1"; fi
  }
  P=0; F=0; S=0; names=(); bad=()
  run_bins() {  # run_bins on|off BIN...: "off" lists the binary's cases and counts them skipped
    local mode="$1"; shift
    for b in "$@"; do
      local n; n="$(basename "$b")"; names+=("$n")
      if [ "$mode" = off ]; then
        local k; k="$("$BUNDLE/$b" --list-test-names-only 2>/dev/null | grep -c .)"
        S=$((S + k)); say "would run $n ($k cases): needs a GPU"
        continue
      fi
      with_nccl run_part "cc_$n" 120 "$BUNDLE/$b"
      local rc=$? p f; read -r p f < <(catch2_counts "$WORK/cc_$n.log")
      [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
      P=$((P + p)); F=$((F + f)); [ "$f" -ne 0 ] && bad+=("$n")
    done
  }
  run_bins "$([ "$GPU" = 1 ] && echo on || echo off)" "${gpu_bins[@]}"
  run_bins on "${free_bins[@]}"
  text="$P passed, $F failed, $S skipped (${names[*]:-no binaries in the bundle})"
  if [ "$F" -ne 0 ]; then fail_line cc "$text; failing: ${bad[*]}"; else line cc "$text"; fi
fi

# ---- 5. the GPU benchmarks ----------------------------------------------------------------------
benches=()
# bench_line NAME RC LOG: the benchmark's result lines (`SUMMARY ...`, `GPU_..._BENCH ...`,
# also under horarun's `[0]<stdout>: ` prefix), else its last line. A failed run, or a result
# line that says result=FAIL (below its target), fails the part.
bench_line() {
  local s; s="$(grep -E '^(\[[0-9]+\]<stdout>: )?(SUMMARY|[A-Z_]+_BENCH) ' "$3" |
                sed -E 's/^\[[0-9]+\]<stdout>: //' | tr '\n' ' ')"
  [ -z "$s" ] && s="$(grep -v '^\s*$' "$3" | tail -1)"
  if [ "$2" -ne 0 ]; then FAILED=1; benches+=("$1 FAILED (exit $2): $s")
  elif grep -q 'result=FAIL' <<<"$s"; then FAILED=1; benches+=("$1 BELOW TARGET: $s")
  else benches+=("$1: $s"); fi
}
if [ "$GPU" = 1 ]; then
  for b in "${bench_bins[@]}"; do
    n="$(basename "$b")"
    with_nccl run_part "bench_$n" 150 "$BUNDLE/$b"
    bench_line "$n" $? "$WORK/bench_$n.log"
  done
  [ ${#bench_bins[@]} -eq 0 ] && benches+=("no benchmark binary in the bundle (cuda_batch_copy_bench missing)")
  if [ -f tools/bench/gpu_allreduce_bench.py ]; then
    run_part bench_allreduce 150 "$VENV/bin/horarun" -np 1 "$VENV/bin/python" tools/bench/gpu_allreduce_bench.py
    bench_line gpu_allreduce_bench $? "$WORK/bench_allreduce.log"
  else
    benches+=("tools/bench/gpu_allreduce_bench.py missing: not run")
  fi
  line bench "$(IFS='|'; echo "${benches[*]}" | sed 's/|/ | /g')"
else
  would=("${bench_bins[@]}")
  [ -f tools/bench/gpu_allreduce_bench.py ] && would+=("tools/bench/gpu_allreduce_bench.py")
  line bench "skipped (no GPU); would run: ${would[*]:-nothing (no benchmark exists in this tree)}"
fi

# ---- 6. Horovod's synthetic benchmark -----------------------------------------------------------
bench_py=examples/horovod/pytorch_synthetic_benchmark.py
extra_path=""
tv_note=""
if ! "$VENV/bin/python" -c "import torchvision" >/dev/null 2>&1; then
  extra_path="$ROOT/examples/horovod/no_torchvision"
  tv_note="; torchvision missing: models from examples/resnet_shapes.py (same shapes)"
fi
if [ "$GPU" = 1 ]; then
  args=(--model resnet50 --batch-size 64 --num-warmup-batches 5 --num-batches-per-iter 10 --num-iters 5)
else
  args=(--no-cuda --model resnet18 --batch-size 2 --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 1)
fi
PYTHONPATH="$extra_path" run_part horovod 180 "$VENV/bin/horarun" -np 1 "$VENV/bin/python" "$bench_py" "${args[@]}"
rc=$?
result="$(grep -E 'Img/sec per|Total img/sec' "$WORK/horovod.log" | sed 's/^\[0\]<stdout>: //' | tr '\n' ' ')"
if [ "$rc" -ne 0 ] || [ -z "$result" ]; then
  fail_line horovod "exit $rc: $(grep -v '^\s*$' "$WORK/horovod.log" | tail -1)$tv_note"
else
  line horovod "passed ($([ "$GPU" = 1 ] && echo "GPU, ${args[*]}" || echo "CPU, no GPU: ${args[*]}")): $result$tv_note"
fi
finish
