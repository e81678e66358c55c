#!/usr/bin/env bash
# Runs the allreduce benchmarks side by side in one run and writes the report:
#   Hora (through hora.h, under horarun), torch.distributed gloo, Open MPI MPI_Allreduce over
#   shared memory (its default) and over TCP loopback; for 2 and 4 ranks. On request
#   (--only "hora-mpi ..."): Hora on its mpi backend, under horarun --mpi.
# Then tools/bench/combine.py merges the CSV rows into a markdown report on stdout and in
# docs/benchmarks.md.
#
#   tools/bench/run_allreduce_bench.sh [--np "2 4"] [--max-bytes 256M] [--min-bytes 4]
#       [--step-factor 4] [--target-seconds 0.6] [--lat-iters 2000] [--out-dir DIR]
#       [--report docs/benchmarks.md | --no-report] [--no-build] [--quick]
#       [--only "hora hora-mpi torch-gloo mpi-shm mpi-tcp"] [--notes FILE] [--appendix FILE]
#       [--bind-to none|core]
#
# --bind-to core: every implementation's ranks are bound alike, rank k of N to the k-th of N
# equal slices of the CPUs (horarun --bind-to core, the torch bench's spawner, mpirun's own
# --bind-to core). Default none: nothing is bound (the scheduler places every thread).
#
# --quick: tiny sizes (4 B to 64 KiB), short timing, no report file (a smoke run).
# The full default run takes about 5-8 minutes on 2 cores. Nothing here asserts a time.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

NPS="2 4"
MAX_BYTES=256M
MIN_BYTES=4
STEP=4
TARGET=0.6
LAT_ITERS=2000
OUT_DIR=""
REPORT=docs/benchmarks.md
BUILD=1
ONLY="hora torch-gloo mpi-shm mpi-tcp"
BIND=none
NOTES=""
APPENDIX=tools/bench/allreduce_findings.md  # appended to the report when present
PREAMBLE=""
ORIG_ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NPS="$2"; shift 2 ;;
    --max-bytes) MAX_BYTES="$2"; shift 2 ;;
    --min-bytes) MIN_BYTES="$2"; shift 2 ;;
    --step-factor) STEP="$2"; shift 2 ;;
    --target-seconds) TARGET="$2"; shift 2 ;;
    --lat-iters) LAT_ITERS="$2"; shift 2 ;;
    --out-dir) OUT_DIR="$2"; shift 2 ;;
    --report) REPORT="$2"; shift 2 ;;
    --no-report) REPORT=""; shift ;;
    --no-build) BUILD=0; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    --bind-to) BIND="$2"; shift 2 ;;
    --notes) NOTES="$2"; shift 2 ;;
    --appendix) APPENDIX="$2"; shift 2 ;;
    --preamble) PREAMBLE="$2"; shift 2 ;;
    --quick) MAX_BYTES=64K; TARGET=0.05; LAT_ITERS=200; REPORT=""; APPENDIX=""; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "run_allreduce_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

PY=/usr/bin/python3
[ -n "$OUT_DIR" ] || OUT_DIR=$(mktemp -d /tmp/hora_allreduce_bench.XXXXXX)
mkdir -p "$OUT_DIR"
log() { echo "[run_allreduce_bench] $*" >&2; }

HORA_BIN="${HORA_BENCH_BIN:-bazel-bin/tools/bench/hora_allreduce_bench}"
MPI_BIN="${MPI_BENCH_BIN:-bazel-bin/tools/bench/mpi_allreduce_bench}"
if [ "$BUILD" = 1 ]; then
  log "building //tools/bench:hora_allreduce_bench //tools/bench:mpi_allreduce_bench"
  bazel build //tools/bench:hora_allreduce_bench //tools/bench:mpi_allreduce_bench >&2 || {
    log "build failed"; exit 1; }
fi

COMMON=(--csv --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" --step-factor "$STEP"
        --target-seconds "$TARGET" --lat-iters "$LAT_ITERS")
case "$BIND" in none|core) ;; *) echo "run_allreduce_bench.sh: --bind-to none|core" >&2; exit 2 ;; esac
MPIRUN=(mpirun --allow-run-as-root --bind-to "$BIND")
mpirun_for() {  # --oversubscribe only when there are more ranks than cores
  if [ "$1" -gt "$(nproc)" ]; then echo --oversubscribe; fi
}
MPI_TCP=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
LIMIT=${BENCH_TIMEOUT_SECONDS:-300}  # per benchmark process group

