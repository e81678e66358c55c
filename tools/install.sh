#!/usr/bin/env bash
# Builds and installs Hora for this machine (idempotent; prints what it installed):
#   PREFIX/lib/libhora.so            the C API library (//bindings/c:libhora.so), + ldconfig
#   PREFIX/include/hora.h            its header
#   PREFIX/lib/hora/launcher/        horarun and its modules; PREFIX/bin/horarun links there
#   PREFIX/lib/hora/timeline/        hora-timeline and its modules; PREFIX/bin/hora-timeline
#   SITE/hora                        the Python package (bindings/python/hora), where SITE is
#                                    /usr/bin/python3's site directory under PREFIX
# Usage: tools/install.sh [bazel build options]   (as root, or with sudo available)
#   HORA_PREFIX=DIR   install under DIR instead of /usr/local (no ldconfig then)
#   HORA_BAZEL_ROOT   see .ci/bazel_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/bazel_env.sh

PREFIX="${HORA_PREFIX:-/usr/local}"
PYTHON=/usr/bin/python3
SUDO=""
if [ ! -w "$(d="$PREFIX"; while [ ! -e "$d" ]; do d="$(dirname "$d")"; done; echo "$d")" ]; then
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
fi
say() { echo "install: $*"; }

# 1. libhora.so and hora.h (skipped with a note while the target does not exist).
if bzl query //bindings/c:libhora.so >/dev/null 2>&1; then
  bzl build "$@" //bindings/c:libhora.so
  bin="$(bzl info "$@" bazel-bin)"
  $SUDO install -D -m 0755 "$bin/bindings/c/libhora.so" "$PREFIX/lib/libhora.so"
  say "$PREFIX/lib/libhora.so"
  $SUDO install -D -m 0644 bindings/c/hora.h "$PREFIX/include/hora.h"
  say "$PREFIX/include/hora.h"
  ldconfig="$(PATH="$PATH:/usr/sbin:/sbin" command -v ldconfig || true)"
  if [ "$PREFIX" = /usr/local ] && [ -n "$ldconfig" ]; then
    $SUDO "$ldconfig"
    say "ldconfig (libhora.so is on the loader's path)"
  fi
else
  say "//bindings/c:libhora.so is not defined: skipped libhora.so and hora.h"
fi

# 2. horarun: the launcher files in one directory, a link on PATH.
launcher="$PREFIX/lib/hora/launcher"
$SUDO mkdir -p "$launcher" "$PREFIX/bin"
$SUDO rm -f "$launcher"/*.py
$SUDO install -m 0755 tools/launcher/horarun "$launcher/horarun"
$SUDO install -m 0644 tools/launcher/*.py "$launcher/"
$SUDO ln -sfn "$launcher/horarun" "$PREFIX/bin/horarun"
say "$PREFIX/bin/horarun -> $launcher/horarun"

# 2b. hora-timeline (docs/timeline.md), the same way.
timeline="$PREFIX/lib/hora/timeline"
$SUDO mkdir -p "$timeline"
$SUDO install -m 0755 tools/timeline/hora-timeline "$timeline/hora-timeline"
$SUDO install -m 0644 tools/timeline/hora_timeline.py tools/timeline/autotune_plot.py "$timeline/"
$SUDO ln -sfn "$timeline/hora-timeline" "$PREFIX/bin/hora-timeline"
say "$PREFIX/bin/hora-timeline -> $timeline/hora-timeline"

# 3. The Python package, into /usr/bin/python3's site directory under PREFIX.
if [ -d bindings/python/hora ]; then
  site="$("$PYTHON" - "$PREFIX" <<'PY'
import site, sys
prefix = sys.argv[1].rstrip("/") + "/"
dirs = [d for d in site.getsitepackages() if d.startswith(prefix)]
v = "%d.%d" % sys.version_info[:2]
print(dirs[0] if dirs else prefix + "lib/python" + v + "/dist-packages")
PY
)"
  $SUDO mkdir -p "$site"
  $SUDO rm -rf "$site/hora.tmp"
  # copy_package DIR: bindings/python/hora as DIR/hora, replaced whole.
  copy_package() {
    $SUDO rm -rf "$1/hora.tmp"
    $SUDO cp -r bindings/python/hora "$1/hora.tmp"
    $SUDO find "$1/hora.tmp" -name __pycache__ -prune -exec rm -rf {} +
    $SUDO rm -rf "$1/hora"
    $SUDO mv "$1/hora.tmp" "$1/hora"
  }
  copy_package "$site"
  say "$site/hora (Python package for $PYTHON)"
  if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$site"; then
    say "note: $site is not on $PYTHON's path; add it to PYTHONPATH"
  fi
  # The torch 2.x environment (tools/setup_torch2.sh) does not see the system's site: it gets
  # its own copy, so that `horarun -np 2 /opt/hora/torch2/bin/python train.py` imports hora.
  torch2="${HORA_TORCH2:-/opt/hora/torch2}"
  if [ -x "$torch2/bin/python" ]; then
    site2="$("$torch2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    copy_package "$site2"
    say "$site2/hora (Python package for $torch2/bin/python)"
  fi
else
  say "bindings/python/hora does not exist: skipped the Python package"
fi
say "done"
