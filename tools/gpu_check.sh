#!/usr/bin/env bash
# The GPU check: everything a lent GPU machine (ENVIRONMENT.md: no Bazel, no network) can tell
# about Hora, in one run that fits one lease. From a tree that carries dist/
# (tools/build_wheel.sh: the wheel and hora-gpu-tests.tar.gz), the parts, most informative
# first, each under its own `timeout`, all under one budget:
#   gpu       nvidia-smi and torch.cuda see a GPU (else it stops at once: "no GPU: ...")
#   baseline  torch alone (tools/bench/torch_cuda_baseline.py): copy bandwidths and NCCL's
#             all_reduce, to tell the sandbox from Hora
#   install   a fresh venv over the machine's torch, pip install --no-index dist/hora-*.whl;
#             hora and libhora.so are the venv's; the glibc floor; horarun --check-build
#   cc        the bundle's Catch2 binaries: the batched copy kernels' test and benchmark
#             first, then the NCCL backend's tests, then those that also run without a GPU
#   pytest    tests/gpu/test_*.py against the installed hora: hora.torch on CUDA at 1 rank
#             (NCCL) and at 2 and 4 ranks on the one GPU (the staged data plane), the
#             stream-order probes, DistributedOptimizer
#   bench     tools/bench/gpu_allreduce_bench.py under horarun -np 1 (hora vs torch nccl)
#   horovod   Horovod's pytorch_synthetic_benchmark.py (import changed) on the GPU, beside
#             tools/bench/ddp_synthetic_benchmark.py --cuda (DDP over nccl), world size 1
# Exit 0 only when nothing failed.
#
# What it learns goes to at most 7 files in the log folder: summary.txt (one line per part,
# rewritten after every part, so a run cut short still says how far it came), then
# baseline.log, install.log, cc.log, pytest.log, bench.log, horovod.log (each cut to its last
# 8 MiB). The log folder is --out DIR, else $OUT (the device tool's folder that comes back),
# else the work folder.
#
# Usage: tools/gpu_check.sh [--no-gpu-ok] [--keep] [--budget SECONDS] [--parts LIST] [--out DIR]
#   --no-gpu-ok  no GPU is not fatal: run what runs without one (install, imports, the cc
#                tests that run without a GPU, the listing of what would run); the GPU-only
#                parts are reported as skipped
#   --keep       keep the work folder (venv, logs) and print its path
#   --budget S   the whole run's seconds (default 480, at most 540): give the device tool's
#                run a timeout_s of at least S + 60
#   --parts L    only these parts, comma-separated (gpu and install always run), e.g.
#                --parts cc,pytest for a second try
#   HORA_GPU_PYTHON  the interpreter whose torch the venv reuses (default: /opt/torch/.venv's
#                    python3 where it exists, else python3; with --no-gpu-ok and a python3
#                    without torch, /usr/bin/python3)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
NO_GPU_OK=0
KEEP=0
BUDGET_S=480
PARTS="baseline,cc,pytest,bench,horovod"
LOGS="${OUT:-}"
usage() { echo "usage: tools/gpu_check.sh [--no-gpu-ok] [--keep] [--budget SECONDS] [--parts LIST] [--out DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --no-gpu-ok) NO_GPU_OK=1 ;;
    --keep) KEEP=1 ;;
    --budget) [ $# -ge 2 ] || usage; BUDGET_S="$2"; shift ;;
    --parts) [ $# -ge 2 ] || usage; PARTS="$2"; shift ;;
    --out) [ $# -ge 2 ] || usage; LOGS="$2"; shift ;;
    *) usage ;;
  esac
  shift
done
if ! [[ "$BUDGET_S" =~ ^[0-9]+$ ]] || [ "$BUDGET_S" -lt 60 ] || [ "$BUDGET_S" -gt 540 ]; then
  echo "gpu_check: --budget $BUDGET_S: give 60 to 540 seconds" >&2; exit 2
fi
for p in ${PARTS//,/ }; do
  case "$p" in baseline|cc|pytest|bench|horovod) ;;
    *) echo "gpu_check: --parts: no part '$p' (baseline, cc, pytest, bench, horovod)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$PARTS," == *",$1,"* ]]; }
