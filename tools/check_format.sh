#!/usr/bin/env bash
# Reports the C/C++ files that differ from what clang-format (.clang-format at the root)
# would write, with the number of differing lines and, with -v, the diff.
#   tools/check_format.sh [-v] [--fix] [--since REF] [FILE...]
#     FILE...      the files to check (default: every tracked *.h, *.cc, *.c)
#     --since REF  only the files changed since the git revision REF (e.g. origin/main)
#     --fix        rewrite the files in place instead of reporting them
#     -v           print each file's diff
# Exit: 0 when every file checked is formatted, 1 when some differ, 2 on a usage error or
# when clang-format is missing. The whole tree is formatted, and CI runs this over every
# file (tools/test.sh's part "format"); --fix before a commit (docs/build.md).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0; verbose=0; since=""; files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fix) fix=1 ;;
    -v) verbose=1 ;;
    --since) [ $# -ge 2 ] || { echo "check_format.sh: --since needs a revision" >&2; exit 2; }
             since="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "check_format.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done

cf="${CLANG_FORMAT:-}"
if [ -z "$cf" ]; then
  for c in clang-format-14 clang-format; do command -v "$c" >/dev/null && { cf="$c"; break; }; done
fi
[ -n "$cf" ] || { echo "check_format.sh: clang-format not found (Debian: apt-get install clang-format)" >&2; exit 2; }

if [ ${#files[@]} -eq 0 ]; then
  if [ -n "$since" ]; then
    mapfile -t files < <(git diff --name-only --diff-filter=d "$since" -- '*.h' '*.cc' '*.c')
  else
    mapfile -t files < <(git ls-files -- '*.h' '*.cc' '*.c')
  fi
fi

bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "check_format.sh: no such file: $f" >&2; exit 2; }
  if [ "$fix" -eq 1 ]; then "$cf" -i --style=file "$f"; continue; fi
  d="$("$cf" --style=file "$f" | diff -u "$f" - || true)"
  [ -n "$d" ] || continue
  bad=$((bad + 1))
  echo "$f: $(( $(grep -c '^[-+]' <<<"$d") - 2 )) line(s) differ"
  [ "$verbose" -eq 1 ] && echo "$d"
done
[ "$fix" -eq 1 ] && exit 0
echo "check_format.sh: ${#files[@]} file(s) checked, $bad differ"
[ "$bad" -eq 0 ]
