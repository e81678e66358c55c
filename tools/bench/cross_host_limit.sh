#!/usr/bin/env bash
# The cross-host limit (issue 29's first step, docs/benchmarks-cross-host.md): on 2 network-
# namespace hosts (../shared/tools/netns-kit), what TCP carries with 1, 2, 4 and 8 streams
# (tools/bench/tcp_limit, one sender host, one receiver host), then both ways at once
# (1 and 4 streams each way, as an allreduce's traffic flows), the same from one thread with
# what one end sends paced by what it has received (tcp_limit exchange; windows of 0, 64, 96,
# 128 and 256 KiB, as TcpOptions::inflight_bytes paces the tcp backend), and what Open MPI's
# MPI_Allreduce reaches over TCP across them at 1 rank per host (mpi_allreduce_bench,
# 1 MiB and 64 MiB busbw), and torch's gloo all_reduce the same way. Prints one line per
# measurement and a markdown table.
#   tools/bench/cross_host_limit.sh [--mib M] [--rounds R] [--no-mpi]
# Needs root (namespaces), Open MPI, //tools/bench:tcp_limit built, and
# //tools/bench:mpi_allreduce_bench built unless --no-mpi. Nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
MIB=1024
ROUNDS=3
MPI=1
while [ $# -gt 0 ]; do
  case "$1" in
    --mib) MIB="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --no-mpi) MPI=0 ;;
    *) echo "usage: tools/bench/cross_host_limit.sh [--mib M] [--rounds R] [--no-mpi]" >&2; exit 2 ;;
  esac
  shift
done
[ -x bazel-bin/tools/bench/tcp_limit ] || {
  echo "cross_host_limit: build //tools/bench:tcp_limit first" >&2; exit 1; }
. tools/bench/netns_hosts.sh
netns_hosts cross_host_limit hxl 10.200.77 2
read -r A B <<<"$NK_ADDRS"
read -r HA HB <<<"$NK_HOSTS"
echo "cross_host_limit: hosts $HA ($A) and $HB ($B); $(nproc) cores; kernel $(uname -r)"
rows=()
port=47100
for streams in 1 2 4 8; do
  port=$((port + 1))
  "$KIT/nk-exec" "$HB" bazel-bin/tools/bench/tcp_limit serve --port "$port" \
    --bind "$B" >/dev/null &
  sleep 0.5
  line="$("$KIT/nk-exec" "$HA" bazel-bin/tools/bench/tcp_limit send --to "$B" \
    --port "$port" --streams "$streams" --mib "$MIB" --rounds "$ROUNDS" --stop | tail -1)"
  wait
  echo "$line"
  rows+=("| TCP, $streams stream(s), $MIB MiB | $(sed -E 's/.*best_gbs=([0-9.]+) median_gbs=([0-9.]+)/\2 (best \1)/' <<<"$line") |")
done
# Both ways at once (an allreduce's ring sends and receives on every host): each direction's
# rate while the other runs.
for streams in 1 4; do
  port=$((port + 2))
  "$KIT/nk-exec" "$HB" bazel-bin/tools/bench/tcp_limit serve --port "$port" \
    --bind "$B" >/dev/null &
  "$KIT/nk-exec" "$HA" bazel-bin/tools/bench/tcp_limit serve --port "$((port + 1))" \
    --bind "$A" >/dev/null &
  sleep 0.5
  "$KIT/nk-exec" "$HA" bazel-bin/tools/bench/tcp_limit send --to "$B" --port "$port" \
    --streams "$streams" --mib "$MIB" --rounds "$ROUNDS" --stop >"/tmp/hxl.ab.$$" &
  "$KIT/nk-exec" "$HB" bazel-bin/tools/bench/tcp_limit send --to "$A" \
    --port "$((port + 1))" --streams "$streams" --mib "$MIB" --rounds "$ROUNDS" --stop \
    >"/tmp/hxl.ba.$$"
  wait
  ab="$(tail -1 "/tmp/hxl.ab.$$")"; ba="$(tail -1 "/tmp/hxl.ba.$$")"; rm -f /tmp/hxl.*.$$
  echo "both ways, A->B: $ab"
  echo "both ways, B->A: $ba"
  med() { sed -E 's/.*median_gbs=([0-9.]+)/\1/' <<<"$1"; }
  rows+=("| TCP both ways at once, $streams stream(s) each way: A->B, B->A | $(med "$ab"), $(med "$ba") |")
