#!/usr/bin/env python3
"""A small GPT-style character-level language model trained data-parallel with Hora.

    horarun -np 2 /usr/bin/python3 examples/gpt_char_lm.py

The text is every licence under /usr/share/common-licenses (present on every Debian
machine). Each rank trains on its own shard of the text; hora.torch's DistributedOptimizer
averages the gradients, overlapping the allreduces with backward. Rank 0 prints the loss and
the throughput, generates a sample at the end, and the job checks that the loss on a fixed
validation batch fell and that every rank ends with identical parameters, compared through
files (exit code 1 if not).

This is a plain Horovod script: replace `import hora.torch as hvd` with
`import horovod.torch as hvd` and it runs under horovodrun.
"""

import argparse
import glob
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import hora.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--block-size", type=int, default=64, help="context length in characters")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=96)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=20, help="warmup steps")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--sample-chars", type=int, default=400, help="characters to generate")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads per rank (0: cores / local ranks)")
    p.add_argument("--fp16-allreduce", action="store_true", help="fp16 gradient compression")
    p.add_argument("--backward-passes-per-step", type=int, default=1,
                   help="micro-batches accumulated locally before each allreduce")
    p.add_argument("--check-dir", default="",
                   help="where ranks leave their parameters for the final check "
                        "(default: a temporary directory named by the job)")
    p.add_argument("--text-glob", default="/usr/share/common-licenses/*",
                   help="files to train on")
    return p.parse_args()


def load_text(pattern):
    seen, parts = set(), []
    for path in sorted(glob.glob(pattern)):
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        with open(real, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
    if not parts:
        sys.exit("no text found at %s" % pattern)
    return "\n".join(parts)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))
        self.drop = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = [z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, c)
        return self.drop(self.proj(y))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, block_size, dropout)
                                      for _ in range(n_layer)])
        self.ln = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))

    @torch.no_grad()
    def generate(self, idx, n, temperature=0.8, top_k=20, generator=None):
        for _ in range(n):
            logits = self(idx[:, -self.block_size:])[:, -1, :] / temperature
            kth = torch.topk(logits, top_k).values[:, -1:]
            logits[logits < kth] = float("-inf")
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def get_batch(data, batch_size, block_size, gen):
    starts = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[s:s + block_size] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + block_size] for s in starts.tolist()])
    return x, y


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def log0(*a):
    if hvd.rank() == 0:
        print(*a, flush=True)


def params_identical(check_dir):
    """Every rank writes its parameters to a file in `check_dir`; rank 0 compares the files
    byte for byte and prints the verdict. Files, not Hora's collectives: the check must not
    trust the thing it checks. (All ranks on one host, as horarun runs them today.)"""
    blob = b"".join(p.detach().contiguous().numpy().tobytes() for p in MODEL.parameters())
    print("parameters sha256 %s" % hashlib.sha256(blob).hexdigest(), flush=True)  # every rank
    os.makedirs(check_dir, exist_ok=True)
    path = os.path.join(check_dir, "rank%d.params" % hvd.rank())
    with open(path + ".tmp", "wb") as f:
        f.write(blob)
    os.replace(path + ".tmp", path)  # complete or absent, never half written
    hvd.barrier()
    if hvd.rank() != 0:
        return True
    differ = []
    for r in range(hvd.size()):
        other = os.path.join(check_dir, "rank%d.params" % r)
        if not os.path.exists(other):
            differ.append("rank %d: no file %s" % (r, other))
            continue
        with open(other, "rb") as f:
            if f.read() != blob:
                differ.append("rank %d" % r)
    shutil.rmtree(check_dir, ignore_errors=True)
    log0("parameters on %d ranks compared through files in %s: %s" % (
        hvd.size(), check_dir, "identical" if not differ else "differ: " + ", ".join(differ)))
    log0("PASS: every rank holds identical parameters" if not differ else
         "FAIL: parameters differ across ranks")
    return not differ


def eval_loss(model, val, args, n_chars):
    """Loss on one fixed validation batch of this rank (the same batch every call)."""
    model.eval()
    with torch.no_grad():
        vgen = torch.Generator().manual_seed(args.seed + hvd.rank())
        vx, vy = get_batch(val, 32, args.block_size, vgen)
        loss = F.cross_entropy(model(vx).reshape(-1, n_chars), vy.reshape(-1)).item()
    model.train()
    return loss


