#!/usr/bin/env python3
"""Training step time of examples/gpt_char_lm.py's model: Hora's DistributedOptimizer vs
torch DDP (gloo), in one job, on the same batches.

    horarun -np 2 -x MASTER_PORT=29612 /usr/bin/python3 tools/bench/train_step_bench.py

Methods, each with its own copy of the same initial model and optimizer (AdamW, as in the
example):
  local   no communication (the compute floor)
  hora    hora.torch.DistributedOptimizer; step() synchronizes (hooks overlap backward)
  ddp     DistributedDataParallel(gloo, bucket_cap_mb=25)
A step is zero_grad + forward + loss + backward + optimizer.step(); every step starts after
a barrier (not timed) and counts as the slowest rank's time. Methods are interleaved in
rounds (blocks, each starting with one untimed step) so that load drift on a shared machine
hits all of them alike.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))

import hora.torch as hvd  # noqa: E402
import gpt_char_lm  # noqa: E402  (the example's model, data loading and batching)


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def slowest_rank(samples):
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, samples)
    return [max(col) for col in zip(*gathered)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per method")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds over all methods, each starting a method with one untimed "
                         "step (0: one round per step)")
    ap.add_argument("--methods", default="local,hora,ddp")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=96)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", default="")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        sys.exit("set MASTER_PORT (horarun -x MASTER_PORT=<free port>)")
    dist.init_process_group("gloo", rank=rank, world_size=size)

    text = gpt_char_lm.load_text("/usr/share/common-licenses/*")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    shard = len(data) // size
    data = data[rank * shard:(rank + 1) * shard]
    gen = torch.Generator().manual_seed(1000 + rank)
    n_batches = args.warmup + args.steps + 1
    batches = [gpt_char_lm.get_batch(data, args.batch_size, args.block_size, gen)
               for _ in range(n_batches)]

    def make_model():
        torch.manual_seed(1337)
        return gpt_char_lm.CharGPT(len(chars), args.block_size, args.n_layer, args.n_head,
                                   args.n_embd, 0.0)

    def make_opt(params):
        return torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01)

    methods = [m for m in args.methods.split(",") if m]
    setups = {}
    for m in methods:
        model = make_model()
        if m == "hora":
            opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                           named_parameters=model.named_parameters())
            fwd = model
        elif m == "ddp":
            # The causal masks are constant bool buffers, which gloo cannot broadcast.
            nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                model, [n for n, b in model.named_buffers() if b.dtype == torch.bool])
            fwd = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25,
                                                      broadcast_buffers=False)
            opt = make_opt(fwd.parameters())
        elif m == "local":
            fwd, opt = model, make_opt(model.parameters())
        else:
            raise ValueError("unknown method %r" % m)
        setups[m] = (fwd, opt)
    n_params = sum(p.numel() for p in make_model().parameters())
    n_tensors = len(list(make_model().parameters()))
    if rank == 0:
        print("# gpt_char_lm model: %d tensors, %.3f M parameters; batch %d x %d per rank; "
              "%d ranks, %d threads; %d timed steps per method in %d rounds, %d warm-up"
              % (n_tensors, n_params / 1e6, args.batch_size, args.block_size, size, threads,
                 args.steps, max(1, min(args.rounds or args.steps, args.steps)), args.warmup),
              flush=True)

    def step(m, i):
        fwd, opt = setups[m]
        x, y = batches[i]
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(fwd(x).reshape(-1, len(chars)), y.reshape(-1))
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    for m in methods:
        for i in range(args.warmup):
            step(m, i)
    samples = {m: [] for m in methods}
    rounds = max(1, min(args.rounds or args.steps, args.steps))
    per_round = [args.steps // rounds + (1 if i < args.steps % rounds else 0)
                 for i in range(rounds)]
    start = args.warmup
    for n in per_round:
        for m in methods:
            step(m, start)   # untimed: the first step after a method switch is not its own
            samples[m] += slowest_rank([step(m, start + i) for i in range(n)])
        start += n

    stats = {m: {"median": 1e3 * statistics.median(xs), "p90": 1e3 * percentile(xs, 0.9),
                 "n": len(xs)} for m, xs in samples.items()}
    # The same batches and the same initial state: Hora and DDP must agree on the result.
    check = {}
    if "hora" in setups and "ddp" in setups:
        a = torch.cat([p.detach().reshape(-1) for p in setups["hora"][0].parameters()])
        b = torch.cat([p.detach().reshape(-1) for p in setups["ddp"][0].module.parameters()])
        check["max_abs_diff_hora_vs_ddp"] = (a - b).abs().max().item()
    if rank == 0:
        print("| method | median ms/step | p90 ms | n |")
        print("|---|---|---|---|")
        for m, s in stats.items():
            print("| %s | %.2f | %.2f | %d |" % (m, s["median"], s["p90"], s["n"]))
        for a, b in (("hora", "ddp"), ("hora", "local"), ("ddp", "local")):
            if a in stats and b in stats:
                print("%s / %s = %.3f" % (a, b, stats[a]["median"] / stats[b]["median"]))
        if check:
            print("parameters after training, largest |hora - ddp|: %.3g"
                  % check["max_abs_diff_hora_vs_ddp"])
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"size": size, "threads": threads, "label": args.label,
                           "tensors": n_tensors, "params": n_params, "stats_ms": stats,
                           "samples_s": samples, "check": check}, f, indent=1)
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