done
# One connection both ways from one thread, paced by a window (0: unpaced).
for kib in ${HORA_LIMIT_WINDOWS:-0 64 96 128 256}; do
  port=$((port + 2))
  "$KIT/nk-exec" "$HB" bazel-bin/tools/bench/tcp_limit exchange --port "$port" --bind "$B" \
    --window-kib "$kib" --mib "$MIB" --rounds "$ROUNDS" >"/tmp/hxl.ex.$$" &
  line="$("$KIT/nk-exec" "$HA" bazel-bin/tools/bench/tcp_limit exchange --port "$port" --to "$B" \
    --window-kib "$kib" --mib "$MIB" --rounds "$ROUNDS" | tail -1)"
  wait
  echo "exchange: $line; other end: $(tail -1 "/tmp/hxl.ex.$$")"; rm -f "/tmp/hxl.ex.$$"
  rows+=("| TCP exchange both ways from one thread, window $kib KiB (0: unpaced), each way | $(sed -E 's/.*best_gbs=([0-9.]+) median_gbs=([0-9.]+)/\2 (best \1)/' <<<"$line") |")
done
if [ "$MPI" = 1 ]; then
  bin=bazel-bin/tools/bench/mpi_allreduce_bench
  [ -x "$bin" ] || { echo "cross_host_limit: build //tools/bench:mpi_allreduce_bench first" >&2; exit 1; }
  eval "mpi_args=($NK_MPIRUN_ARGS)"  # quoted words (the ssh agent) inside
  out="$("$KIT/nk-exec" "$HA" mpirun -np 2 -H "$A:1,$B:1" "${mpi_args[@]}" --mca btl self,tcp \
    "$PWD/$bin" --csv --impl mpi-tcp --min-bytes 1048576 --max-bytes 67108864 --step-factor 64 \
    --no-latency 2>&1)" || { echo "$out" >&2; exit 1; }
  echo "$out" | grep -E '^bw,mpi-tcp,' || { echo "$out" >&2; exit 1; }
  while IFS=, read -r _ _ _ bytes _ _ _ _ _ _ busbw _; do
    rows+=("| Open MPI MPI_Allreduce over TCP, 2x1, $((bytes >> 20)) MiB (busbw) | $busbw |")
  done < <(echo "$out" | grep -E '^bw,mpi-tcp,')
fi
# torch.distributed's gloo backend across the same hosts, one rank per host, under horarun
# (over ssh), Gloo on the hosts' eth0.
out="$("$KIT/nk-exec" "$HA" tools/launcher/horarun -np 2 -H "$HA:1,$HB:1" \
  --ssh-config-file "$NK_SSH_CONFIG" -x MASTER_ADDR="$A" -x GLOO_SOCKET_IFNAME=eth0 \
  /usr/bin/python3 tools/bench/torch_gloo_allreduce_bench.py --csv --min-bytes 1M \
  --max-bytes 64M --step-factor 64 --no-latency 2>&1)" || { echo "$out" >&2; exit 1; }
echo "$out" | grep -E 'bw,torch-gloo,' | sed -E 's/^\[0\]<stdout>: //'
while IFS=, read -r _ _ _ bytes _ _ _ _ _ _ busbw _; do
  rows+=("| torch gloo all_reduce, 2x1, $((bytes >> 20)) MiB (busbw) | $busbw |")
done < <(echo "$out" | grep -E 'bw,torch-gloo,' | sed -E 's/^\[0\]<stdout>: //')
echo
echo "| measure | GB/s |"
echo "|---|---|"
printf '%s\n' "${rows[@]}"
