#!/usr/bin/env bash
# Runs `bazel test "$@"`, shows its output, and ends with ONE line "N passed, N failed":
# test cases summed over every test target. Exits with Bazel's exit code.
#
# Per target (a "//pkg:name STATUS" line of Bazel's summary), from
# bazel-testlogs/pkg/name/test.log (or its shard_*/run_* logs):
#   1. the last "N passed, N failed" line (our Catch2 listener, tests/launcher/run_pytest.sh);
#   2. else Catch2's own totals ("test cases: 3 | 2 passed | 1 failed", "All tests passed
#      (.. in 3 test cases)");
#   3. else 1 passed or 1 failed from Bazel's status.
# A target Bazel did not pass counts at least 1 failed. FAILED TO BUILD, TIMEOUT and
# INCOMPLETE count 1 failed; FLAKY counts as its log says; SKIPPED and NO STATUS count
# nothing. A non-zero Bazel exit with no failed case counted (a build failure) counts 1 failed.
# Options must be given as --flag=value, so that `bazel info` gets them too.
set -uo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh

log="$(mktemp "${TMPDIR:-/tmp}/hora-test-summary.XXXXXX")"
trap 'rm -f "$log"' EXIT
bzl test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

opts=()
for a in "$@"; do
  [ "$a" = "--" ] && break
  case "$a" in --*) opts+=("$a") ;; esac
done
testlogs="$(bzl info "${opts[@]}" bazel-testlogs 2>/dev/null || true)"
[ -n "$testlogs" ] || testlogs="bazel-testlogs"

# counts_from_log FILE -> "P F", or nothing if the log has no totals.
counts_from_log() {
  local f="$1" line
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$f" | tail -n 1)"
  if [ -n "$line" ]; then awk '{print $1, $3}' <<<"$line"; return; fi
  line="$(grep -E '^test cases: +[0-9]+ \|' "$f" | tail -n 1)"
  if [ -n "$line" ]; then
    awk -F'|' '{p=0; f=0; for (i=2;i<=NF;i++) { split($i, w, " ");
      if (w[2]=="passed") p=w[1]; if (w[2]=="failed") f=w[1] } print p, f}' <<<"$line"
    return
  fi
  line="$(grep -E '^All tests passed \(.* in [0-9]+ test cases?\)' "$f" | tail -n 1)"
  if [ -n "$line" ]; then sed -E 's/.* in ([0-9]+) test cases?\)/\1 0/' <<<"$line"; fi
}

passed=0; failed=0; skipped=0; flaky=0
while read -r label status; do
  pkg="${label#//}"; name="${pkg##*:}"; pkg="${pkg%:*}"
  dir="$testlogs/${pkg:+$pkg/}$name"
  case "$status" in
    SKIPPED*|"NO STATUS"*) skipped=$((skipped + 1)); continue ;;
    "FAILED TO BUILD"*|TIMEOUT*|INCOMPLETE*) failed=$((failed + 1)); continue ;;
    FLAKY*) flaky=$((flaky + 1)) ;;
  esac
  p=0; f=0; found=0
  for tl in "$dir/test.log" "$dir"/shard_*/test.log "$dir"/run_*/test.log "$dir"/shard_*/run_*/test.log; do
    [ -f "$tl" ] || continue
    c="$(counts_from_log "$tl")"
    [ -n "$c" ] || continue
    p=$((p + ${c% *})); f=$((f + ${c#* })); found=1
  done
  if [ "$found" -eq 0 ]; then
    case "$status" in PASSED*|FLAKY*) p=1 ;; *) f=1 ;; esac
  fi
  case "$status" in PASSED*|FLAKY*) ;; *) [ "$f" -eq 0 ] && f=1 ;; esac
  passed=$((passed + p)); failed=$((failed + f))
done < <(sed -E $'s/\x1b\\[[0-9;]*[A-Za-z]//g' "$log" |
         sed -nE 's#^(//[^ ]*:[^ ]+) +(\(cached\) +)?(PASSED|FAILED TO BUILD|FAILED|TIMEOUT|FLAKY|INCOMPLETE|SKIPPED|NO STATUS)\b.*#\1 \3#p')

[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
notes=()
[ "$skipped" -gt 0 ] && notes+=("$skipped target(s) skipped or without status")
[ "$flaky" -gt 0 ] && notes+=("$flaky flaky target(s) passed on a retry")
[ ${#notes[@]} -gt 0 ] && echo "test summary: ${notes[*]}"
echo "$passed passed, $failed failed"
exit "$rc"
