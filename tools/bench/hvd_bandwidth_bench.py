#!/usr/bin/python3
"""Large allreduces through hvd.allreduce next to torch gloo's dist.all_reduce, in one job
(docs/benchmarks-cross-host.md "The tcp backend"): for each size of --sizes, float32 sum
of a tensor filled with real values, --iters timed calls of each, alternating in rounds so
that both see the same machine; per call the slowest rank's time (a barrier-free max over
ranks of each rank's median), busbw = bytes * 2 (n - 1) / n / time in GB/s, and the ratio
hvd busbw / gloo busbw. Rank 0 prints one line per size:

    RESULT bytes=B hvd_ms=X gloo_ms=Y hvd_busbw=X gloo_busbw=Y ratio=R

    horarun -np 4 -H a:2,b:2 -x MASTER_ADDR=<a's address> -x GLOO_SOCKET_IFNAME=eth0 \\
        /usr/bin/python3 tools/bench/hvd_bandwidth_bench.py --sizes 1M,64M

Needs Debian's torch (/usr/bin/python3) and the hora package on PYTHONPATH. Asserts nothing
about time; checks each result once.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import hora.torch as hvd


def parse_bytes(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    return int(t[:-1]) * mult[t[-1]] if t[-1] in mult else int(t)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1M,64M")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        coord = os.environ["HORA_COORDINATOR_ADDR"]
        os.environ["MASTER_PORT"] = str(int(coord.rsplit(":", 1)[1]) + 1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)

    for nbytes in [parse_bytes(s) for s in a.sizes.split(",")]:
        n = nbytes // 4
        t = torch.arange(n, dtype=torch.float32) % 7 + rank  # real values, not the zero page
        want = (torch.arange(n, dtype=torch.float32) % 7) * size + size * (size - 1) / 2
        iters = a.iters if nbytes >= (8 << 20) else a.iters * 10
        out = hvd.allreduce(t, name="bw%d" % nbytes, op=hvd.Sum)
        g = t.clone()
        dist.all_reduce(g)
        if not torch.equal(out, want) or not torch.equal(g, want):
            sys.exit("wrong result at %d bytes" % nbytes)
        hvd_s, gloo_s = [], []
        for _ in range(a.rounds):
            dist.barrier()
            for _ in range(iters):
                t0 = time.perf_counter()
                hvd.allreduce_(t, name="bw%d" % nbytes, op=hvd.Sum)
                hvd_s.append(time.perf_counter() - t0)
            dist.barrier()
            for _ in range(iters):
                t0 = time.perf_counter()
                dist.all_reduce(g)
                gloo_s.append(time.perf_counter() - t0)
        med = torch.tensor([statistics.median(hvd_s), statistics.median(gloo_s)],
                           dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        hm, gm = med.tolist()
        factor = 2.0 * (size - 1) / size * nbytes / 1e9
        if rank == 0:
            print("RESULT bytes=%d hvd_ms=%.3f gloo_ms=%.3f hvd_busbw=%.3f gloo_busbw=%.3f "
                  "ratio=%.2f" % (nbytes, hm * 1e3, gm * 1e3, factor / hm, factor / gm, gm / hm))
            sys.stdout.flush()
    dist.barrier()
    hvd.shutdown()


if __name__ == "__main__":
    main()
