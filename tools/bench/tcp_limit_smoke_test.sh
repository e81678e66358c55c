#!/usr/bin/env bash
# tcp_limit over loopback: 2 streams, 8 MiB, 2 rounds; every byte arrives (the receiver's
# count must equal what was sent, else the sender fails) and the result line is printed. No
# time is asserted. Prints "N passed, N failed, N skipped" last.
set -uo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then cd "$TEST_SRCDIR/${TEST_WORKSPACE:-hora}"; else cd "$(dirname "$0")/../.."; fi
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Both bounded well inside the test's own timeout; the sender waits for the receiver to listen.
bin=tools/bench/tcp_limit
[ -x "$bin" ] || bin=bazel-bin/tools/bench/tcp_limit
timeout 40 "$bin" serve --port "$port" --bind 127.0.0.1 &
server=$!
out="$(timeout 30 "$bin" send --to 127.0.0.1 --port "$port" \
  --streams 2 --mib 8 --rounds 2 --stop 2>&1)"
rc=$?
[ "$rc" -ne 0 ] && kill "$server" 2>/dev/null
wait "$server"; src=$?
echo "$out"
if [ "$rc" -eq 0 ] && [ "$src" -eq 0 ] && grep -qE '^TCP_LIMIT streams=2 mib=8 rounds=2 best_gbs=[0-9.]+ median_gbs=[0-9.]+$' <<<"$out"; then
  echo "1 passed, 0 failed, 0 skipped"
else
  echo "tcp_limit_smoke_test: sender exit $rc, receiver exit $src" >&2
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