failures=0
run_one() {  # run_one NAME NP CMD...
  local name="$1" np="$2"; shift 2
  local out="$OUT_DIR/${name}_np${np}.csv" err="$OUT_DIR/${name}_np${np}.log"
  local start=$(date +%s%N)
  log "$name, $np ranks: $*"
  timeout -k 10 "$LIMIT" "$@" >"$out" 2>"$err"
  local rc=$?
  local secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [ $rc -ne 0 ]; then
    log "$name, $np ranks: FAILED (exit $rc after ${secs}s); last lines of $err:"
    tail -5 "$err" >&2
    failures=$((failures + 1))
    echo "- $name with $np ranks failed (exit $rc); its rows are missing or partial." >>"$OUT_DIR/failures.md"
  else
    log "$name, $np ranks: done in ${secs}s"
  fi
}

t_start=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for np in $NPS; do
  MPI_EXTRA=$(mpirun_for "$np")
  for impl in $ONLY; do
    case "$impl" in
      hora) run_one hora "$np" "$PY" tools/launcher/horarun -np "$np" --bind-to "$BIND" "$HORA_BIN" \
              "${COMMON[@]}" ;;
      # Hora on its mpi backend: the whole job under mpirun (horarun --mpi), Open MPI's defaults
      # (vader between local ranks), as the mpi-shm row.
      hora-mpi) run_one hora-mpi "$np" "$PY" tools/launcher/horarun -np "$np" --mpi --bind-to "$BIND" \
                  ${MPI_EXTRA:+--mpi-args "$MPI_EXTRA"} -x HORA_CPU_OPERATIONS=mpi "$HORA_BIN" \
                  --impl hora-mpi "${COMMON[@]}" ;;
      torch-gloo) run_one torch-gloo "$np" "$PY" tools/bench/torch_gloo_allreduce_bench.py \
                    --np "$np" --bind-to "$BIND" "${COMMON[@]}" ;;
      mpi-shm) run_one mpi-shm "$np" "${MPIRUN[@]}" $(mpirun_for "$np") -np "$np" "$MPI_BIN" --impl mpi-shm "${COMMON[@]}" ;;
      mpi-tcp) run_one mpi-tcp "$np" "${MPIRUN[@]}" $(mpirun_for "$np") "${MPI_TCP[@]}" -np "$np" "$MPI_BIN" \
                 --impl mpi-tcp "${COMMON[@]}" ;;
      *) log "unknown implementation $impl"; exit 2 ;;
    esac
  done
done
t_total=$(( $(date +%s) - t_start ))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

notes="$OUT_DIR/notes.md"
{
  echo "- Sizes $MIN_BYTES B to $MAX_BYTES (x$STEP), about $TARGET s of timed iterations per size" \
       "(at least 3 iterations), $LAT_ITERS latency iterations; ranks: $NPS; CPU binding: $BIND; the whole run took" \
       "${t_total} s."
  echo "- Load average (1/5/15 min) at the start: $load_start; at the end: $load_end. The machine" \
       "is shared: compare the ratios within this run, not absolute times across runs."
  echo "- More ranks than cores (4 on 2) for np=4: every implementation is oversubscribed alike" \
       "(Open MPI with --oversubscribe, which makes it yield when idle)."
  echo "- Raw rows: $OUT_DIR/*.csv, logs: $OUT_DIR/*.log."
  [ -f "$OUT_DIR/failures.md" ] && cat "$OUT_DIR/failures.md"
  [ -n "$NOTES" ] && [ -f "$NOTES" ] && cat "$NOTES"
} >"$notes"

cmd="tools/bench/run_allreduce_bench.sh${ORIG_ARGS:+ $ORIG_ARGS}"
combine=("$PY" tools/bench/combine.py --csv-dir "$OUT_DIR" --command "$cmd" --notes "$notes")
[ -n "$REPORT" ] && combine+=(--out "$REPORT")
[ -n "$APPENDIX" ] && [ -f "$APPENDIX" ] && combine+=(--appendix "$APPENDIX")
[ -n "$PREAMBLE" ] && combine+=(--preamble "$PREAMBLE")
"${combine[@]}" || failures=$((failures + 1))
echo
log "raw results in $OUT_DIR; ${t_total} s; ${failures} failure(s)${REPORT:+; report written to $REPORT}"
[ "$failures" -eq 0 ]
