#!/usr/bin/env python3
"""The example char GPT (gpt_char_lm.py) trained with a DP x TP x PP layout and a ZeRO stage.

    horarun -np 4 /usr/bin/python3 examples/gpt_parallel.py --tp 2            # TP 2 x DP 2
    horarun -np 4 /usr/bin/python3 examples/gpt_parallel.py --pp 2 --zero 1   # PP 2 x DP 2
    horarun -np 2 /usr/bin/python3 examples/gpt_parallel.py --zero 3          # DP 2, ZeRO-3
    horarun -np 4 /usr/bin/python3 examples/gpt_parallel.py --tp 2 --pp 2     # TP 2 x PP 2
    horarun -np 2 /usr/bin/python3 examples/gpt_parallel.py --tp 2 --sp       # sequence parallel

The job's ranks form a grid (hvd.make_grid: tp fastest, then dp, then pp). Attention and
MLP are Megatron-LM's: q|k|v one ColumnParallelLinear split by heads, the projection a
RowParallelLinear; fc1 column, fc2 row; the token embedding a VocabParallelEmbedding and the
head a ColumnParallelLinear over the vocabulary (padded to a multiple of tp) whose logits stay
split: the loss is hvd.vocab_parallel_cross_entropy of the slices. With --sp the
activations between the blocks hold 1/tp of the sequence on each TP rank (sequence
parallelism: LayerNorms, residuals and the position embedding on slices). With --pp the
blocks are cut into stages (hvd.Pipeline, --micro-batches, --schedule). Gradients are
averaged over the DP set by DistributedOptimizer, or by ZeroOptimizer with --zero 1|2|3.
Rank 0 prints the loss; every rank prints the bytes of parameters, gradients and optimizer
state it holds. The job fails (exit 1) if the training loss did not fall.
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_char_lm import get_batch, load_text, lr_at  # noqa: E402

import hora.torch as hvd  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--sp", action="store_true",
                   help="sequence parallelism over the TP set (--block-size divisible by tp)")
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3),
                   help="ZeRO stage over the DP set (0: DistributedOptimizer)")
    p.add_argument("--micro-batches", type=int, default=4, help="with --pp")
    p.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe", "interleaved"))
    p.add_argument("--virtual-stages", type=int, default=1,
                   help="chunks per stage (with --schedule interleaved)")
    p.add_argument("--balance", default="even", choices=("even", "profile"),
                   help="cut the stages by module count or by a profile of one micro-batch")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16, help="sequences per DP rank")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=96)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--text-glob", default="/usr/share/common-licenses/*")
    return p.parse_args()


class ParallelAttention(nn.Module):
    """The first half of gpt_char_lm's Block, x + attention(ln(x)), with the heads split over
    the TP set. A block is two modules of the Sequential (this and ParallelMLP), so that a
    pipeline cut by profile can also fall between them."""

    def __init__(self, n_embd, n_head, block_size, tp_set, tp, sp=False):
        super().__init__()
        if n_head % tp:
            raise ValueError("--n-head %d is not divisible by --tp %d" % (n_head, tp))
        self.heads = n_head // tp            # heads of this rank
        self.head_dim = n_embd // n_head
        seq = dict(process_set=tp_set, sequence_parallel=sp, sequence_dim=1)
        self.ln1 = nn.LayerNorm(n_embd)
        self.qkv = hvd.ColumnParallelLinear(n_embd, 3 * n_embd, gather_output=False, chunks=3,
                                            **seq)
        self.proj = hvd.RowParallelLinear(n_embd, n_embd, input_is_parallel=True, **seq)
        if sp:  # used on a slice of the sequence: gradients summed over the TP set
            hvd.mark_sequence_parallel(self.ln1, tp_set)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        local = self.heads * self.head_dim
        q, k, v = self.qkv(self.ln1(x)).split(local, dim=2)
        b, t = q.shape[:2]                    # the whole sequence (x is a slice with --sp)
        q, k, v = [z.view(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(dim=-1)
        return x + self.proj((att @ v).transpose(1, 2).reshape(b, t, local))


class ParallelMLP(nn.Module):
    """The second half of the block, x + fc2(gelu(fc1(ln(x)))), its hidden layer split over
    the TP set."""

    def __init__(self, n_embd, tp_set, sp=False):
        super().__init__()
        seq = dict(process_set=tp_set, sequence_parallel=sp, sequence_dim=1)
        self.ln2 = nn.LayerNorm(n_embd)
        self.fc1 = hvd.ColumnParallelLinear(n_embd, 4 * n_embd, gather_output=False, **seq)
        self.fc2 = hvd.RowParallelLinear(4 * n_embd, n_embd, input_is_parallel=True, **seq)
        if sp:
            hvd.mark_sequence_parallel(self.ln2, tp_set)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Embed(nn.Module):
    def __init__(self, vocab, block_size, n_embd, tp_set, sp=False, tp_rank=0):
        super().__init__()
        self.tok = hvd.VocabParallelEmbedding(vocab, n_embd, process_set=tp_set,
                                              sequence_parallel=sp, sequence_dim=1)
        self.pos = nn.Embedding(block_size, n_embd)
        self.sp, self.tp_rank = sp, tp_rank
        if sp:
            hvd.mark_sequence_parallel(self.pos, tp_set)

    def forward(self, idx):
        tok = self.tok(idx)                   # [b, t / tp, d] with --sp: this rank's slice
        here = tok.shape[1]
        first = self.tp_rank * here if self.sp else 0
        return tok + self.pos(torch.arange(first, first + here))


class Head(nn.Module):
    def __init__(self, vocab, n_embd, tp_set, sp=False):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.head = hvd.ColumnParallelLinear(n_embd, vocab, bias=False, gather_output=False,
                                             process_set=tp_set, sequence_parallel=sp,
                                             sequence_dim=1)  # loss() takes the slices
        if sp:
            hvd.mark_sequence_parallel(self.ln, tp_set)

    def forward(self, x):
        return self.head(self.ln(x))


def vocab_loss(logits, y, vocab, grid):
    """Cross-entropy of the head's vocabulary slices (no gather of the logits)."""
    return hvd.vocab_parallel_cross_entropy(logits, y, process_set=grid.tp_set,
                                            vocab_size=vocab)


