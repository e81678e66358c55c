#!/usr/bin/env bash
# The tcp backend's knobs side by side (docs/benchmarks-cross-host.md "Larger pieces"): on 2
# network-namespace hosts x PPN ranks, hora_allreduce_bench of one size under each setting
# of --variants, alternated for --rounds rounds. Per run it prints the time per allreduce
# (the benchmark's own, end to end) and, from the job's timeline, the data plane's time per
# allreduce on each of the first two ranks (p10 / median / p90 of the timeline's
# "allreduce" spans that name a backend): the data plane's median moves far less from run
# to run than the end-to-end time on a loaded VM.
#   tools/bench/tcp_knobs.sh [--bytes 1M] [--ppn 1] [--rounds 3] [--seconds 0.5]
#       [--variants "HORA_TCP_PIECE_BYTES=65536 HORA_TCP_INFLIGHT_BYTES=98304;"]
# --variants: settings separated by ';', each a space-separated list of VAR=VALUE given to
# every rank (an empty setting: the defaults). Default: the defaults against the previous
# defaults (64 KiB pieces, 96 KiB window).
# Needs root (namespaces) and //tools/bench:hora_allreduce_bench built. Asserts no time.
set -euo pipefail
cd "$(dirname "$0")/../.."
BYTES=1M PPN=1 ROUNDS=3 SECONDS_EACH=0.5
VARIANTS=";HORA_TCP_PIECE_BYTES=65536 HORA_TCP_INFLIGHT_BYTES=98304"
while [ $# -gt 0 ]; do
  case "$1" in
    --bytes) BYTES="$2"; shift ;;
    --ppn) PPN="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --seconds) SECONDS_EACH="$2"; shift ;;
    --variants) VARIANTS="$2"; shift ;;
    *) echo "usage: tools/bench/tcp_knobs.sh [--bytes N] [--ppn N] [--rounds R]" \
         "[--seconds S] [--variants \"VAR=V ...;VAR=V ...\"]" >&2; exit 2 ;;
  esac
  shift
done
BIN="$PWD/bazel-bin/tools/bench/hora_allreduce_bench"
[ -x "$BIN" ] || { echo "tcp_knobs: build //tools/bench:hora_allreduce_bench first" >&2; exit 1; }
. tools/bench/netns_hosts.sh
netns_hosts tcp_knobs "${BENCH_NK_PREFIX:-hkn}" "${BENCH_NK_NET:-10.200.81}" 2
read -r -a NAMES <<<"$NK_HOSTS"
# In the kit's state directory, which its teardown removes.
TIMELINE="/tmp/netns-kit/state/${BENCH_NK_PREFIX:-hkn}/timeline"
IFS=';' read -r -a SETTINGS <<<"$VARIANTS"
[ "${VARIANTS: -1}" = ";" ] && SETTINGS+=("")
echo "tcp_knobs: ${BYTES} bytes, 2 hosts x $PPN, $ROUNDS rounds; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for setting in "${SETTINGS[@]}"; do
    args=()
    for kv in $setting; do args+=(-x "$kv"); done
    rm -f "$TIMELINE" "$TIMELINE".rank*
    op=$("$KIT/nk-exec" "${NAMES[0]}" tools/launcher/horarun -np $((2 * PPN)) \
      -H "${NAMES[0]}:$PPN,${NAMES[1]}:$PPN" --ssh-config-file "$NK_SSH_CONFIG" \
      -x HORA_TIMELINE="$TIMELINE" "${args[@]}" "$BIN" --csv --no-latency \
      --min-bytes "$BYTES" --max-bytes "$BYTES" --target-seconds "$SECONDS_EACH" 2>&1 |
      grep -oE "bw,hora.*" | cut -d, -f9)
    spans=$(python3 - "$TIMELINE" <<'EOF'
import json, statistics, sys
out = []
for rank in (0, 1):
    text = open(sys.argv[1] + (".rank%d" % rank if rank else "")).read().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    d = [e["dur"] for e in events if e.get("ph") == "X" and e["name"].endswith("_ALLREDUCE")
         and e["tid"] < 1000000]  # the data-plane call on the bucket's track
    q = statistics.quantiles(d, n=10)
    out.append("%d / %d / %d" % (q[0], statistics.median(d), q[-1]))
print("; ".join(out))
EOF
)
    echo "round $round [${setting:-defaults}]: ${op} us per allreduce; data plane p10 / median / p90 us: $spans"
  done
done
