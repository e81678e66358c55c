#!/usr/bin/python3
"""4-byte allreduce latency through hora.torch's hvd.allreduce next to torch gloo's
dist.all_reduce in one job, and the CPU an idle job uses, for the steady path
(docs/design.md "Steady state"; docs/benchmarks-steady.md). Needs Debian's torch:

    HORA_STEADY=auto tools/launcher/horarun -np 2 /usr/bin/python3 tools/bench/steady_latency_bench.py

Latency: --rounds rounds of --iters back-to-back calls each of hvd.allreduce(t, name="lat",
op=Sum) (one fixed name, so the steady path can learn it), of hvd.allreduce(t, op=Sum)
without a name (a blocking unnamed call runs as "allreduce.noname.sync"), and
dist.all_reduce(t) on a gloo group of the same ranks, alternating, so all see the same
machine load; per call the time
from the call to its result, on rank 0. Printed: median and p90 of each, their ratio, and the
steady path's counters (hora.steady_stats).
Idle: every rank but the last submits one allreduce and waits for it (hvd.synchronize) while
the last rank sleeps --idle-seconds before it submits its own; each rank's process CPU time
over that wait (all threads), in percent of one core.
One line starting with "RESULT" carries everything, for tools/bench/steady_bench.sh.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import hora
import hora.torch as hvd


def quantiles(samples):
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(len(s) * 0.9))]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    a = p.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        coord = os.environ["HORA_COORDINATOR_ADDR"]
        os.environ["MASTER_PORT"] = str(int(coord.rsplit(":", 1)[1]) + 1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)

    t = torch.ones(1, dtype=torch.float32)
    # Warm up both (the steady path learns "lat" in its first calls).
    for _ in range(50):
        out = hvd.allreduce(t, name="lat", op=hvd.Sum)
        dist.all_reduce(t.clone())
    if out.item() != float(size):
        sys.exit("hvd.allreduce gave %r, want %r" % (out.item(), float(size)))

    hora_s, unnamed_s, gloo_s = [], [], []
    for _ in range(a.rounds):
        for _ in range(a.iters):
            t0 = time.perf_counter()
            hvd.allreduce(t, name="lat", op=hvd.Sum)
            hora_s.append(time.perf_counter() - t0)
        for _ in range(a.iters):
            t0 = time.perf_counter()
            out = hvd.allreduce(t, op=hvd.Sum)
            unnamed_s.append(time.perf_counter() - t0)
        if out.item() != float(size):
            sys.exit("unnamed hvd.allreduce gave %r, want %r" % (out.item(), float(size)))
        g = t.clone()
        for _ in range(a.iters):
            t0 = time.perf_counter()
            dist.all_reduce(g)
            gloo_s.append(time.perf_counter() - t0)
    stats = hora.steady_stats(0)

    # Idle: the last rank makes the others wait in synchronize.
    dist.barrier()
    c0, w0 = time.process_time(), time.monotonic()
    if rank == size - 1:
        time.sleep(a.idle_seconds)
    h = hvd.allreduce_async(t, name="idle", op=hvd.Sum)
    hvd.synchronize(h)
    idle_pct = 100.0 * (time.process_time() - c0) / (time.monotonic() - w0)
    idle = [0.0] * size
    idle[rank] = idle_pct
    idle_t = torch.tensor(idle, dtype=torch.float64)
    dist.all_reduce(idle_t)

    if rank == 0:
        hm, hp = quantiles(hora_s)
        um, up = quantiles(unnamed_s)
        gm, gp = quantiles(gloo_s)
        waiting = idle_t[:size - 1].tolist()
        print("RESULT steady=%s hvd_median_us=%.1f hvd_p90_us=%.1f unnamed_median_us=%.1f "
              "unnamed_p90_us=%.1f gloo_median_us=%.1f gloo_p90_us=%.1f ratio_median=%.3f "
              "ratio_p90=%.3f unnamed_ratio_median=%.3f fast=%d slow=%d entries=%d "
              "idle_cpu_pct_waiting=%s idle_cpu_pct_sleeper=%.2f"
              % (os.environ.get("HORA_STEADY", "auto"), hm * 1e6, hp * 1e6, um * 1e6, up * 1e6,
                 gm * 1e6, gp * 1e6, hm / gm, hp / gp, um / gm, stats["fast"], stats["slow"],
                 stats["entries"],
                 ",".join("%.2f" % x for x in waiting), idle_t[size - 1].item()))
        sys.stdout.flush()
    dist.barrier()
    hvd.shutdown()


if __name__ == "__main__":
    main()
