#!/usr/bin/env bash
# Makes the interpreter Horovod's PyTorch examples run on (examples/horovod/, their tests in
# tests/python/test_horovod_examples.py): a virtual environment, $HORA_EXAMPLES_VENV (default
# /opt/hora/examples), over /usr/bin/python3's packages (Debian's torch 1.13 and
# torchvision 0.14), with the few PyPI packages the examples import that Debian lacks
# (tools/examples-requirements.txt). Idempotent.
# Usage: tools/setup_examples.sh          (called by tools/setup.sh, after apt)
set -euo pipefail

VENV="${HORA_EXAMPLES_VENV:-/opt/hora/examples}"
REQUIREMENTS="$(dirname "$0")/examples-requirements.txt"

works() { "$VENV/bin/python" -c "import torch, torchvision, tqdm, filelock
from torch.utils.tensorboard import SummaryWriter" >/dev/null 2>&1; }

if [ -x "$VENV/bin/python" ] && works; then
  echo "setup_examples: $VENV ready"
  exit 0
fi
echo "setup_examples: making $VENV"
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 5 --no-deps \
  -r "$REQUIREMENTS"
if ! works; then
  "$VENV/bin/python" -c "import torch, torchvision, tqdm, filelock
from torch.utils.tensorboard import SummaryWriter" || true
  echo "setup_examples: FAILED: $VENV cannot import what the examples need (see above)" >&2
  exit 1
fi
echo "setup_examples: $VENV ready"
