#!/usr/bin/env bash
# Small-allreduce latency across hosts (issue 28; docs/benchmarks-cross-host.md "Latency"):
# on 2 network-namespace hosts (../shared/tools/netns-kit), side by side in one run:
#   - a 4-byte allreduce through hora.h (hora_allreduce_bench's latency, median and p90 of
#     the slowest rank), 1 rank per host, with the steady path (HORA_STEADY=auto: the board
#     over messages) and without it (off: every call asks rank 0's coordinator);
#   - Open MPI's MPI_Allreduce of 4 bytes over TCP on the same hosts (mpi_allreduce_bench);
#   - hvd.allreduce of 4 bytes next to torch gloo's dist.all_reduce in one job
#     (steady_latency_bench.py), at each layout HOSTSxRANKS of --layouts (default 2x1 2x2),
#     with the steady path and without it (HORA_STEADY=off): the agreement's cost per
#     operation at that scale, against the coordinator's round trip.
# Prints each tool's line and a markdown table.
#   tools/bench/cross_host_latency.sh [--lat-iters N] [--rounds R] [--layouts "2x1 2x2 4x2"]
# Needs root (namespaces), Open MPI, Debian's torch, and
# //tools/bench:hora_allreduce_bench, //tools/bench:mpi_allreduce_bench and the hora
# package (tools/install.sh) built. Nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
LAT_ITERS=2000
ROUNDS=3
LAYOUTS="2x1 2x2"
while [ $# -gt 0 ]; do
  case "$1" in
    --lat-iters) LAT_ITERS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --layouts) LAYOUTS="$2"; shift ;;
    *) echo "usage: tools/bench/cross_host_latency.sh [--lat-iters N] [--rounds R]" \
         "[--layouts \"HxR ...\"]" >&2; exit 2 ;;
  esac
  shift
done
for bin in hora_allreduce_bench mpi_allreduce_bench; do
  [ -x "bazel-bin/tools/bench/$bin" ] || {
    echo "cross_host_latency: build //tools/bench:$bin first" >&2; exit 1; }
done
. tools/bench/netns_hosts.sh
HOSTS=2
for layout in $LAYOUTS; do
  [[ "$layout" =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "cross_host_latency: bad layout $layout" >&2; exit 2; }
  [ "${BASH_REMATCH[1]}" -le "$HOSTS" ] || HOSTS="${BASH_REMATCH[1]}"
done
netns_hosts cross_host_latency hxt 10.200.78 "$HOSTS"
read -r -a ADDRS <<<"$NK_ADDRS"
read -r -a NAMES <<<"$NK_HOSTS"
A="${ADDRS[0]}" B="${ADDRS[1]}" HA="${NAMES[0]}" HB="${NAMES[1]}"
echo "cross_host_latency: hosts $HA ($A) and $HB ($B); $(nproc) cores; kernel $(uname -r)"
horarun() {  # horarun over ssh from host A; the rest of the arguments as horarun's
  "$KIT/nk-exec" "$HA" tools/launcher/horarun --ssh-config-file "$NK_SSH_CONFIG" \
    -x PYTHONPATH="$PWD/bindings/python" "$@"
}
rows=()
lat_row() {  # label, a CSV "lat," line: median (column 12) and p90 (column 13), in us
  IFS=, read -r _ _ _ _ _ _ _ _ _ _ _ median p90 _ <<<"$2"
  rows+=("| $1 | $median | $p90 |")
}
for round in $(seq "$ROUNDS"); do
  for steady in auto off; do
    out="$(horarun -np 2 -H "$HA:1,$HB:1" -x HORA_STEADY="$steady" \
      "$PWD/bazel-bin/tools/bench/hora_allreduce_bench" --csv --no-bandwidth \
      --lat-iters "$LAT_ITERS" --impl "hora-steady-$steady" 2>&1)" || { echo "$out" >&2; exit 1; }
    line="$(grep -oE 'lat,hora-steady-[a-z]+,.*' <<<"$out" | head -1)"
    echo "round $round: $line"
    lat_row "round $round: hora.h 4 B allreduce, 2x1, HORA_STEADY=$steady" "$line"
  done
  eval "mpi_args=($NK_MPIRUN_ARGS)"  # quoted words (the ssh agent) inside
  out="$("$KIT/nk-exec" "$HA" mpirun -np 2 -H "$A:1,$B:1" "${mpi_args[@]}" --mca btl self,tcp \
    "$PWD/bazel-bin/tools/bench/mpi_allreduce_bench" --csv --impl mpi-tcp --no-bandwidth \
    --lat-iters "$LAT_ITERS" 2>&1)" || { echo "$out" >&2; exit 1; }
  line="$(grep -E '^lat,mpi-tcp,' <<<"$out" | head -1)"
  echo "round $round: $line"
  lat_row "round $round: Open MPI 4 B MPI_Allreduce over TCP, 2x1" "$line"
done
for layout in $LAYOUTS; do
  hosts="${layout%x*}" ppn="${layout#*x}" hostlist=""
  for ((i = 0; i < hosts; i++)); do hostlist+="${hostlist:+,}${NAMES[$i]}:$ppn"; done
  for steady in auto off; do
    out="$(horarun -np $((hosts * ppn)) -H "$hostlist" -x MASTER_ADDR="$A" \
      -x GLOO_SOCKET_IFNAME=eth0 -x HORA_STEADY="$steady" /usr/bin/python3 \
      tools/bench/steady_latency_bench.py --rounds "$ROUNDS" --idle-seconds 1 2>&1)" ||
      { echo "$out" >&2; exit 1; }
    line="$(grep -oE 'RESULT .*' <<<"$out" | head -1)"
    echo "$layout HORA_STEADY=$steady: $line"
    get() { sed -E "s/.* $1=([^ ]+).*/\1/" <<<"$line"; }
    rows+=("| hvd.allreduce 4 B (name), $layout, HORA_STEADY=$steady | $(get hvd_median_us) | $(get hvd_p90_us) |")
    rows+=("| hvd.allreduce 4 B (no name), $layout, HORA_STEADY=$steady | $(get unnamed_median_us) | $(get unnamed_p90_us) |")
    rows+=("| torch gloo dist.all_reduce 4 B, $layout (beside $steady) | $(get gloo_median_us) | $(get gloo_p90_us) |")
    rows+=("| ratio hvd / gloo (median), $layout, HORA_STEADY=$steady | $(get ratio_median) | fast=$(get fast) slow=$(get slow) |")
  done
done
echo
echo "| measure | median us | p90 us |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
