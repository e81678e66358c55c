# Sourced by the tests/*/run_pytest.sh runners (after they cd to the repository root):
# defines run_pytest ARGS..., which runs /usr/bin/python3 -m pytest (or $HORA_PYTEST_PYTHON:
# tests/python/run_pytest.sh under HORA_TEST_INSTALLED) and ends with the
# "N passed, N failed, N skipped" line .ci/test_summary.sh reads (docs/testing.md).
# Cases come from the JUnit XML (Bazel's $XML_OUTPUT_FILE, else a temporary file): errors
# count as failed, skips (and xfails) as skipped; a crash or nothing collected is 1 failed.
xml="${XML_OUTPUT_FILE:-${TEST_TMPDIR:-${TMPDIR:-/tmp}}/pytest-junit.$$.xml}"
rm -f "$xml"
run_pytest() {
  "${HORA_PYTEST_PYTHON:-/usr/bin/python3}" -m pytest -q -rs -p no:cacheprovider "--junitxml=$xml" "$@"
  rc=$?
  read -r passed failed skipped < <(/usr/bin/python3 - "$xml" <<'PY' 2>/dev/null || echo "0 0 0"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
bad = n["failures"] + n["errors"]
print(n["tests"] - bad - n["skipped"], bad, n["skipped"])
PY
)
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  if [ "$rc" -eq 0 ] && [ $((passed + failed + skipped)) -eq 0 ]; then failed=1; rc=1; fi
  [ -z "${XML_OUTPUT_FILE:-}" ] && rm -f "$xml"
  echo "$passed passed, $failed failed, $skipped skipped"
  return "$rc"
}