def build(args, vocab_padded, grid):
    sp = getattr(args, "sp", False) and grid.tp > 1
    layers = [Embed(vocab_padded, args.block_size, args.n_embd, grid.tp_set, sp, grid.tp_rank)]
    for _ in range(args.n_layer):   # in the order gpt_char_lm's Block creates them
        layers.append(ParallelAttention(args.n_embd, args.n_head, args.block_size, grid.tp_set,
                                        args.tp, sp))
        layers.append(ParallelMLP(args.n_embd, grid.tp_set, sp))
    layers.append(Head(vocab_padded, args.n_embd, grid.tp_set, sp))
    return nn.Sequential(*layers)


def state_bytes(opt):
    inner = getattr(opt, "optimizer", opt)
    return sum(v.numel() * v.element_size() for s in inner.state.values()
               for v in s.values() if torch.is_tensor(v))


def plan_spec(n_layer=2, n_embd=96, n_head=4, block_size=64):
    """The model, batches and loss for hora.torch.plan:
    horarun -np 4 python3 -m hora.torch.plan examples/gpt_parallel.py:plan_spec --global-batch 16
    """
    text = load_text("/usr/share/common-licenses/*")
    chars = sorted(set(text))
    vocab = len(chars)
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    args = argparse.Namespace(n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                              block_size=block_size)
    padded = -(-vocab // 8) * 8          # divisible by every TP size the planner tries
    layout = {}                          # the grid of the model built last

    def factory(grid):
        args.tp = grid.tp
        layout["grid"] = grid
        return build(args, padded, grid)

    def batch(rows):
        return get_batch(data, rows, block_size, torch.Generator().manual_seed(rows))

    def loss_fn(logits, y):  # the planner builds a layout's model before it runs its loss
        return vocab_loss(logits, y, vocab, layout["grid"])

    return {"factory": factory, "batch": batch, "loss_fn": loss_fn}


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    grid = hvd.make_grid(tp=args.tp, pp=args.pp)

    text = load_text(args.text_glob)
    chars = sorted(set(text))
    vocab = len(chars)
    vocab_padded = -(-vocab // args.tp) * args.tp
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_val = len(data) // 10
    train = data[:-n_val]                   # the last tenth is left out, as gpt_char_lm does
    shard = len(train) // grid.dp             # one shard per DP rank; TP/PP peers share it
    train = train[grid.dp_rank * shard:(grid.dp_rank + 1) * shard]

    torch.manual_seed(args.seed)
    whole = build(args, vocab_padded, grid)
    pipe = None
    gen = torch.Generator().manual_seed(args.seed + 1000 * (grid.dp_rank + 1))
    def loss_fn(logits, y):
        return vocab_loss(logits, y, vocab, grid)

    if args.pp > 1:
        profile = args.balance == "profile"
        sample = None
        if profile:    # one micro-batch (inputs, targets), from a generator of its own
            sample = get_batch(train, args.batch_size // args.micro_batches,
                               args.block_size, torch.Generator().manual_seed(args.seed))
        pipe = hvd.Pipeline.from_sequential(
            whole, grid.pp_set, micro_batches=args.micro_batches, schedule=args.schedule,
            virtual_stages=args.virtual_stages, balance="profile" if profile else None,
            sample=sample, loss_fn=loss_fn if profile else None,
            replicas=grid.stage_set if profile else None)  # every pipeline cuts alike
        model = pipe.stage
    else:
        model = whole
    del whole

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.01)
    if args.zero:
        opt = hvd.ZeroOptimizer(opt, model=model, stage=args.zero, process_set=grid.dp_set)
    elif grid.dp > 1:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       process_set=grid.dp_set,
                                       backward_passes_per_step=args.micro_batches
                                       if pipe else 1)
    if hvd.rank() == 0:
        print("hora: %d ranks as %r; vocabulary %d (padded to %d); ZeRO stage %d" % (
            hvd.size(), grid, vocab, vocab_padded, args.zero), flush=True)

    def step_loss(x, y):
        """Forward and backward of the batch; its loss on the ranks holding it (every rank,
        or the last stage's with --pp), else 0."""
        if pipe is not None:
            loss = pipe.train_step(x if pipe.is_first else None, y if pipe.is_last else None,
                                   loss_fn)
            return loss.item() if pipe.is_last else 0.0
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss.item()

    t0, step_times, logged, bubbles = time.time(), [], [], []
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        ts = time.time()
        opt.zero_grad()
        x, y = get_batch(train, args.batch_size, args.block_size, gen)
        loss = step_loss(x, y)
        opt.step()
        step_times.append(time.time() - ts)
        if pipe is not None and step > 0:
            bubbles.append(pipe.stats["bubble"])
        if step == 0 or (step + 1) % args.log_every == 0 or step == args.steps - 1:
            # the holders of a loss are dp x tp ranks (TP peers hold the same value)
            avg = hvd.allreduce(torch.tensor([loss]), op=hvd.Sum, name="train.loss").item() / (
                grid.dp * grid.tp)
            logged.append(avg)
            window = step_times[-args.log_every:]
            if hvd.rank() == 0:
                print("step %4d/%d  loss %.4f  %.3f s/step" % (
                    step + 1, args.steps, avg, sum(window) / len(window)), flush=True)
    if args.zero:
        mem = opt.memory_bytes()
    else:
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()
                    if p.grad is not None)
        mem = {"parameters": params, "gradients": grads, "optimizer_state": state_bytes(opt)}
    print("rank %d (tp %d, dp %d, pp %d): parameters %d B, gradients %d B, optimizer state "
          "%d B; %.3f s/step after the first" % (
              hvd.rank(), grid.tp_rank, grid.dp_rank, grid.pp_rank, mem["parameters"],
              mem["gradients"], mem["optimizer_state"],
              sum(step_times[1:]) / max(1, len(step_times) - 1)), flush=True)
    if pipe is not None and hvd.rank() == 0:
        print("pipeline balance %s; bubble (rank 0, mean after the first step): %.0f%% "
              "measured, %.0f%% in theory" % (
                  pipe.balance, 100 * sum(bubbles) / max(1, len(bubbles)),
                  100 * pipe.stats["ideal_bubble"]), flush=True)
    fell = logged[-1] < logged[0]
    if hvd.rank() == 0:
        print("trained in %.1f s; training loss %.4f -> %.4f: %s" % (
            time.time() - t0, logged[0], logged[-1], "PASS" if fell else
            "FAIL: it did not fall"), flush=True)
    hvd.shutdown()
    sys.exit(0 if fell else 1)


if __name__ == "__main__":
    main()
