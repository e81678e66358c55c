#!/usr/bin/env python3
"""A language model's loss over a vocabulary-split head, two ways, in the same job:

  gather:  the head's logits allgathered (ColumnParallelLinear's gather_output=True), then
           F.cross_entropy on the whole [tokens, V] matrix on every rank;
  vocab:   hvd.vocab_parallel_cross_entropy on this rank's [tokens, V/T] slice.

Each iteration is the head's forward (a [tokens, d] x [d, V/T] matmul), the loss and its
backward; the median over --iters, the slowest rank's. Run on the ranks of one TP set:

    horarun -np 2 /usr/bin/python3 tools/bench/vocab_loss_bench.py --vocab 32000 --tokens 2048
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    n = hvd.size()
    padded = -(-args.vocab // n) * n
    head = {}
    for g in (True, False):  # the same weights
        torch.manual_seed(0)
        head[g] = hvd.ColumnParallelLinear(args.d, padded, bias=False, gather_output=g)
    x = torch.randn(args.tokens, args.d)
    y = torch.randint(args.vocab, (args.tokens,))

    def gather():
        logits = head[True](x)
        return F.cross_entropy(logits[:, :args.vocab], y)

    def vocab():
        return hvd.vocab_parallel_cross_entropy(head[False](x), y, vocab_size=args.vocab)

    losses, times = {}, {}
    for name, fn in (("gather", gather), ("vocab", vocab)):
        t = []
        for i in range(args.iters + 2):
            hvd.barrier()
            t0 = time.perf_counter()
            loss = fn()
            loss.backward()
            if i >= 2:
                t.append(time.perf_counter() - t0)
        losses[name] = loss.item()
        times[name] = hvd.allreduce(torch.tensor([statistics.median(t)]), op=hvd.Max,
                                    name="vocab_loss_bench." + name).item()
    if hvd.rank() == 0:
        logits_mib = 4.0 * args.tokens * padded / 2**20
        print("ranks %d, tokens %d, vocab %d, d %d: logits %.1f MiB whole, %.1f MiB a rank"
              % (n, args.tokens, args.vocab, args.d, logits_mib, logits_mib / n))
        for name in ("gather", "vocab"):
            print("%-7s %8.2f ms  loss %.6f" % (name, 1e3 * times[name], losses[name]))
        print("vocab / gather: %.2fx" % (times["vocab"] / times["gather"]))
    hvd.shutdown()


if __name__ == "__main__":
    main()
