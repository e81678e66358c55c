#!/usr/bin/env python3
"""Where a pipeline stage's wait comes from: the example GPT (examples/gpt_parallel.py) over
every rank as one pipeline (PP = job size), timed per task by Pipeline.stats["tasks"].

    horarun -np 2 /usr/bin/python3 tools/bench/pipeline_bubble.py --micro-batches 4
    horarun -np 2 /usr/bin/python3 tools/bench/pipeline_bubble.py --schedule interleaved \\
        --virtual-stages 2 --n-layer 4 --balance profile

For each stage, rank 0 prints the means over the timed steps: the step, compute, wait
(split into receives of activations, of gradients, and the wait for the step's sends at
its end), the rest (Python between tasks), the measured bubble (wait / step), and two
bubbles of the schedule replayed by pipeline_schedule.simulate with free transfers: with
every chunk the same cost ("theory", (S-1)/(vM+S-1)) and with each chunk's measured
median forward and backward ("this cut": the theory plus the stages' imbalance). The gap
between "this cut" and the measured bubble is what the wire, the receives and the
machine add. `recv floor` is the shortest receive of the step (the cost of a receive whose
message had already arrived).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
from gpt_parallel import build  # noqa: E402

import hora.torch as hvd  # noqa: E402
from hora.torch.pipeline_schedule import simulate  # noqa: E402

VOCAB = 96


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=96)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe", "interleaved"))
    p.add_argument("--virtual-stages", type=int, default=1)
    p.add_argument("--balance", default="even", help="even, profile or counts: 2,1,1")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    return p.parse_args()


def batch(args, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, VOCAB, (args.batch_size, args.block_size), generator=g)
    return x, torch.randint(0, VOCAB, x.shape, generator=g)


def summary(stats, stage, n, v):
    """This stage's figures over the timed steps, as one float vector."""
    def receives(t):
        g = t[2] * n + stage
        return g > 0 if t[0] == "F" else g < n * v - 1

    def mean(key):
        return statistics.mean(s[key] for s in stats)

    def waits(kind):
        return statistics.mean(sum(t[4] for t in s["tasks"] if t[0] == kind) for s in stats)

    costs = []
    for kind in ("F", "B"):
        for k in range(v):
            costs.append(statistics.median(t[5] for s in stats for t in s["tasks"]
                                           if t[0] == kind and t[2] == k))
    floor = statistics.median(min(t[4] for t in s["tasks"] if receives(t)) for s in stats)
    step, comp, wait = mean("step_s"), mean("compute_s"), mean("wait_s")
    return [step, comp, wait, waits("F"), waits("B"), mean("sends_s"), step - comp - wait,
            wait / step, floor] + costs


