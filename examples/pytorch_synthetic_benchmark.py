#!/usr/bin/env python3
"""PyTorch synthetic benchmark, with the flags and output of Horovod's script of that name.

    horarun -np 2 /usr/bin/python3 examples/pytorch_synthetic_benchmark.py --no-cuda \
        --batch-size 8 --num-iters 3 --num-batches-per-iter 2

Trains a model (ResNet-50 by default) on random images through DistributedOptimizer and
reports images per second. Uses torchvision's models when torchvision is installed, else
the same shapes from resnet_shapes.py (resnet18/34/50/101/152).
"""

import argparse
import os
import sys
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim

import hora.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

parser = argparse.ArgumentParser(description="PyTorch Synthetic Benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str, default="resnet50", help="model to benchmark")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=10,
                    help="number of warm-up batches that don't count towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=10,
                    help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
parser.add_argument("--no-cuda", action="store_true", default=False,
                    help="disables CUDA training")
parser.add_argument("--use-adasum", action="store_true", default=False,
                    help="use adasum algorithm to do reduction")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                    help="apply gradient predivide factor in optimizer")
parser.add_argument("--image-size", type=int, default=224,
                    help="side of the square synthetic images (Hora addition)")
parser.add_argument("--num-classes", type=int, default=1000, help="classifier outputs")


def build_model(name, num_classes):
    try:
        from torchvision import models
        return getattr(models, name)(num_classes=num_classes)
    except ImportError:
        import resnet_shapes
        return resnet_shapes.build(name, num_classes)


def main():
    args = parser.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()
    hvd.init()
    if args.cuda:
        torch.cuda.set_device(hvd.local_rank())
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    model = build_model(args.model, args.num_classes)
    lr_scaler = hvd.size() if not args.use_adasum else 1  # Adasum does not scale the step
    if args.cuda:
        model.cuda()
    optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.LongTensor(args.batch_size).random_() % args.num_classes
    if args.cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step():
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()

    def log(s, nl=True):
        if hvd.rank() != 0:
            return
        print(s, end="\n" if nl else "", flush=True)

    log("Model: %s" % args.model)
    log("Batch size: %d" % args.batch_size)
    device = "GPU" if args.cuda else "CPU"
    log("Number of %ss: %d" % (device, hvd.size()))

    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per %s" % (x, img_sec, device))
        img_secs.append(img_sec)

    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log("Img/sec per %s: %.1f +-%.1f" % (device, img_sec_mean, img_sec_conf))
    log("Total img/sec on %d %s(s): %.1f +-%.1f" % (hvd.size(), device,
                                                    hvd.size() * img_sec_mean,
                                                    hvd.size() * img_sec_conf))
    hvd.shutdown()


if __name__ == "__main__":
    main()
