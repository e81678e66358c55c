#!/bin/bash
# The steady-path report (docs/benchmarks-steady.md): 4-byte allreduce latency through the
# C API (hora_allreduce_bench) and through hora.torch's hvd.allreduce next to torch gloo's
# dist.all_reduce (steady_latency_bench.py), each with HORA_STEADY=off (every operation asks
# the coordinator) and HORA_STEADY=auto (the steady path), 2 ranks on this host, plus the CPU
# an idle job uses while its ranks wait in synchronize. Markdown on stdout, raw output in
# OUT_DIR.
#
#   bazel build -c opt //tools/bench:hora_allreduce_bench //bindings/c:libhora.so
#   BIN=$(bazel info -c opt bazel-bin) tools/bench/steady_bench.sh [OUT_DIR]
set -euo pipefail
BIN=${BIN:-bazel-bin}
OUT=${1:-/tmp/steady-bench}
LAT_ITERS=${LAT_ITERS:-5000}
PY_ITERS=${PY_ITERS:-1000}
ROUNDS=${ROUNDS:-3}
IDLE=${IDLE:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export HORA_LIBRARY=${HORA_LIBRARY:-$BIN/bindings/c/libhora.so}
export PYTHONPATH="$ROOT/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
for mode in off auto; do
  HORA_STEADY=$mode "$ROOT/tools/launcher/horarun" -np 2 "$BIN/tools/bench/hora_allreduce_bench" \
    --no-bandwidth --lat-iters "$LAT_ITERS" > "$OUT/c_$mode.txt" 2>&1
  HORA_STEADY=$mode "$ROOT/tools/launcher/horarun" -np 2 /usr/bin/python3 \
    "$HERE/steady_latency_bench.py" --iters "$PY_ITERS" --rounds "$ROUNDS" \
    --idle-seconds "$IDLE" > "$OUT/py_$mode.txt" 2>&1
done
python3 - "$OUT" <<'PY'
import datetime, os, platform, re, sys
out = sys.argv[1]
def c_api(mode):
    t = open(f"{out}/c_{mode}.txt").read()
    m = re.search(r"latency, enqueue to done, (\d+) iterations: median ([0-9.]+) us, p90 ([0-9.]+) us", t)
    if not m: sys.exit(f"no latency line in {out}/c_{mode}.txt:\n{t[-2000:]}")
    return float(m.group(2)), float(m.group(3))
def py(mode):
    t = open(f"{out}/py_{mode}.txt").read()
    m = re.search(r"RESULT (.*)", t)
    if not m: sys.exit(f"no RESULT line in {out}/py_{mode}.txt:\n{t[-2000:]}")
    return dict(kv.split("=", 1) for kv in m.group(1).split())
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
load = open("/proc/loadavg").read().split()[:3]
print(f"- Date: {datetime.datetime.now():%Y-%m-%d %H:%M}; machine: {os.cpu_count()} cores, {cpu}, "
      f"Linux {platform.release()}; load average after the run: {' '.join(load)}")
c = {m: c_api(m) for m in ("off", "auto")}
p = {m: py(m) for m in ("off", "auto")}
print()
print("| 4-byte allreduce, 2 ranks | HORA_STEADY=off median / p90 (us) | auto median / p90 (us) | auto / off (median) |")
print("|---|---|---|---|")
print(f"| C API (hora_allreduce_bench) | {c['off'][0]:.1f} / {c['off'][1]:.1f} | {c['auto'][0]:.1f} / {c['auto'][1]:.1f} | {c['auto'][0] / c['off'][0]:.3f} |")
ho, ha = p["off"], p["auto"]
print(f"| hvd.allreduce (hora.torch) | {float(ho['hvd_median_us']):.1f} / {float(ho['hvd_p90_us']):.1f} | {float(ha['hvd_median_us']):.1f} / {float(ha['hvd_p90_us']):.1f} | {float(ha['hvd_median_us']) / float(ho['hvd_median_us']):.3f} |")
print(f"| hvd.allreduce without a name | {float(ho['unnamed_median_us']):.1f} / {float(ho['unnamed_p90_us']):.1f} | {float(ha['unnamed_median_us']):.1f} / {float(ha['unnamed_p90_us']):.1f} | {float(ha['unnamed_median_us']) / float(ho['unnamed_median_us']):.3f} |")
print(f"| torch gloo dist.all_reduce (same jobs) | {float(ho['gloo_median_us']):.1f} / {float(ho['gloo_p90_us']):.1f} | {float(ha['gloo_median_us']):.1f} / {float(ha['gloo_p90_us']):.1f} | |")
print(f"| hvd.allreduce / gloo, median (p90) | {float(ho['ratio_median']):.3f} ({float(ho['ratio_p90']):.3f}) | {float(ha['ratio_median']):.3f} ({float(ha['ratio_p90']):.3f}) | |")
print(f"| unnamed hvd.allreduce / gloo, median | {float(ho['unnamed_ratio_median']):.3f} | {float(ha['unnamed_ratio_median']):.3f} | |")
print()
print(f"Steady path counters on rank 0 after the hvd run (auto): fast={ha['fast']} slow={ha['slow']} entries={ha['entries']}; (off): fast={ho['fast']}.")
print(f"Idle: ranks waiting in synchronize while the last rank sleeps, CPU in % of one core: "
      f"off {ho['idle_cpu_pct_waiting']} (sleeper {ho['idle_cpu_pct_sleeper']}), "
      f"auto {ha['idle_cpu_pct_waiting']} (sleeper {ha['idle_cpu_pct_sleeper']}).")
PY
