#!/usr/bin/env bash
# Installs torch 2.x from PyPI into its own virtual environment, $HORA_TORCH2 (default
# /opt/hora/torch2), beside Debian's torch 1.13 in /usr/bin/python3: Hora's Python tests run
# on both, and hora.torch.distributed (the c10d backend) needs 2.x; Accelerate and
# transformers for examples/accelerate_clm.py. Versions: tools/torch2-requirements.txt.
# Idempotent.
#
# PyPI's Linux wheels of torch are CUDA builds. On a machine without a GPU they still import
# when the CUDA libraries they link can be found: this machine's CUDA toolkit provides most,
# four small NVIDIA wheels the rest. If that does not import, the wheel's full dependency set
# is installed instead (a few GB more).
# Usage: tools/setup_torch2.sh          (called by tools/setup.sh)
set -euo pipefail

VENV="${HORA_TORCH2:-/opt/hora/torch2}"
REQUIREMENTS="$(dirname "$0")/torch2-requirements.txt"
TORCH="$(grep -E '^torch==' "$REQUIREMENTS")"

works() { "$VENV/bin/python" -c "import torch, torch.distributed as d, accelerate, transformers
assert d.is_available()" >/dev/null 2>&1; }

if [ -x "$VENV/bin/python" ] && works; then
  echo "setup_torch2: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') in $VENV"
  exit 0
fi
echo "setup_torch2: installing $TORCH into $VENV"
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 5 "$@"; }
pip --no-deps -r "$REQUIREMENTS"
if ! works; then
  echo "setup_torch2: torch does not import with this machine's CUDA libraries;" \
       "installing its full dependency set"
  pip "$TORCH"
fi
if ! works; then
  "$VENV/bin/python" -c "import torch" || true
  echo "setup_torch2: FAILED: torch 2.x in $VENV does not import (see above)" >&2
  exit 1
fi
echo "setup_torch2: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') in $VENV"
