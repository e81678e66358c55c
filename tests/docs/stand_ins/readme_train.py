"""README.md's training loop (the block replaces the line below) with what it leaves to the
user: build_model, data and shard."""

import torch


def build_model():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def shard(items, rank, size):
    return items[rank::size]


data = [torch.randn(4, 16, generator=torch.Generator().manual_seed(i)) for i in range(8)]
# (the block)
print("README training loop: rank %d of %d, %d steps, loss %.3f"
      % (hvd.rank(), hvd.size(), len(shard(data, hvd.rank(), hvd.size())), loss.item()))
