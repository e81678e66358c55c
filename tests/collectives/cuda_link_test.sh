#!/usr/bin/env bash
# A .so linking //collectives/cuda:batch_copy (PIC objects, the static CUDA runtime) needs
# neither libcudart nor libcuda at load time (readelf -d), loads here, and its Create(0)
# answers: 0 with a GPU, UNAVAILABLE (9) without a driver.
set -euo pipefail
so="$1"
needed="$(readelf -d "$so" | awk '/\(NEEDED\)/ {gsub(/[\[\]]/, "", $5); print $5}')"
echo "NEEDED of $(basename "$so"): $(echo $needed)"
if grep -E '^lib(cudart|cuda|nvrtc|nccl)' <<<"$needed"; then
  echo "FAIL: the library needs a CUDA shared library at load time"; exit 1
fi
if readelf -r "$so" | grep -q 'R_X86_64_32[^S]\|R_X86_64_32S'; then
  echo "FAIL: non-PIC relocations in the shared library"; exit 1
fi
code="$(/usr/bin/python3 -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).hora_cuda_probe_create())' "$so")"
echo "BatchCopier::Create(0) -> code $code"
if [ -e /proc/driver/nvidia/version ]; then want=0; else want=9; fi
if [ "$code" != "$want" ]; then echo "FAIL: expected code $want"; exit 1; fi
echo "PASS"
