#!/bin/bash
# The shm benchmark report: shm_allreduce_bench (the shm and Gloo communicators, measured in
# the same run) and Open MPI's MPI_Allreduce (its default: shared memory), for 2 and 4 ranks;
# prints a markdown report (docs/benchmarks-shm.md) on stdout, raw CSVs in OUT_DIR.
#
#   bazel build -c opt //tools/bench:shm_allreduce_bench //tools/bench:mpi_allreduce_bench
#   tools/bench/shm_run_bench.sh [OUT_DIR] > docs/benchmarks-shm.md
set -euo pipefail
BIN=${BIN:-bazel-bin/tools/bench}
OUT=${1:-/tmp/shm-bench}
NPS=${NPS:-"2 4"}
TARGET=${TARGET:-0.5}
mkdir -p "$OUT"
cores=$(nproc)
for np in $NPS; do
  "$BIN/shm_allreduce_bench" --np "$np" --csv --target-seconds "$TARGET" --lat-iters 5000 \
    2>/dev/null > "$OUT/shm_$np.csv"
  over=""
  [ "$np" -gt "$cores" ] && over="--oversubscribe"
  mpirun --allow-run-as-root --bind-to none $over -np "$np" "$BIN/mpi_allreduce_bench" --csv \
    --impl mpi-shm --target-seconds "$TARGET" --lat-iters 5000 2>/dev/null > "$OUT/mpi_$np.csv"
done
python3 - "$OUT" "$NPS" "$*" <<'PY'
import csv, os, sys, datetime, platform
out, nps = sys.argv[1], sys.argv[2].split()
def size(b):
    b = int(b)
    for unit, k in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << k: return f"{b >> k} {unit}"
    return f"{b} B"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"- Date: {datetime.datetime.now():%Y-%m-%d %H:%M}; machine: {os.cpu_count()} cores, {cpu}, Linux {platform.release()}")
for np in nps:
    shm, lat = {}, {}
    for row in csv.reader(open(f"{out}/shm_{np}.csv")):
        if not row or row[0] == "bytes" or row[0][:1] in "#[": continue
        if row[0] == "lat": lat[row[1]] = (float(row[3]), float(row[4])); continue
        shm[int(row[0])] = [float(x) for x in row[1:5]]
    mpi = {}
    for row in csv.reader(open(f"{out}/mpi_{np}.csv")):
        if row and row[0] == "bw": mpi[int(row[3])] = (float(row[8]), float(row[10]))
        if row and row[0] == "lat": lat["Open MPI"] = (float(row[11]), float(row[12]))
    print(f"\n## Bandwidth, {np} ranks\n")
    print("| size | shm time (us) | shm busbw (GB/s) | gloo time (us) | gloo busbw (GB/s) | Open MPI time (us) | Open MPI busbw (GB/s) | shm / gloo busbw | shm / Open MPI busbw |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in sorted(shm):
        st, sb, gt, gb = shm[b]
        mt, mb = mpi.get(b, (float("nan"), float("nan")))
        print(f"| {size(b)} | {st:.2f} | {sb:.3f} | {gt:.1f} | {gb:.3f} | {mt:.2f} | {mb:.3f} | {gt / st:.2f}x | {mt / st:.2f}x |")
    print(f"\n4-byte allreduce latency, {np} ranks (median / p90, us): " + "; ".join(
        f"{k} {v[0]:.2f} / {v[1]:.2f}" for k, v in lat.items()))
PY
