#!/usr/bin/env bash
# Large allreduces across hosts (issue 29; docs/benchmarks-cross-host.md "The tcp backend"):
# on 2 network-namespace hosts (../shared/tools/netns-kit), at each layout HOSTSxRANKS of
# --layouts (default "2x1 2x2"), side by side in one run, busbw at 1 MiB and 64 MiB of
#   - hora.h's allreduce (hora_allreduce_bench under horarun over ssh) with each CPU backend
#     selection of --selections (default "auto gloo"; auto is tcp at one rank per host and
#     hierarchical = shm + tcp at several);
#   - Open MPI's MPI_Allreduce (mpi_allreduce_bench; --mca btl self,vader,tcp: TCP across
#     the hosts, shared memory inside one);
#   - hvd.allreduce next to torch gloo's dist.all_reduce in one job (hvd_bandwidth_bench.py).
# Prints each tool's lines and a markdown table.
#   tools/bench/cross_host_bandwidth.sh [--layouts "2x1 2x2"] [--selections "auto gloo"]
#       [--rounds R]
# Needs root (namespaces), Open MPI, Debian's torch, and //tools/bench:hora_allreduce_bench,
# //tools/bench:mpi_allreduce_bench and the hora package (tools/install.sh) built.
# Hosts: NK_PREFIX h29 on 10.200.29.0/24 unless BENCH_NK_PREFIX / BENCH_NK_NET say otherwise.
# Nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
LAYOUTS="2x1 2x2"
SELECTIONS="auto gloo"
ROUNDS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --layouts) LAYOUTS="$2"; shift ;;
    --selections) SELECTIONS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) echo "usage: tools/bench/cross_host_bandwidth.sh [--layouts \"HxR ...\"]" \
         "[--selections \"auto gloo tcp\"] [--rounds R]" >&2; exit 2 ;;
  esac
  shift
done
for bin in hora_allreduce_bench mpi_allreduce_bench; do
  [ -x "bazel-bin/tools/bench/$bin" ] || {
    echo "cross_host_bandwidth: build //tools/bench:$bin first" >&2; exit 1; }
done
. tools/bench/netns_hosts.sh
HOSTS=2
for layout in $LAYOUTS; do
  [[ "$layout" =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "cross_host_bandwidth: bad layout $layout" >&2; exit 2; }
  [ "${BASH_REMATCH[1]}" -le "$HOSTS" ] || HOSTS="${BASH_REMATCH[1]}"
done
netns_hosts cross_host_bandwidth "${BENCH_NK_PREFIX:-h29}" "${BENCH_NK_NET:-10.200.29}" "$HOSTS"
read -r -a ADDRS <<<"$NK_ADDRS"
read -r -a NAMES <<<"$NK_HOSTS"
HA="${NAMES[0]}"
echo "cross_host_bandwidth: hosts ${NAMES[*]} (${ADDRS[*]}); $(nproc) cores; kernel $(uname -r)"
SIZES=(--min-bytes 1048576 --max-bytes 67108864 --step-factor 64 --no-latency)
rows=()
bw_rows() {  # label, CSV output: one row per "bw," line (bytes: column 4, busbw: column 11)
  while IFS=, read -r _ _ _ bytes _ _ _ _ _ _ busbw _; do
    rows+=("| $1, $((bytes >> 20)) MiB | $busbw |")
  done < <(grep -oE 'bw,[a-z0-9-]+,.*' <<<"$2")
}
for round in $(seq "$ROUNDS"); do
  for layout in $LAYOUTS; do
    hosts="${layout%x*}" ppn="${layout#*x}" np=$((${layout%x*} * ${layout#*x}))
    hostlist="" mpihosts=""
    for ((i = 0; i < hosts; i++)); do
      hostlist+="${hostlist:+,}${NAMES[$i]}:$ppn"
      mpihosts+="${mpihosts:+,}${ADDRS[$i]}:$ppn"
    done
    for sel in $SELECTIONS; do
      out="$("$KIT/nk-exec" "$HA" tools/launcher/horarun -np "$np" -H "$hostlist" \
        --ssh-config-file "$NK_SSH_CONFIG" -x HORA_CPU_OPERATIONS="$sel" -x HORA_LOG_LEVEL=info \
        "$PWD/bazel-bin/tools/bench/hora_allreduce_bench" --csv "${SIZES[@]}" \
        --impl "hora-$sel" 2>&1)" || { echo "$out" >&2; exit 1; }
      grep -oE 'cpu operations by [a-z]+ \(HORA_CPU_OPERATIONS=[a-z:]+\)' <<<"$out" | head -1
      grep -oE 'bw,hora-[a-z]+,.*' <<<"$out"
      bw_rows "round $round: hora.h, $layout, HORA_CPU_OPERATIONS=$sel" "$out"
    done
    eval "mpi_args=($NK_MPIRUN_ARGS)"  # quoted words (the ssh agent) inside
    out="$("$KIT/nk-exec" "$HA" mpirun -np "$np" -H "$mpihosts" "${mpi_args[@]}" \
      --mca btl self,vader,tcp "$PWD/bazel-bin/tools/bench/mpi_allreduce_bench" --csv \
      --impl mpi "${SIZES[@]}" 2>&1)" || { echo "$out" >&2; exit 1; }
    grep -E '^bw,mpi,' <<<"$out"
    bw_rows "round $round: Open MPI, $layout" "$out"
    out="$("$KIT/nk-exec" "$HA" tools/launcher/horarun -np "$np" -H "$hostlist" \
      --ssh-config-file "$NK_SSH_CONFIG" -x PYTHONPATH="$PWD/bindings/python" \
      -x MASTER_ADDR="${ADDRS[0]}" -x GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 \
      tools/bench/hvd_bandwidth_bench.py --sizes 1M,64M 2>&1)" || { echo "$out" >&2; exit 1; }
    while read -r line; do
      echo "$layout: $line"
      get() { sed -E "s/.* $1=([^ ]+).*/\1/" <<<"$line"; }
      mib=$(($(get bytes) >> 20))
      rows+=("| round $round: hvd.allreduce, $layout, $mib MiB | $(get hvd_busbw) |")
      rows+=("| round $round: torch gloo all_reduce (same job), $layout, $mib MiB | $(get gloo_busbw) (hvd/gloo $(get ratio)x) |")
    done < <(grep -oE 'RESULT .*' <<<"$out")
  done
done
echo
echo "| measure | busbw GB/s |"
echo "|---|---|"
printf '%s\n' "${rows[@]}"
