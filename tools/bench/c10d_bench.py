#!/usr/bin/env python3
"""torch.distributed on "hora" vs on "gloo", side by side in one job (torch 2.x):

    horarun -np 2 /opt/hora/torch2/bin/python tools/bench/c10d_bench.py [--rounds 3]

The default group runs on hora; a second group of the same ranks on gloo
(dist.new_group(backend="gloo")). Each measurement alternates the two, round by round, so
both see the same machine load. Reported per line: the median time of each and gloo/hora
(above 1: hora is faster).

  collectives  all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
               all_to_all_single of float32 tensors from 8 B to 64 MiB (the size is the
               all_reduce tensor, the gathered output, the reduce-scatter input and the
               all-to-all input)
  p2p          send/recv ping-pong between ranks 0 and 1 (the others idle), float32 from
               4 B to 64 MiB: the time of one way (half a round trip)
  ddp          DistributedDataParallel step (backward with the reducer's allreduces) on
               ResNet-50- and BERT-base-shaped gradients (tools/bench/grad_sync_bench.py's
               ShapeModel: backward does nothing but produce the gradients, so the step is
               the communication DDP cannot hide)

Times are the slowest rank's (a max-allreduce over gloo after each measurement).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hora.torch.distributed  # noqa: E402,F401 - registers "hora"
from grad_sync_bench import SHAPES, ShapeModel  # noqa: E402

# 8 bytes: the smallest that 2 ranks can gather and scatter in equal float parts.
SIZES = [8, 256, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def slowest(seconds, gloo):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def time_op(fn, iters, gloo):
    fn()  # warm up (and negotiate names once)
    dist.barrier(group=gloo)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return slowest((time.perf_counter() - start) / iters, gloo)


def collectives(args, groups, gloo, n):
    rows = []
    for size in SIZES:
        count = size // 4
        iters = max(3, min(200, (64 << 20) // size // 4))
        for kind in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                     "all_to_all_single"):
            samples = {name: [] for name in groups}
            for _ in range(args.rounds):
                for name, group in groups.items():
                    if kind == "all_reduce":
                        t = torch.ones(count)
                        fn = lambda: dist.all_reduce(t, group=group)  # noqa: E731
                    elif kind == "all_gather_into_tensor":
                        out, inp = torch.empty(count), torch.ones(count // n)
                        fn = lambda: dist.all_gather_into_tensor(out, inp, group=group)  # noqa
                    elif kind == "reduce_scatter_tensor":
                        inp, out = torch.ones(count), torch.empty(count // n)
                        fn = lambda: dist.reduce_scatter_tensor(out, inp, group=group)  # noqa
                    else:
                        inp, out = torch.ones(count), torch.empty(count)
                        fn = lambda: dist.all_to_all_single(out, inp, group=group)  # noqa
                    samples[name].append(time_op(fn, iters, gloo))
            rows.append(("%s %s" % (kind, human(size)),
                         {k: statistics.median(v) for k, v in samples.items()}))
    return rows


def p2p(args, groups, gloo):
    rank = dist.get_rank()
    rows = []
    for size in [4, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]:
        iters = max(5, min(500, (256 << 20) // size // 8))
        samples = {name: [] for name in groups}
        for _ in range(args.rounds):
            for name, group in groups.items():
                t = torch.ones(size // 4)

                def pingpong(t=t, group=group):
                    if rank == 0:
                        dist.send(t, 1, group=group)
                        dist.recv(t, 1, group=group)
                    elif rank == 1:
                        dist.recv(t, 0, group=group)
                        dist.send(t, 0, group=group)
                samples[name].append(time_op(pingpong, iters, gloo) / 2)
        rows.append(("send/recv one way %s" % human(size),
                     {k: statistics.median(v) for k, v in samples.items()}))
    return rows


def ddp(args, groups, gloo):
    from torch.nn.parallel import DistributedDataParallel as DDP
    rows = []
    for model_name in ("resnet50", "bert-base"):
        shapes = SHAPES[model_name]()
        models = {name: DDP(ShapeModel(shapes), process_group=group, bucket_cap_mb=25)
                  for name, group in groups.items()}
        samples = {name: [] for name in groups}
        for _ in range(args.rounds):
            for name, model in models.items():
                def step(model=model):
                    model().backward()
                samples[name].append(time_op(step, args.steps, gloo))
        rows.append(("DDP step %s (%d tensors)" % (model_name, len(shapes)),
                     {k: statistics.median(v) for k, v in samples.items()}))
    return rows


def human(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="alternations of hora and gloo")
    p.add_argument("--steps", type=int, default=5, help="DDP steps per measurement")
    p.add_argument("--only", choices=["collectives", "p2p", "ddp"], default=None)
    args = p.parse_args()
    dist.init_process_group("hora")
    n = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    groups = {"hora": None, "gloo": gloo}
    rows = []
    if args.only in (None, "collectives"):
        rows += collectives(args, groups, gloo, n)
    if args.only in (None, "p2p"):
        rows += p2p(args, groups, gloo)
    if args.only in (None, "ddp"):
        rows += ddp(args, groups, gloo)
    if dist.get_rank() == 0:
        print("c10d_bench: %d ranks, torch %s, %d rounds; median of the slowest rank"
              % (n, torch.__version__, args.rounds))
        print("%-44s %12s %12s %10s" % ("", "hora", "gloo", "gloo/hora"))
        for label, t in rows:
            print("%-44s %10.1f us %10.1f us %9.2fx" % (label, t["hora"] * 1e6,
                                                       t["gloo"] * 1e6, t["gloo"] / t["hora"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
