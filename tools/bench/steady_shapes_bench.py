#!/usr/bin/env python3
"""Blocking calls whose shape the steady path learned only lately (docs/benchmarks-steady.md
"Across hosts: readiness agreed, then one collective"), median time per call on rank 0:

  grouped   hvd.grouped_allreduce of 8 tensors of 1-8 floats (the coordinator fuses them)
  alltoall  hvd.alltoall with uneven splits, the same every call: rank r sends
            ((d + r) % 3 + 1) x ROWS rows of 256 floats to rank d

    horarun -np 2 [-H ...] /usr/bin/python3 tools/bench/steady_shapes_bench.py [--calls N]
        [--rows ROWS]

Run it under HORA_STEADY=auto and =off (or two libraries by HORA_LIBRARY) for the ratio.
Prints one line per kind with hora.steady_stats() after it. Nothing here asserts a time."""

import argparse
import statistics
import time

import torch

import hora
import hora.torch as hvd


def timed(calls, fn):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    rest = sorted(times[calls // 4:])  # the first quarter learns and warms up
    return statistics.median(rest), rest[int(0.9 * (len(rest) - 1))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--rows", type=int, default=64)
    args = p.parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    small = [torch.ones(k + 1) for k in range(8)]
    splits = [((d + rank) % 3 + 1) * args.rows for d in range(size)]
    rows = torch.randn(sum(splits), 256)
    kinds = [
        ("grouped", lambda: hvd.grouped_allreduce(small, name="metrics", op=hvd.Sum)),
        ("alltoall", lambda: hvd.alltoall(rows, splits=torch.tensor(splits), name="route")),
    ]
    for kind, fn in kinds:
        median, p90 = timed(args.calls, fn)
        if rank == 0:
            print("%s: median %.1f us, p90 %.1f us, %d ranks; steady %s"
                  % (kind, median, p90, size, hora.steady_stats()), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
