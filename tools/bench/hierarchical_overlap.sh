#!/usr/bin/env bash
# The hierarchical allreduce with and without its chunked overlap (issue 29;
# docs/benchmarks-cross-host.md "Overlapped hierarchical allreduce"): hora.h's allreduce
# (hora_allreduce_bench under horarun over ssh) on 2 network-namespace hosts x 2 ranks, each
# chunk size of --chunks in turn (HORA_HIERARCHICAL_CHUNK_BYTES; 0 = the three phases one
# after the other), --rounds times, at --bytes. --rate R shapes each host's link to R with a
# token bucket (tc tbf, e.g. 4gbit): a link slower than the hosts' memory, as across real
# hosts, instead of a veth pair that costs as much CPU as the reductions.
#   tools/bench/hierarchical_overlap.sh [--chunks "0 4194304"] [--rounds 3]
#       [--bytes 67108864] [--rate 4gbit]
# Prints one line per run: chunk bytes, median microseconds, busbw GB/s. Needs root, and
# //tools/bench:hora_allreduce_bench built. Hosts: NK_PREFIX hov on 10.200.91.0/24.
# Nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHUNKS="0 4194304" ROUNDS=3 BYTES=67108864 RATE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --chunks) CHUNKS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --bytes) BYTES="$2"; shift ;;
    --rate) RATE="$2"; shift ;;
    *) echo "usage: tools/bench/hierarchical_overlap.sh [--chunks \"0 4194304\"] [--rounds R]" \
         "[--bytes B] [--rate 4gbit]" >&2; exit 2 ;;
  esac
  shift
done
BENCH="$PWD/bazel-bin/tools/bench/hora_allreduce_bench"
[ -x "$BENCH" ] || { echo "hierarchical_overlap: build //tools/bench:hora_allreduce_bench first" >&2; exit 1; }
. tools/bench/netns_hosts.sh
netns_hosts hierarchical_overlap hov 10.200.91 2
read -r -a NAMES <<<"$NK_HOSTS"
if [ -n "$RATE" ]; then
  for h in "${NAMES[@]}"; do
    ip netns exec "$h" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 4mb latency 20ms
  done
fi
echo "hierarchical_overlap: hosts ${NAMES[*]}; $(nproc) cores; link ${RATE:-unshaped veth}"
for round in $(seq "$ROUNDS"); do
  for c in $CHUNKS; do
    out="$("$KIT/nk-exec" "${NAMES[0]}" tools/launcher/horarun -np 4 \
      -H "${NAMES[0]}:2,${NAMES[1]}:2" --ssh-config-file "$NK_SSH_CONFIG" \
      -x HORA_CPU_OPERATIONS=hierarchical -x HORA_HIERARCHICAL_CHUNK_BYTES="$c" \
      "$BENCH" --csv --no-latency --min-bytes "$BYTES" --max-bytes "$BYTES" 2>&1)" || {
      echo "$out" >&2; exit 1; }
    # CSV: kind,impl,np,bytes,count,type,op,iters,time_us,algbw_gbs,busbw_gbs,...
    grep -oE 'bw,hora,.*' <<<"$out" | while IFS=, read -r _ _ _ _ _ _ _ _ us _ busbw _; do
      echo "round $round: chunk $c: $us us, busbw $busbw GB/s"
    done
  done
done
