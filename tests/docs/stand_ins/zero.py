"""docs/parallelism.md's ZeroOptimizer loop (the block replaces the line below) with what it
leaves to the user: the model, data and loss_fn."""

import torch

import hora.torch as hvd

hvd.init()
torch.manual_seed(0)


def build_model():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


data = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(3)]
loss_fn = torch.nn.functional.mse_loss
# (the block)
print("ZeRO-2: rank %d, 3 steps, holds %s" % (hvd.rank(), opt.memory_bytes()))
hvd.shutdown()