def split_waits(traces, n, v):
    """Each stage's receive waits split at the moment the peer's task that sends the data
    ended (the send; one host: perf_counter is the same clock in every process): before,
    the peer was still computing (the schedule's bubble); after, the transfer was being
    matched and moved. Returns per stage (ms before, ms after per step, median ms after)."""
    out = []
    steps = len(traces[0])
    for s in range(n):
        before = after = 0.0
        per = []
        for step in range(steps):
            ends = {}
            for st in range(n):
                start, rows = traces[st][step]
                for kind, i, k, t0, w, c in rows:
                    ends[(kind, i, k * n + st)] = start + t0 + w + c
            start, rows = traces[s][step]
            for kind, i, k, t0, w, c in rows:
                g = k * n + s
                src = (kind, i, g - 1) if kind == "F" else (kind, i, g + 1)
                if src not in ends:
                    continue
                a0, a1 = start + t0, start + t0 + w
                sent = ends[src]
                before += max(0.0, min(a1, sent) - a0)
                late = max(0.0, a1 - max(a0, sent))
                after += late
                per.append(late)
        out.append((1e3 * before / steps, 1e3 * after / steps,
                    1e3 * statistics.median(per) if per else 0.0))
    return out


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    n, v = hvd.size(), args.virtual_stages
    grid = hvd.make_grid(pp=n)
    margs = argparse.Namespace(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                               block_size=args.block_size, tp=1)
    torch.manual_seed(0)
    whole = build(margs, VOCAB, grid)
    micro = args.batch_size // args.micro_batches
    balance = args.balance
    if balance == "even":
        balance = None
    elif balance != "profile":
        balance = [int(c) for c in balance.split(",")]
    def loss_fn(logits, y):
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    profile = balance == "profile"
    sample = tuple(t[:micro] for t in batch(args, 0)) if profile else None
    pipe = hvd.Pipeline.from_sequential(
        whole, grid.pp_set, micro_batches=args.micro_batches, schedule=args.schedule,
        virtual_stages=v, balance=balance, sample=sample, loss_fn=loss_fn if profile else None)
    opt = torch.optim.AdamW(pipe.stage.parameters(), lr=1e-3)

    stats = []
    t0 = time.time()
    for step in range(args.warmup + args.steps):
        opt.zero_grad()
        x, y = batch(args, step)
        pipe.train_step(x if pipe.is_first else None, y if pipe.is_last else None, loss_fn)
        opt.step()
        if step >= args.warmup:
            stats.append(dict(pipe.stats))
    wall = time.time() - t0
    rows = hvd.allgather(torch.tensor([summary(stats, grid.pp_rank, n, v)], dtype=torch.float64),
                         name="bubble.summary").tolist()
    traces = hvd.allgather_object([(s["started"], s["tasks"]) for s in stats],
                                  name="bubble.traces")
    if hvd.rank() != 0:
        return
    fwd = [0.0] * (n * v)
    bwd = [0.0] * (n * v)
    for s, row in enumerate(rows):
        for k in range(v):
            fwd[k * n + s], bwd[k * n + s] = row[9 + k], row[9 + v + k]
    _, ideal = simulate(args.schedule, n, args.micro_batches, v)
    _, cut = simulate(args.schedule, n, args.micro_batches, v, fwd, bwd)
    print("pipeline %s, S=%d, M=%d, v=%d, balance %s, %d layers x %d, %d timed steps (%.1f s "
          "in all), torch threads %d, cores %d, load %.2f" % (
              args.schedule, n, args.micro_batches, v, pipe.balance, args.n_layer,
              args.n_embd, args.steps, wall, args.threads, len(os.sched_getaffinity(0)),
              os.getloadavg()[0]))
    print("| stage | step ms | compute ms | wait ms | in F recv | in B recv | end sends | "
          "other ms | recv floor ms | bubble measured | this cut | theory |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s, r in enumerate(rows):
        print("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f%% | %.1f%% | "
              "%.1f%% |" % (s, 1e3 * r[0], 1e3 * r[1], 1e3 * r[2], 1e3 * r[3], 1e3 * r[4],
                            1e3 * r[5], 1e3 * r[6], 1e3 * r[8], 100 * r[7], 100 * cut[s],
                            100 * ideal[s]))
    print("mean over stages: bubble %.1f%%, this cut %.1f%%, theory %.1f%%; step %.1f ms" % (
        100 * statistics.mean(r[7] for r in rows), 100 * statistics.mean(cut),
        100 * statistics.mean(ideal), 1e3 * statistics.mean(r[0] for r in rows)))
    wire = split_waits(traces, n, v)
    print("wait split by when the peer sent (ms per step): %s" % ", ".join(
        "stage %d: %.1f before (the peer computing), %.1f after (the wire), median %.2f "
        "per message" % (s, a, b, c) for s, (a, b, c) in enumerate(wire)))
    print("per chunk forward / backward ms: %s" % ", ".join(
        "%d: %.1f / %.1f" % (g, 1e3 * f, 1e3 * b) for g, (f, b) in enumerate(zip(fwd, bwd))))


if __name__ == "__main__":
    main()
