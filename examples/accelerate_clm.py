"""A small GPT-2 causal language model trained with Hugging Face Accelerate and FSDP on the
"hora" torch.distributed backend, on CPU, from random initialisation (no download).

The text is every licence under /usr/share/common-licenses (present on every Debian machine),
read as bytes: token ids 0..255. Each rank trains on its own shard; FSDP (version 2,
`fully_shard`, the version that runs on CPU) shards parameters, gradients and optimizer state
over the ranks, and Hora carries its all-gathers and reduce-scatters.

  horarun -np 2 /opt/hora/torch2/bin/python examples/accelerate_clm.py

Needs torch 2.x, accelerate and transformers (tools/setup_torch2.sh installs them). At the end
every rank writes its full parameters' checksum under --check-dir when given, and rank 0
says whether the validation loss fell.
"""

import argparse
import datetime
import glob
import os
import sys

import torch

import hora.torch.distributed  # noqa: F401 - registers the "hora" backend

from accelerate import Accelerator, FullyShardedDataParallelPlugin
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--text-glob", default="/usr/share/common-licenses/*")
    p.add_argument("--check-dir", default=None,
                   help="write each rank's parameter checksum here and compare them")
    return p.parse_args()


def load_bytes(pattern):
    data = b""
    for path in sorted(glob.glob(pattern)):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data += f.read()
    if len(data) < 10000:
        sys.exit("not enough text at %s (%d bytes)" % (pattern, len(data)))
    return torch.tensor(list(data), dtype=torch.long)


def batch(data, size, block, gen):
    starts = torch.randint(0, len(data) - block - 1, (size,), generator=gen)
    x = torch.stack([data[s:s + block] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + block] for s in starts])
    return x, y


def main():
    args = parse_args()
    # On CPU, Accelerate picks gloo (or mpi) itself and refuses InitProcessGroupKwargs(
    # backend="hora"); it keeps a process group that is already there, so start it first.
    # (On GPUs, InitProcessGroupKwargs(backend="hora") is the way.)
    torch.distributed.init_process_group("hora", timeout=datetime.timedelta(seconds=120))
    fsdp = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=True)
    accelerator = Accelerator(cpu=True, fsdp_plugin=fsdp)
    rank, world = accelerator.process_index, accelerator.num_processes
    torch.manual_seed(0)  # the same initial model everywhere
    config = GPT2Config(vocab_size=256, n_positions=args.block_size, n_embd=args.embd,
                        n_layer=args.layers, n_head=args.heads, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer = accelerator.prepare(model, optimizer)

    data = load_bytes(args.text_glob)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    shard = len(train) // world
    mine = train[rank * shard:(rank + 1) * shard]
    gen = torch.Generator().manual_seed(100 + rank)
    val_gen = torch.Generator().manual_seed(7)  # the same validation batches everywhere

    def val_loss():
        model.eval()
        with torch.no_grad():
            losses = [model(input_ids=x, labels=x).loss
                      for x, _ in (batch(val, args.batch_size, args.block_size, val_gen)
                                   for _ in range(4))]
        model.train()
        return accelerator.reduce(torch.stack(losses).mean(), reduction="mean").item()

    first = val_loss()
    accelerator.print("accelerate_clm: %d ranks on %s, %d parameters, FSDP2; val loss %.3f"
                      % (world, torch.distributed.get_backend(),
                         sum(p.numel() for p in model.parameters()), first))
    for step in range(1, args.steps + 1):
        x, _ = batch(mine, args.batch_size, args.block_size, gen)
        loss = model(input_ids=x, labels=x).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step % 20 == 0 or step == args.steps:
            accelerator.print("step %d: train loss %.3f" % (step, loss.item()))
    last = val_loss()
    accelerator.print("accelerate_clm: val loss %.3f -> %.3f (%s)"
                      % (first, last, "fell" if last < first else "DID NOT FALL"))

    state = accelerator.get_state_dict(model)  # gathered full parameters on every rank
    total = sum(float(v.double().sum()) for v in state.values()) if state else 0.0
    if args.check_dir:
        os.makedirs(args.check_dir, exist_ok=True)
        with open(os.path.join(args.check_dir, "rank%d" % rank), "w") as f:
            f.write("%.10e\n" % total)
    accelerator.wait_for_everyone()
    ok = last < first
    if args.check_dir and rank == 0:
        sums = [open(os.path.join(args.check_dir, "rank%d" % r)).read() for r in range(world)]
        same = len(set(sums)) == 1
        print("accelerate_clm: parameters %s on every rank" % ("identical" if same else
                                                                "DIFFER"), flush=True)
        ok = ok and same
    accelerator.end_training()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
