#!/usr/bin/env bash
# Installs every system package Hora needs (Debian 12, non-interactive, idempotent), then
# torch 2.x from PyPI in its own environment (tools/setup_torch2.sh), and the environment
# Horovod's examples run in (tools/setup_examples.sh).
# Usage: tools/setup.sh            (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  bazel-bootstrap g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev catch2
  libopenmpi-dev openmpi-bin libpmix-dev libgloo-dev
  python3-torch python3-torchvision python3-numpy python3-pytest python3-matplotlib python3-venv
  openssh-server openssh-client iproute2 procps openssl patchelf
  clang-14 clang-format  # tools/check_tsa.sh (thread-safety analysis, in CI), tools/check_format.sh
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
$SUDO "$(dirname "$0")/setup_torch2.sh"
$SUDO "$(dirname "$0")/setup_examples.sh"
echo "setup: done"
