#!/usr/bin/env python3
"""The DDP side of the synthetic benchmark: the measurement of Horovod's
examples/pytorch/pytorch_synthetic_benchmark.py (same flags, model, data, optimizer, timing
loop and output lines), with torch's DistributedDataParallel over gloo instead of Hora.

    horarun -np 2 -x MASTER_PORT=29612 /usr/bin/python3 \
        tools/bench/ddp_synthetic_benchmark.py --model resnet18 --batch-size 8

horarun sets RANK and WORLD_SIZE as torchrun does (torchrun itself fails at start with
Debian's torch 1.13 on Python 3.11); without them it runs as a single process. Run by
tools/bench/synthetic_bench.sh beside the unchanged Horovod script. With --cuda it trains on
GPU LOCAL_RANK over the nccl backend with gradient_as_bucket_view (tools/gpu_check.sh).
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
                   "the CPU is the default")
    p.add_argument("--cuda", action="store_true",
                   help="train on GPU LOCAL_RANK over nccl, gradient_as_bucket_view=True")
    return p.parse_args()


def main():
    args = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ.setdefault("MASTER_PORT", "29500")
    cuda = args.cuda and not args.no_cuda
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=size)
    device = torch.device("cpu")
    unit = "CPU"
    ddp_args = {}
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        unit = "GPU"
        ddp_args = {"device_ids": [device], "gradient_as_bucket_view": True}

    model = getattr(models, args.model)().to(device)
    # DDP broadcasts rank 0's parameters at construction, as broadcast_parameters does.
    model = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb, **ddp_args)
    optimizer = optim.SGD(model.parameters(), lr=0.01 * size)
    data = torch.randn(args.batch_size, 3, 224, 224, device=device)
    target = (torch.LongTensor(args.batch_size).random_() % 1000).to(device)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()  # as the Horovod script's timing sees the step end

    def log(s):
        if rank == 0:
            print(s, flush=True)

    log("Model: %s" % args.model)
    log("Batch size: %d" % args.batch_size)
    log("Number of %ss: %d" % (unit, size))
    log("Running warmup...")
    timeit.timeit(step, number=args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        t = timeit.timeit(step, number=args.num_batches_per_iter)
        img_secs.append(args.batch_size * args.num_batches_per_iter / t)
        log("Iter #%d: %.1f img/sec per %s" % (i, img_secs[-1], unit))
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log("Img/sec per %s: %.1f +-%.1f" % (unit, mean, conf))
    log("Total img/sec on %d %s(s): %.1f +-%.1f" % (size, unit, size * mean, size * conf))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
