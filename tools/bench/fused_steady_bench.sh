#!/usr/bin/env bash
# Per-parameter allreduces (DistributedOptimizer with HORA_BUCKET_CAP_MB=0: Horovod's way, the
# coordinator fuses what is ready together) with the steady path on (HORA_STEADY=auto: the
# fused tensors are learned one by one) and off (the coordinator every step), next to
# DDP(gradient_as_bucket_view) in the same jobs: tools/bench/grad_sync_bench.py, per model.
# docs/benchmarks-steady.md "Fused buckets".
#   tools/bench/fused_steady_bench.sh [--layout 1xN | HxR] [--models resnet50,small200]
#                                     [--steps N]
# 1xN: N ranks on this host; HxR: H netns hosts (../shared/tools/netns-kit) x R ranks, over
# ssh from the first. Needs root for netns, Debian's torch, and the hora package
# (tools/install.sh) built. Nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
LAYOUT=1x2
MODELS=resnet50,small200
STEPS=6
while [ $# -gt 0 ]; do
  case "$1" in
    --layout) LAYOUT="$2"; shift ;;
    --models) MODELS="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    *) echo "usage: tools/bench/fused_steady_bench.sh [--layout HxR] [--models M,...]" \
         "[--steps N]" >&2; exit 2 ;;
  esac
  shift
done
[[ "$LAYOUT" =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "fused_steady_bench: bad layout $LAYOUT" >&2; exit 2; }
HOSTS="${BASH_REMATCH[1]}" PER="${BASH_REMATCH[2]}"
BENCH=(/usr/bin/python3 tools/bench/grad_sync_bench.py --models "$MODELS" --methods hora,ddp_view
       --steps "$STEPS" --rounds 2)
PY_PATH="$PWD/bindings/python:$PWD/tools/bench"
if [ "$HOSTS" = 1 ]; then
  run() { env HORA_STEADY="$1" HORA_BUCKET_CAP_MB=0 PYTHONPATH="$PY_PATH" \
            tools/launcher/horarun -np "$PER" -x MASTER_PORT=29541 "${BENCH[@]}"; }
else
  . tools/bench/netns_hosts.sh
  netns_hosts fused_steady_bench hfs 10.200.81 "$HOSTS"
  read -r -a NAMES <<<"$NK_HOSTS"
  H=""
  for h in "${NAMES[@]:0:$HOSTS}"; do H="$H${H:+,}$h:$PER"; done
  run() { "$KIT/nk-exec" "${NAMES[0]}" env HORA_STEADY="$1" HORA_BUCKET_CAP_MB=0 \
            tools/launcher/horarun --ssh-config-file "$NK_SSH_CONFIG" -H "$H" \
            -np $((HOSTS * PER)) -x PYTHONPATH="$PY_PATH" -x HORA_STEADY -x HORA_BUCKET_CAP_MB \
            -x MASTER_PORT=29541 "${BENCH[@]}"; }
fi
echo "fused_steady_bench: layout $LAYOUT, models $MODELS, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for steady in auto off; do
  run "$steady" 2>&1 | grep -E '^\[0\]<stdout>: (#|\| hora |\| ddp_view |hora / )' |
    sed "s/^\[0\]<stdout>: /HORA_STEADY=$steady: /"
done