START=$(date +%s)
WORK="$(mktemp -d /tmp/hora-gpu-check.XXXXXX)"
if [ "$KEEP" = 1 ]; then echo "gpu_check: work folder $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
[ -z "$LOGS" ] && LOGS="$WORK/logs"
mkdir -p "$LOGS" || { echo "gpu_check: cannot make the log folder $LOGS" >&2; exit 2; }
SUMMARY=()
FAILED=0
say() { echo "gpu_check: $*"; }
write_summary() {
  { echo "== gpu_check summary ($(( $(date +%s) - START ))s of ${BUDGET_S}s; $(date -u '+%Y-%m-%d %H:%M UTC'))"
    printf '%s\n' "${SUMMARY[@]}"; } >"$LOGS/summary.txt"
}
line() { SUMMARY+=("$(printf '%-8s %s' "$1" "$2")"); write_summary; }
fail_line() { line "$1" "FAILED: $2"; FAILED=1; }
# seconds for a part: its own limit, cut to what is left of the budget (10 s kept for the end)
limit() { local left=$((BUDGET_S - ($(date +%s) - START) - 10)); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }
# run_part NAME GROUP SECONDS CMD...: runs CMD under timeout, output in $WORK/NAME.log, also
# appended to the log folder's GROUP.log under a header (cut to its last 8 MiB); its tail is
# printed on failure. Returns CMD's status (124: timed out).
run_part() {
  local name="$1" group="$2" secs; secs="$(limit "$3")"; shift 3
  local t0; t0=$(date +%s)
  timeout -k 5 "$secs" "$@" >"$WORK/$name.log" 2>&1
  local rc=$?
  { echo "==== $name: exit $rc after $(( $(date +%s) - t0 ))s (limit ${secs}s): $*"
    cat "$WORK/$name.log"; echo; } >>"$LOGS/$group.log"
  if [ "$(stat -c %s "$LOGS/$group.log")" -gt $((8 << 20)) ]; then
    tail -c $((8 << 20)) "$LOGS/$group.log" >"$WORK/cut" && mv "$WORK/cut" "$LOGS/$group.log"
  fi
  if [ "$rc" -ne 0 ]; then
    say "$name: exit $rc$([ "$rc" = 124 ] && echo " (timed out after ${secs}s)"); its last lines:"
    tail -25 "$WORK/$name.log" | sed 's/^/    /'
  fi
  return "$rc"
}
finish() {
  write_summary
  echo
  cat "$LOGS/summary.txt"
  if [ "$FAILED" = 0 ]; then echo "gpu_check: PASSED"; else echo "gpu_check: FAILED"; fi
  echo "gpu_check: logs in $LOGS"
  exit "$FAILED"
}

# ---- gpu ------------------------------------------------------------------------------------
if [ -n "${HORA_GPU_PYTHON:-}" ]; then PY="$HORA_GPU_PYTHON"
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=python3; fi
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
    line gpu "none: $why"
    exit 1
  fi
  GPU=0
  line gpu "none: $why (--no-gpu-ok: the GPU-only parts are skipped)"
  if ! "$PY" -c "import torch" >/dev/null 2>&1; then PY=/usr/bin/python3; fi
else
  line gpu "$(head -1 <<<"$gpus" | sed 's/ (UUID.*//'); $cuda; driver $(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi
say "Python for the venv: $PY ($("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1))"
export PYTHONUNBUFFERED=1 HORA_TEST_EXPECT_GPU="$GPU"

# tagged_part PART TAG SECONDS PREFIX CMD...: a part that needs the GPU and whose result is the
# last line of CMD's output holding TAG (anything before TAG, horarun's "[0]<stdout>: ", is
# dropped), shown after PREFIX; a failed run or no such line fails the part.
tagged_part() {
  local part="$1" tag="$2" secs="$3" prefix="$4" rc s; shift 4
  if [ "$GPU" != 1 ]; then line "$part" "skipped (no GPU)"; return; fi
  run_part "$part" "$part" "$secs" "$@"
  rc=$?
  s="$(grep -E "$tag " "$WORK/$part.log" | sed -E "s/.*$tag //" | tail -1)"
  if [ "$rc" -ne 0 ] || [ -z "$s" ]; then
    fail_line "$part" "exit $rc: $(grep -v '^\s*$' "$WORK/$part.log" | tail -1)"
  else
    line "$part" "$prefix$s"
  fi
}

# ---- baseline: torch alone ------------------------------------------------------------------
want baseline && tagged_part baseline TORCH_CUDA_BASELINE 90 "" "$PY" tools/bench/torch_cuda_baseline.py

