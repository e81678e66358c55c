#!/usr/bin/env bash
# Runs `bazel test "$@"`, shows its output, and ends with ONE line
#   "N passed, N failed, N skipped"
# counting TEST CASES summed over every test target. Exits with Bazel's exit code, or 1 when
# CI=true and a case was skipped (CI provides every prerequisite: a skip there is a broken CI).
#
# The convention every test target follows (docs/testing.md has the long form):
#   - A test case is a Catch2 TEST_CASE, a pytest test item (each parametrization is one), or
#     one case of a shell-run job (a job that checks one thing is one case).
#   - A target reports its cases in the last line of its test log that is exactly
#     "N passed, N failed, N skipped". tests/*/run_pytest.sh print it from pytest's JUnit XML.
#   - A skip says why on its own line and is counted as skipped, never as passed.
#
# Per target (a "//pkg:name STATUS" line of Bazel's summary), from
# bazel-testlogs/pkg/name/test.log (and its shard_*/run_* logs, summed):
#   1. the last "N passed, N failed, N skipped" line;
#   2. else Catch2's own totals ("test cases: 3 | 2 passed | 1 failed", "All tests passed
#      (.. in 3 test cases)"): any cc_test on tests/harness:catch2_main, whatever it prints;
#   3. else 1 passed or 1 failed from Bazel's status. A two-field "N passed, N failed" line is
#      NOT trusted: some binaries count assertions in it (tests/bindings/*.c), so a target
#      that prints only that counts as one case.
# A target Bazel did not pass counts at least 1 failed. FAILED TO BUILD, TIMEOUT, INCOMPLETE
# and NO STATUS (asked for, never ran) count 1 failed; FLAKY counts as its log says; SKIPPED
# (incompatible with the platform) counts 1 skipped. A non-zero Bazel exit with no failed case
# counted (a build failure) counts 1 failed.
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
  case "$a" in
    --profile=*) ;;  # `bazel info` would write its own profile over the test run's
    --*) opts+=("$a") ;;
  esac
done
testlogs="$(bzl info "${opts[@]}" bazel-testlogs 2>/dev/null || true)"
[ -n "$testlogs" ] || testlogs="bazel-testlogs"

# counts_from_log FILE -> "P F S", or nothing if the log has no totals (rules 1 and 2).
counts_from_log() {
  local f="$1" line
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$f" | tail -n 1)"
  if [ -n "$line" ]; then awk '{print $1, $3, $5}' <<<"$line"; return; fi
  line="$(grep -E '^test cases: +[0-9]+ \|' "$f" | tail -n 1)"
  if [ -n "$line" ]; then
    awk -F'|' '{p=0; f=0; for (i=2;i<=NF;i++) { split($i, w, " ");
      if (w[2]=="passed") p=w[1]; if (w[2]=="failed") f=w[1] } print p, f, 0}' <<<"$line"
    return
  fi
  line="$(grep -E '^All tests passed \(.* in [0-9]+ test cases?\)' "$f" | tail -n 1)"
  if [ -n "$line" ]; then sed -E 's/.* in ([0-9]+) test cases?\)/\1 0 0/' <<<"$line"; fi
}

passed=0; failed=0; skipped=0; flaky=0
while read -r label status; do
  pkg="${label#//}"; name="${pkg##*:}"; pkg="${pkg%:*}"
  dir="$testlogs/${pkg:+$pkg/}$name"
  case "$status" in
    SKIPPED*) skipped=$((skipped + 1)); echo "test summary: $label SKIPPED by Bazel"; continue ;;
    "FAILED TO BUILD"*|TIMEOUT*|INCOMPLETE*|"NO STATUS"*) failed=$((failed + 1)); continue ;;
    FLAKY*) flaky=$((flaky + 1)) ;;
  esac
  p=0; f=0; s=0; found=0
  # A target's logs are either one test.log or its shard_*/run_* logs; Bazel does not remove
  # the split logs of an earlier --runs_per_test or sharded run, so the newer kind wins.
  logs=()
  for tl in "$dir"/shard_*/test.log "$dir"/run_*/test.log "$dir"/shard_*/run_*/test.log; do
    [ -f "$tl" ] || continue
    if [ ! -f "$dir/test.log" ] || [ "$tl" -nt "$dir/test.log" ]; then logs+=("$tl"); fi
  done
  [ "${#logs[@]}" -eq 0 ] && logs=("$dir/test.log")
  for tl in "${logs[@]}"; do
    [ -f "$tl" ] || continue
    c="$(counts_from_log "$tl")"
    [ -n "$c" ] || continue
    read -r cp cf cs <<<"$c"
    p=$((p + cp)); f=$((f + cf)); s=$((s + cs)); found=1
  done
  if [ "$found" -eq 0 ]; then
    case "$status" in PASSED*|FLAKY*) p=1 ;; *) f=1 ;; esac
  fi
  case "$status" in PASSED*|FLAKY*) ;; *) [ "$f" -eq 0 ] && f=1 ;; esac
  [ "$s" -gt 0 ] && echo "test summary: $label skipped $s case(s); see its test.log"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done < <(sed -E $'s/\x1b\\[[0-9;]*[A-Za-z]//g' "$log" |
         sed -nE 's#^(//[^ ]*:[^ ]+) +(\(cached\) +)?(PASSED|FAILED TO BUILD|FAILED|TIMEOUT|FLAKY|INCOMPLETE|SKIPPED|NO STATUS)\b.*#\1 \3#p')

[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
[ "$flaky" -gt 0 ] && echo "test summary: $flaky flaky target(s) passed on a retry"
if [ "${CI:-}" = "true" ] && [ "$skipped" -gt 0 ] && [ "$rc" -eq 0 ]; then
  echo "test summary: CI=true and $skipped case(s) skipped: CI must run every test"
  rc=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
