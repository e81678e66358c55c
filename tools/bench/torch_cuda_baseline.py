#!/usr/bin/env python3
"""What the GPU machine gives torch alone, without Hora: the first part of tools/gpu_check.sh,
so that a failure or a slow figure later can be told apart from the sandbox.

  python3 tools/bench/torch_cuda_baseline.py

Measures, each as the median of timed repetitions after warm-up (CUDA events):
  - device-to-device copy of 256 MiB (GB/s counts the bytes copied once);
  - pinned host -> device and device -> host copies of 64 MiB (what a staged data plane
    moves);
  - torch.distributed's nccl all_reduce of 64 MiB float32 at world size 1 in this process.
The last line, for scripts:
  TORCH_CUDA_BASELINE gpu="NAME" d2d_gbs=X h2d_gbs=X d2h_gbs=X nccl_ar64m_us=X nccl=VERSION
"""

import os
import socket
import statistics

import torch
import torch.distributed as dist


def _timed_ms(fn, reps=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if not torch.cuda.is_available():
        raise SystemExit("torch.cuda.is_available() is False (torch %s)" % torch.__version__)
    dev = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(0)
    big = 256 << 20
    src = torch.empty(big, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    d2d = big / (_timed_ms(lambda: dst.copy_(src)) * 1e-3) / 1e9
    mid = 64 << 20
    host = torch.empty(mid, dtype=torch.uint8, pin_memory=True)
    on_dev = torch.empty(mid, dtype=torch.uint8, device=dev)
    h2d = mid / (_timed_ms(lambda: on_dev.copy_(host, non_blocking=True)) * 1e-3) / 1e9
    d2h = mid / (_timed_ms(lambda: host.copy_(on_dev, non_blocking=True)) * 1e-3) / 1e9
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)
    t = torch.ones(mid // 4, device=dev)
    ar = _timed_ms(lambda: dist.all_reduce(t)) * 1e3
    nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
    dist.destroy_process_group()
    print("device-to-device copy  256 MiB: %8.1f GB/s" % d2d)
    print("pinned host -> device   64 MiB: %8.1f GB/s" % h2d)
    print("device -> pinned host   64 MiB: %8.1f GB/s" % d2h)
    print("nccl all_reduce (size 1) 64 MiB: %8.1f us (NCCL %s)" % (ar, nccl))
    print('TORCH_CUDA_BASELINE gpu="%s" d2d_gbs=%.1f h2d_gbs=%.1f d2h_gbs=%.1f '
          'nccl_ar64m_us=%.1f nccl=%s' % (name, d2d, h2d, d2h, ar, nccl), flush=True)


if __name__ == "__main__":
    main()