# ---- install ---------------------------------------------------------------------------------
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
if ! run_part install install 120 bash -c "{ '$PY' -m venv --system-site-packages '$VENV' &&
      '$VENV/bin/python' -m pip install --no-index --disable-pip-version-check '$wheel'; } ||
    { rm -rf '$VENV' && '$PY' -m venv --system-site-packages --without-pip '$VENV' &&
      '$PY' -m pip --python '$VENV/bin/python' install --no-index --disable-pip-version-check '$wheel'; }"; then
  fail_line install "venv or pip install --no-index $wheel failed (install.log)"
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
if ! (cd "$WORK" && run_part check_build install 60 "$VENV/bin/horarun" --check-build); then
  fail_line install "horarun --check-build failed (install.log)"
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

# ---- cc: the Catch2 binaries ------------------------------------------------------------------
bundle=dist/hora-gpu-tests.tar.gz
BUNDLE="$WORK/gpu-tests"
bench_bins=()
if want cc; then
  if [ ! -f "$bundle" ]; then
    fail_line cc "no $bundle (tools/build_gpu_bundle.sh packs the gpu-tagged cc_tests)"
  else
    mkdir -p "$BUNDLE" && tar -C "$BUNDLE" -xzf "$bundle"
    list() { "$VENV/bin/python" -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$BUNDLE/bundle.json" "$1"; }
    mapfile -t gpu_bins < <(list tests | grep .)
    mapfile -t free_bins < <(list no_gpu_tests | grep .)
    mapfile -t bench_bins < <(list benchmarks | grep .)
    # The kernels first (their test, then their bandwidth), then the rest.
    ordered=()
    for b in "${gpu_bins[@]}"; do [[ "$b" == *cuda_batch_copy* ]] && ordered+=("$b"); done
    for b in "${gpu_bins[@]}"; do [[ "$b" != *cuda_batch_copy* ]] && ordered+=("$b"); done
    # catch2_counts LOG: "P F" test cases from Catch2's totals
    catch2_counts() {
      local t
      t="$(grep -E '^(test cases:|All tests passed)' "$1" | tail -1)"
      if [[ "$t" =~ All\ tests\ passed.*\ ([0-9]+)\ test\ case ]]; then echo "${BASH_REMATCH[1]} 0"
      elif [[ "$t" =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ passed\ \|\ *([0-9]+)\ failed ]]; then
        echo "${BASH_REMATCH[2]} ${BASH_REMATCH[3]}"
      elif [[ "$t" =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ failed ]]; then echo "0 ${BASH_REMATCH[2]}"
      else echo "0 1"; fi
    }
    P=0; F=0; S=0; names=(); bad=(); benches=()
    run_bins() {  # run_bins on|off BIN...: "off" lists the binary's cases and counts them skipped
      local mode="$1"; shift
      for b in "$@"; do
        local n; n="$(basename "$b")"; names+=("$n")
        if [ "$mode" = off ]; then
          local k; k="$("$BUNDLE/$b" --list-test-names-only 2>/dev/null | grep -c .)"
          S=$((S + k)); say "would run $n ($k cases): needs a GPU"
          continue
        fi
        with_nccl run_part "cc_$n" cc 120 "$BUNDLE/$b" --durations yes
        local rc=$? p f; read -r p f < <(catch2_counts "$WORK/cc_$n.log")
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
        P=$((P + p)); F=$((F + f)); [ "$f" -ne 0 ] && bad+=("$n")
        if [[ "$n" == cuda_batch_copy_test ]] && [ "$GPU" = 1 ]; then
          for bb in "${bench_bins[@]}"; do run_bench_bin "$bb"; done
        fi
      done
    }
    # run_bench_bin BIN: a benchmark binary; its SUMMARY line (result=PASS|BELOW) in the summary
    run_bench_bin() {
      local n; n="$(basename "$1")"
      with_nccl run_part "bench_$n" cc 150 "$BUNDLE/$1"
      local rc=$? s; s="$(grep -E '^SUMMARY ' "$WORK/bench_$n.log" | tail -1)"
      [ -z "$s" ] && s="$(grep -v '^\s*$' "$WORK/bench_$n.log" | tail -1)"
      if [ "$rc" -ne 0 ]; then FAILED=1; benches+=("$n FAILED (exit $rc): $s")
      elif grep -q 'result=BELOW\|result=FAIL' <<<"$s"; then FAILED=1; benches+=("$n BELOW TARGET: $s")
      else benches+=("$n: $s"); fi
    }
    run_bins "$([ "$GPU" = 1 ] && echo on || echo off)" "${ordered[@]}"
    run_bins on "${free_bins[@]}"
    text="$P passed, $F failed, $S skipped (${names[*]:-no binaries in the bundle})"
    if [ "$F" -ne 0 ]; then fail_line cc "$text; failing: ${bad[*]}"; else line cc "$text"; fi
    [ ${#benches[@]} -gt 0 ] && line kernels "$(IFS='|'; echo "${benches[*]}" | sed 's/|/ | /g')"
  fi
fi

# ---- pytest: tests/gpu ----------------------------------------------------------------------
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
if want pytest; then
  shopt -s nullglob
  gpu_tests=("$ROOT"/tests/gpu/test_*.py)
  if [ ${#gpu_tests[@]} -eq 0 ]; then
    fail_line pytest "tests/gpu/ has no test_*.py in this tree"
  else
    secs="$(limit 240)"
    # Each job's own timeout stays inside the part's, so that a hang is reported by the job.
    export HORA_GPU_JOB_TIMEOUT=$((secs > 60 ? secs - 30 : 30))
    # from the work folder: `python -m` puts the working directory on sys.path
    (cd "$WORK" && run_part pytest pytest "$secs" "$VENV/bin/python" -m pytest -v -rs \
      -p no:cacheprovider --junitxml="$WORK/pytest.xml" -s "${gpu_tests[@]}")
    rc=$?
    counts="$(junit_counts "$WORK/pytest.xml")"
    [ "$rc" -ne 0 ] && [ "${counts#* passed, 0 failed}" != "$counts" ] && counts="${counts/0 failed/1 failed}"
    skipped_why="$(grep -E '^SKIPPED' "$WORK/pytest.log" | head -1 | sed 's/^SKIPPED \[[0-9]*\] //')"
    failing="$(grep -E '^FAILED ' "$WORK/pytest.log" | sed -E 's/^FAILED [^:]*::([^ ]*).*/\1/' | tr '\n' ' ')"
    figures="$(grep -hE 'STAGED_BUSBW ' "$WORK/pytest.log" | sed -E 's/.*STAGED_BUSBW //' | tr '\n' ';')"
    if [ "$rc" -ne 0 ]; then fail_line pytest "$counts; failing: ${failing:-see pytest.log}"
    else line pytest "$counts${skipped_why:+; skip: $skipped_why}"; fi
    [ -n "$figures" ] && line staged "${figures%;}"
  fi
fi

# ---- bench: hora vs torch nccl at world size 1 ------------------------------------------------
want bench && tagged_part bench GPU_ALLREDUCE_BENCH 150 "hora/torch time: " \
  "$VENV/bin/horarun" -np 1 "$VENV/bin/python" tools/bench/gpu_allreduce_bench.py

# ---- horovod: the synthetic benchmark beside DDP ------------------------------------------------
if want horovod; then
  bench_py=examples/horovod/pytorch_synthetic_benchmark.py
  extra_path=""
  if ! "$VENV/bin/python" -c "import torchvision" >/dev/null 2>&1; then
    extra_path="$ROOT/examples/horovod/no_torchvision"
  fi
  if [ "$GPU" = 1 ]; then
    args=(--model resnet50 --batch-size 64 --num-warmup-batches 5 --num-batches-per-iter 10 --num-iters 5)
    ddp=(--cuda)
  else
    args=(--no-cuda --model resnet18 --batch-size 2 --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 1)
    ddp=()
  fi
  PYTHONPATH="$extra_path" run_part horovod horovod 150 "$VENV/bin/horarun" -np 1 "$VENV/bin/python" "$bench_py" "${args[@]}"
  rc=$?
  hora="$(grep -E 'Total img/sec' "$WORK/horovod.log" | sed -E 's/.*: Total/Total/' | tail -1)"
  PYTHONPATH="$extra_path" run_part ddp horovod 120 "$VENV/bin/horarun" -np 1 "$VENV/bin/python" tools/bench/ddp_synthetic_benchmark.py "${args[@]}" "${ddp[@]}"
  rc2=$?
  ddp_r="$(grep -E 'Total img/sec' "$WORK/ddp.log" | sed -E 's/.*: Total/Total/' | tail -1)"
  what="$([ "$GPU" = 1 ] && echo GPU || echo "CPU, no GPU") ${args[*]}"
  if [ "$rc" -ne 0 ] || [ -z "$hora" ]; then
    fail_line horovod "exit $rc: $(grep -v '^\s*$' "$WORK/horovod.log" | tail -1)"
  else
    line horovod "hora: $hora | DDP: ${ddp_r:-failed (exit $rc2)} ($what${extra_path:+; torchvision missing: examples/resnet_shapes.py})"
  fi
fi
finish
