#!/usr/bin/env bash
# Runs the Python test suite (tests/python/test_*.py) against the wheel installed into fresh
# virtual environments instead of the tree: once with the ranks on Debian's torch 1.13 (venv
# torch1: /usr/bin/python3 with --system-site-packages) and once on torch 2.x (venv torch2:
# /opt/hora/torch2's site-packages through a .pth, none of Debian's, whose scipy does not go
# with its numpy 2). pytest and horarun run from torch1 both times (as the *_torch2 Bazel
# targets run pytest under /usr/bin/python3); torch2 is also HORA_TORCH2 (test_c10d). Nothing
# of bindings/python or Bazel is on any path (tests/python/run_pytest.sh's
# HORA_TEST_INSTALLED). Prints one
# "N passed, N failed, N skipped" line per torch and per file, and the total last.
# Usage: tools/test_installed.sh [WHEEL] [-- test files...]   (default: dist/hora-*.whl, all files)
#   Build the wheel first: tools/build_wheel.sh --no-gpu-bundle
set -uo pipefail
cd "$(dirname "$0")/.."
wheel="${1:-$(ls dist/hora-*.whl 2>/dev/null | tail -1)}"
[ -n "$wheel" ] && [ -f "$wheel" ] || { echo "test_installed: no wheel (run tools/build_wheel.sh)" >&2; exit 1; }
shift || true
[ "${1:-}" = "--" ] && shift
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(tests/python/test_*.py)
torch2_site="$(${HORA_TORCH2:-/opt/hora/torch2}/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")" ||
  { echo "test_installed: torch 2.x is missing: run tools/setup.sh" >&2; exit 1; }

work="$(mktemp -d /tmp/hora-installed.XXXXXX)"
trap 'rm -rf "$work"' EXIT
for name in torch1 torch2; do
  if [ "$name" = torch1 ]; then
    /usr/bin/python3 -m venv --system-site-packages "$work/$name" || exit 1
  else
    /usr/bin/python3 -m venv "$work/$name" || exit 1
    echo "$torch2_site" > "$("$work/$name/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/zz_torch2.pth"
  fi
  "$work/$name/bin/python" -m pip install -q --no-index --disable-pip-version-check "$wheel" || exit 1
  echo "test_installed: $name: $("$work/$name/bin/python" -c 'import torch, hora, hora._lib as l; l.lib(); print("torch", torch.__version__, "hora", hora.__file__, l.lib_path())')"
done

P=0; F=0; S=0
for name in torch1 torch2; do
  p=0; f=0; s=0
  for file in "${files[@]}"; do
    log="$work/$name.$(basename "$file").log"
    HORA_TEST_INSTALLED="$work/torch1" HORA_TEST_PYTHON="$work/$name/bin/python" \
      HORA_TORCH2="$work/torch2" tests/python/run_pytest.sh "$file" -rfE >"$log" 2>&1
    read -r a b c < <(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1 | tr -d ',' | awk '{print $1, $3, $5}')
    a=${a:-0}; b=${b:-1}; c=${c:-0}
    echo "test_installed: $name $file: $a passed, $b failed, $c skipped"
    [ "$b" -ne 0 ] && grep -E "^(FAILED|ERROR) " "$log" | head -20
    p=$((p + a)); f=$((f + b)); s=$((s + c))
  done
  echo "test_installed: $name total: $p passed, $f failed, $s skipped"
  P=$((P + p)); F=$((F + f)); S=$((S + s))
done
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
