#!/usr/bin/env bash
# Clang's thread-safety analysis over Hora's own C++ files: GUARDED_BY, REQUIRES, ... of
# common/mutex.h are checked by `clang++-14 -fsyntax-only -Wthread-safety
# -Werror=thread-safety` on each file, with the include paths and defines of its Bazel
# compile action (from `bazel aquery`). Nothing is compiled to code; the generated
# headers (.pb.h) must exist, so it builds the C++ targets first (a no-op after
# `bzl build //...`, as in tools/test.sh).
#   tools/check_tsa.sh [-j N] [bazel options...]      (HORA_BAZEL_ROOT as for tools/test.sh)
# Prints each file's findings and, last, "check_tsa.sh: N file(s) checked, M with findings".
# Exit: 0 when no file has a finding, 1 otherwise, 2 when clang++-14 is missing.
# A full clang build with the same checks is `bazel build --config=clang-tsa //...` (.bazelrc).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh

jobs="$(nproc)"
if [ "${1:-}" = "-j" ]; then jobs="$2"; shift 2; fi
clang="${CLANGXX:-clang++-14}"
command -v "$clang" >/dev/null ||
  { echo "check_tsa.sh: $clang not found (tools/setup.sh installs clang-14)" >&2; exit 2; }

# The C++ sources of Hora's own packages (not external/, not generated code, not CUDA, not
# tests/: no test file holds an annotated lock, and they were 53 of the 143 files checked).
QUERY='mnemonic("CppCompile", //...)'
bzl build "$@" //... >/dev/null 2>&1 || bzl build "$@" //...
execroot="$(bzl info "$@" execution_root 2>/dev/null)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bzl aquery "$@" "$QUERY" --output=jsonproto 2>/dev/null >"$work/actions.json"

# One line per file: the clang command, NUL-separated arguments, in $work/cmds/N.
python3 - "$work" "$clang" <<'EOF'
import json, os, sys
work, clang = sys.argv[1], sys.argv[2]
actions = json.load(open(os.path.join(work, "actions.json"))).get("actions", [])
os.makedirs(os.path.join(work, "cmds"))
drop_with_value = {"-MF", "-o"}
drop = {"-MD", "-c", "-fno-canonical-system-headers", "-Wno-free-nonheap-object",
        "-Wunused-but-set-parameter", "-Wall"}
seen, n = set(), 0
for a in actions:
    args = a["arguments"]
    src = args[args.index("-c") + 1] if "-c" in args else None
    if (src is None or src in seen or not src.endswith(".cc") or
            src.startswith(("external/", "bazel-out/", "tests/"))):
        continue
    seen.add(src)
    out, skip = [clang], False
    for x in args[1:]:
        if skip:
            skip = False
            continue
        if x in drop_with_value:
            skip = True
            continue
        if x in drop or x.startswith("-frandom-seed="):
            continue
        out.append(x)
    out += ["-fsyntax-only", "-Wno-unknown-warning-option", "-Wthread-safety",
            "-Wthread-safety-beta", "-Werror=thread-safety"]
    with open(os.path.join(work, "cmds", "%04d" % n), "wb") as f:
        f.write(b"\0".join(x.encode() for x in out))
    n += 1
EOF

run_one() {  # $1: command file; prints the file's findings, exit 1 when it has some
  local cmd=() log
  mapfile -d '' -t cmd <"$1"
  log="$1.log"
  if ! (cd "$EXECROOT" && "${cmd[@]}") >"$log" 2>&1; then
    cat "$log"
    return 1
  fi
  grep -q 'warning: .*\[-Wthread-safety' "$log" && cat "$log"
  return 0
}
export -f run_one
export EXECROOT="$execroot"
total=$(find "$work/cmds" -type f | wc -l)
bad=0
find "$work/cmds" -type f -name '[0-9]*' ! -name '*.log' | sort |
  xargs -P "$jobs" -I{} bash -c 'run_one "$1" || echo "$1" >>"'"$work"'/bad"' _ {}
[ -f "$work/bad" ] && bad=$(wc -l <"$work/bad")
echo "check_tsa.sh: $total file(s) checked, $bad with findings"
[ "$bad" -eq 0 ]
