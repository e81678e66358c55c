#!/usr/bin/env python3
# Run on a GPU machine: horarun -np 1 python tools/bench/gpu_allreduce_bench.py [--max-bytes N]
"""hora.torch allreduce on CUDA tensors at world size 1, 4 B .. 256 MiB, next to
torch.distributed's nccl backend at world size 1 in the same process, as time ratios.

Both sides are measured the same way: in-place sum of one float32 tensor, each call waited
for before the next (hora: synchronize; torch: all_reduce then torch.cuda.synchronize), after
warm-up calls; the median of the per-call times is reported. Ratio = hora time / torch time
(below 1: hora is faster). At world size 1 NCCL moves no data between GPUs, so these figures
measure each stack's per-call overhead (small sizes) and its device copies (large sizes).
The last line is the summary tools/gpu_check.sh greps:
  GPU_ALLREDUCE_BENCH sizes=14 median_ratio=R small_ratio=R large_ratio=R
"""

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist

import hora.torch as hvd


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iters(nbytes):
    return max(5, min(200, (64 << 20) // max(nbytes, 1)))


def _median_us(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    args = p.parse_args()
    hvd.init()
    if hvd.size() != 1:
        raise SystemExit("run at world size 1: horarun -np 1 python %s" % __file__)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % _free_port(), rank=0,
                            world_size=1)
    sizes = []
    b = 4
    while b <= args.max_bytes:
        sizes.append(b)
        b *= 4
    print("%12s %8s %12s %12s %8s" % ("bytes", "iters", "hora_us", "torch_us", "ratio"))
    ratios = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4, device="cuda")
        iters = _iters(nbytes)

        def hora_call():
            hvd.allreduce_(t, op=hvd.Sum, name="bench.%d" % nbytes)

        def torch_call():
            dist.all_reduce(t)
            torch.cuda.synchronize()

        h = _median_us(hora_call, iters)
        d = _median_us(torch_call, iters)
        ok = bool(torch.all(t == 1.0).item())  # size 1: the sum is the identity
        if not ok:
            raise SystemExit("wrong result at %d bytes" % nbytes)
        ratios.append(h / d)
        print("%12d %8d %12.1f %12.1f %8.2f" % (nbytes, iters, h, d, h / d), flush=True)
    small = [r for s, r in zip(sizes, ratios) if s <= 64 << 10]
    large = [r for s, r in zip(sizes, ratios) if s >= 16 << 20]
    dist.destroy_process_group()
    hvd.shutdown()
    print("GPU_ALLREDUCE_BENCH sizes=%d median_ratio=%.2f small_ratio=%.2f large_ratio=%.2f"
          % (len(sizes), statistics.median(ratios),
             statistics.median(small) if small else float("nan"),
             statistics.median(large) if large else float("nan")), flush=True)


if __name__ == "__main__":
    main()
