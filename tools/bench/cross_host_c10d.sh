#!/usr/bin/env bash
# torch.distributed on the "hora" backend beside the same calls on torch's gloo, in one job,
# across 2 network-namespace hosts (../shared/tools/netns-kit), 1 rank each: c10d_bench.py's
# collectives, send/recv ping-pong (issue 28, "send/recv pairs on the steady path";
# docs/parallelism-measurements.md) or DDP steps (torch 2.x from /opt/hora/torch2).
#   tools/bench/cross_host_c10d.sh [--only collectives|p2p|ddp] [--rounds R]
# Needs root (namespaces) and the hora package (tools/install.sh). Nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=3
ONLY=p2p
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --only) ONLY="$2"; shift ;;
    *) echo "usage: tools/bench/cross_host_c10d.sh [--only collectives|p2p|ddp] [--rounds R]" >&2
       exit 2 ;;
  esac
  shift
done
. tools/bench/netns_hosts.sh
netns_hosts cross_host_c10d hxp 10.200.79 2
read -r -a NAMES <<<"$NK_HOSTS"
echo "cross_host_c10d: hosts ${NAMES[0]} and ${NAMES[1]}; $(nproc) cores; kernel $(uname -r)"
"$KIT/nk-exec" "${NAMES[0]}" tools/launcher/horarun --ssh-config-file "$NK_SSH_CONFIG" \
  -x PYTHONPATH="$PWD/bindings/python" -x GLOO_SOCKET_IFNAME=eth0 \
  -np 2 -H "${NAMES[0]}:1,${NAMES[1]}:1" /opt/hora/torch2/bin/python tools/bench/c10d_bench.py \
  --only "$ONLY" --rounds "$ROUNDS"
