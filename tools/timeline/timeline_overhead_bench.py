#!/usr/bin/env python3
"""What the timeline costs: gradient-synchronization steps with the timeline off and on,
interleaved in one job (hvd.start_timeline / hvd.stop_timeline between blocks), so that the
load of a shared machine hits both alike.

    horarun -np 2 /usr/bin/python3 tools/timeline/timeline_overhead_bench.py [--model resnet18]

A step: one hvd.allreduce_async per parameter of the model (its real shapes, last layer
first, as backward produces them), then synchronize all; every tensor is its own operation,
so the timeline records every phase of every tensor (the worst case for it: Hora's
DistributedOptimizer submits far fewer, fused, operations). `--tiny N` instead submits N
allreduces of 16 floats (the coordinator reduces them inline): steps that are nothing but
per-tensor overhead. Rank 0 prints the median step (the slowest rank's) per mode and the
overhead; --json writes them.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import hora.torch as hvd  # noqa: E402


def tensors(args):
    if args.tiny:
        return [torch.ones(16) for _ in range(args.tiny)]
    import resnet_shapes
    params = list(resnet_shapes.build(args.model).parameters())
    return [torch.ones_like(p.detach()) for p in reversed(params)]


def step(grads):
    handles = [hvd.allreduce_async(g, name="g%d" % i, op=hvd.Sum) for i, g in enumerate(grads)]
    for h in handles:
        hvd.synchronize(h)


def slowest(seconds):
    return hvd.allreduce(torch.tensor([seconds], dtype=torch.float64), op=hvd.Max,
                         name="bench.slowest").item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--tiny", type=int, default=0, help="N tiny allreduces per step instead")
    ap.add_argument("--blocks", type=int, default=8, help="blocks, alternating off and on")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per block")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    grads = tensors(args)
    tmp = tempfile.mkdtemp(prefix="hora_timeline_bench_")
    times = {"off": [], "on": []}
    for _ in range(3):
        step(grads)
    for block in range(args.blocks):
        mode = "on" if block % 2 else "off"
        if mode == "on":
            hvd.start_timeline(os.path.join(tmp, "b%d.json" % block))
        step(grads)  # untimed
        for _ in range(args.steps):
            hvd.barrier()
            t0 = time.perf_counter()
            step(grads)
            times[mode].append(slowest(time.perf_counter() - t0))
        if mode == "on":
            hvd.stop_timeline()
    if hvd.rank() == 0:
        med = {m: statistics.median(v) * 1000 for m, v in times.items()}
        what = "%d tiny allreduces" % args.tiny if args.tiny else "%s, %d tensors" % (
            args.model, len(grads))
        print("# %s per step, %d ranks, %d x %d steps per mode" % (
            what, hvd.size(), args.blocks // 2, args.steps))
        print("| timeline | median ms/step | n |")
        print("|---|---|---|")
        for m in ("off", "on"):
            print("| %s | %.3f | %d |" % (m, med[m], len(times[m])))
        print("overhead: %+.1f %%" % (100 * (med["on"] / med["off"] - 1)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"what": what, "size": hvd.size(), "median_ms": med,
                           "samples_s": times}, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
