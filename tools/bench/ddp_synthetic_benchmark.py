#!/usr/bin/env python3
"""The DDP side of the synthetic benchmark: the measurement of Horovod's
examples/pytorch/pytorch_synthetic_benchmark.py (same flags, model, data, optimizer, timing
loop and output lines), with torch's DistributedDataParallel over gloo instead of Hora.

    horarun -np 2 -x MASTER_PORT=29612 /usr/bin/python3 \
        tools/bench/ddp_synthetic_benchmark.py --model resnet18 --batch-size 8

horarun sets RANK and WORLD_SIZE as torchrun does (torchrun itself fails at start with
Debian's torch 1.13 on Python 3.11); without them it runs as a single process. Run by
tools/bench/synthetic_bench.sh beside the unchanged Horovod script.
"""

import argparse
import os
import timeit

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel
from torchvision import models


def parse_args():
    p = argparse.ArgumentParser(description="DDP synthetic benchmark")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-warmup-batches", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0,
                   help="DDP's bucket_cap_mb (25 is DDP's default)")
    p.add_argument("--no-cuda", action="store_true", help="accepted for the same command line; "
                   "this benchmark runs on CPU only")
    return p.parse_args()


def main():
    args = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=size)

    model = getattr(models, args.model)()
    # DDP broadcasts rank 0's parameters at construction, as broadcast_parameters does.
    model = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = optim.SGD(model.parameters(), lr=0.01 * size)
    data = torch.randn(args.batch_size, 3, 224, 224)
    target = torch.LongTensor(args.batch_size).random_() % 1000

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(s):
        if rank == 0:
            print(s, flush=True)

    log("Model: %s" % args.model)
    log("Batch size: %d" % args.batch_size)
    log("Number of CPUs: %d" % size)
    log("Running warmup...")
    timeit.timeit(step, number=args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        t = timeit.timeit(step, number=args.num_batches_per_iter)
        img_secs.append(args.batch_size * args.num_batches_per_iter / t)
        log("Iter #%d: %.1f img/sec per CPU" % (i, img_secs[-1]))
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log("Img/sec per CPU: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d CPU(s): %.1f +-%.1f" % (size, size * mean, size * conf))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
