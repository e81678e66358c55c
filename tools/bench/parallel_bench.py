#!/usr/bin/env python3
"""Memory per rank and step time of the example GPT under each data-parallel strategy:
hora's DistributedOptimizer, hora's ZeroOptimizer stages 1, 2 and 3, and torch's
DistributedDataParallel + ZeroRedundancyOptimizer over gloo (what users pick for ZeRO-1),
in one job, same model, data and steps.

    horarun -np 2 /usr/bin/python3 tools/bench/parallel_bench.py
    horarun -np 4 /usr/bin/python3 tools/bench/parallel_bench.py --n-layer 4 --n-embd 128

Memory is counted in tensors, not read from the allocator: parameters, gradients (.grad and
ZeRO's averaged chunks, as held when the optimizer steps) and optimizer state that this rank
holds at the last step (ZeroOptimizer.step_memory); for ZeRO-3 also the most parameter bytes
held at once during a step (gathered units included). Step time is
the median of --steps timed steps after --warmup. Rank 0 prints a markdown table (means over
ranks, and ratios to DistributedOptimizer).
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
from gpt_char_lm import CharGPT  # noqa: E402

import hora.torch as hvd  # noqa: E402

VOCAB = 86


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--modes", default="ddp,zero1,zero2,zero3,torch_zero1")
    return p.parse_args()


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def state_bytes(opt):
    return nbytes(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v))


def batch(args, step):
    g = torch.Generator().manual_seed(1000 * step + hvd.rank())
    x = torch.randint(VOCAB, (args.batch_size, args.block_size + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def build(args):
    torch.manual_seed(0)
    return CharGPT(VOCAB, args.block_size, args.n_layer, args.n_head, args.n_embd, 0.0)


def run(args, mode):
    model = build(args)
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    peak = [0]
    ddp = None
    if mode == "ddp":
        opt = hvd.DistributedOptimizer(adam, named_parameters=model.named_parameters())
    elif mode.startswith("zero"):
        opt = hvd.ZeroOptimizer(adam, model=model, stage=int(mode[-1]))
        if opt.stage == 3:
            def watch(*_):
                peak[0] = max(peak[0], opt.memory_bytes()["parameters"])
            for m in model.modules():
                m.register_forward_hook(watch)
    else:
        import torch.distributed as dist
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel
        if not dist.is_initialized():
            token = os.environ.get("HORA_JOB_TOKEN", "0")
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(20000 + int(token[:4], 16) % 20000))
            dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
        # the attention masks are bool buffers, which gloo cannot broadcast (and need not)
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            model, [n for n, _ in model.named_buffers()])
        ddp = DistributedDataParallel(model)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      lr=1e-3)
    net = ddp or model
    times = []
    for step in range(args.warmup + args.steps):
        x, y = batch(args, step)
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(net(x).reshape(-1, VOCAB), y.reshape(-1)).backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    if mode.startswith("zero"):
        mem = dict(opt.step_memory)
        mem["peak_parameters"] = max(peak[0], mem["parameters"])
    else:
        inner = opt.optim if mode == "torch_zero1" else opt
        mem = {"parameters": nbytes(model.parameters()),
               "gradients": nbytes(p.grad for p in model.parameters()),
               "optimizer_state": state_bytes(inner)}
        mem["peak_parameters"] = mem["parameters"]
    mem["total"] = mem["parameters"] + mem["gradients"] + mem["optimizer_state"]
    mem["step_s"] = statistics.median(times)
    return mem


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)
    keys = ["parameters", "peak_parameters", "gradients", "optimizer_state", "total", "step_s"]
    rows = {}
    for mode in args.modes.split(","):
        mem = run(args, mode)
        print("rank %d %-11s %s" % (hvd.rank(), mode, " ".join(
            "%s=%s" % (k, ("%.4f" % mem[k]) if k == "step_s" else mem[k]) for k in keys)),
            flush=True)
        got = hvd.allgather(torch.tensor([[float(mem[k]) for k in keys]], dtype=torch.float64),
                            name="bench.%s" % mode)
        rows[mode] = got.mean(0).tolist()
    if hvd.rank() == 0:
        n_params = sum(p.numel() for p in build(args).parameters())
        print("\n%d ranks, char GPT %d layers x %d wide (%d parameters, fp32), AdamW, "
              "batch %d x %d per rank; means over ranks\n" % (
                  hvd.size(), args.n_layer, args.n_embd, n_params, args.batch_size,
                  args.block_size))
        print("| strategy | parameters | peak parameters | gradients | optimizer state | total "
              "| total vs DDP | step (ms) | step vs DDP |")
        print("|---|---|---|---|---|---|---|---|---|")
        base = rows.get("ddp")
        for mode, r in rows.items():
            print("| %s | %.0f KiB | %.0f KiB | %.0f KiB | %.0f KiB | %.0f KiB | %s | %.1f | %s |"
                  % ((mode,) + tuple(v / 1024 for v in r[:5]) + (
                      "%.2f" % (r[4] / base[4]) if base else "-", 1000 * r[5],
                      "%.2f" % (r[5] / base[5]) if base else "-")))
        sys.stdout.flush()
    hvd.shutdown()


if __name__ == "__main__":
    main()