def main():
    global MODEL
    args = parse_args()
    hvd.init()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)

    text = load_text(args.text_glob)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_val = len(data) // 10
    train, val = data[:-n_val], data[-n_val:]
    # Each rank trains on its own contiguous shard of the training text.
    shard = len(train) // hvd.size()
    train = train[hvd.rank() * shard:(hvd.rank() + 1) * shard]

    torch.manual_seed(args.seed)
    model = MODEL = CharGPT(len(chars), args.block_size, args.n_layer, args.n_head,
                            args.n_embd, args.dropout)
    n_params = sum(p.numel() for p in model.parameters())
    log0("hora %s: %d ranks, %d torch threads each; text: %d chars (%d-char vocabulary), "
         "%d per rank shard; model: %.2fM parameters" % (
             hora_version(), hvd.size(), threads, len(data), len(chars), shard, n_params / 1e6))

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=0.01)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        backward_passes_per_step=args.backward_passes_per_step)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    gen = torch.Generator().manual_seed(args.seed + 1000 * (hvd.rank() + 1))
    global_batch = args.batch_size * args.backward_passes_per_step * hvd.size()
    log0("training %d steps, global batch %d sequences x %d chars"
         % (args.steps, global_batch, args.block_size))
    vloss_before = eval_loss(model, val, args, len(chars))
    model.train()
    t_window, n_window = time.time(), 0
    t_start = time.time()
    sent_at_half = None
    for step in range(args.steps):
        if step == args.steps // 2:
            sent_at_half = control_sent()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        optimizer.zero_grad()
        for _ in range(args.backward_passes_per_step):
            x, y = get_batch(train, args.batch_size, args.block_size, gen)
            loss = F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
            (loss / args.backward_passes_per_step).backward()
        optimizer.synchronize()          # gradients averaged over ranks
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with optimizer.skip_synchronize():
            optimizer.step()
        n_window += 1
        if (step + 1) % args.log_every == 0 or step == args.steps - 1:
            avg = hvd.allreduce(loss.detach(), name="train.loss").item()
            dt = time.time() - t_window
            log0("step %4d/%d  loss %.4f  lr %.2e  %.1f samples/s  %.0f tokens/s" % (
                step + 1, args.steps, avg, lr_at(step, args), n_window * global_batch / dt,
                n_window * global_batch * args.block_size / dt))
            t_window, n_window = time.time(), 0
    train_time = time.time() - t_start
    if sent_at_half is not None:
        # Once every plan repeats, a step asks rank 0 nothing (Hora's steady path); summed
        # over the ranks, so rank 0 prints the whole job's count.
        quiet = torch.tensor([float(control_sent() - sent_at_half)])
        total = hvd.allreduce(quiet, name="control.sent", op=hvd.Sum).item()
        log0("steps %d-%d: %d messages to rank 0's coordinator from all ranks" % (
            args.steps // 2 + 1, args.steps, total))

    vloss_after = eval_loss(model, val, args, len(chars))
    learned = vloss_after < vloss_before
    vloss = hvd.allreduce(torch.tensor(vloss_after), name="val.loss").item()
    log0("trained in %.1f s; validation loss %.4f (a uniform guess is %.2f)"
         % (train_time, vloss, math.log(len(chars))))
    print("validation loss of this rank's batch %.4f -> %.4f: %s" % (
        vloss_before, vloss_after, "it fell" if learned else "FAIL: it did not fall"), flush=True)
    model.eval()
    if hvd.rank() == 0:
        prompt = "Permission is "
        idx = torch.tensor([[stoi.get(c, 0) for c in prompt]])
        out = model.generate(idx, args.sample_chars,
                             generator=torch.Generator().manual_seed(args.seed))
        print("---- sample ----\n%s\n---- end of sample ----"
              % "".join(chars[i] for i in out[0].tolist()), flush=True)
    check_dir = args.check_dir or os.path.join(tempfile.gettempdir(), "gpt_char_lm-" + (
        os.environ.get("HORA_JOB_TOKEN") or str(os.getppid())))
    ok = params_identical(check_dir)
    hvd.shutdown()
    sys.exit(0 if ok and learned else 1)


def hora_version():
    import hora
    return hora.version()


def control_sent():
    """The messages this rank has sent to the coordinator (None under Horovod)."""
    try:
        import hora
        return hora.control_stats()["messages"]
    except (ImportError, AttributeError):
        return None


MODEL = None

if __name__ == "__main__":
    main()
