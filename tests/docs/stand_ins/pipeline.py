"""docs/parallelism.md's pipeline loop (the block replaces the line below) with what it leaves
to the user: model_seq, data and loss_fn."""

import torch
from torch import nn

import hora.torch as hvd

hvd.init()
torch.manual_seed(0)
model_seq = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4))
data = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(3)]
loss_fn = nn.functional.mse_loss
# (the block)
if pipe.is_last:
    print("pipeline: last stage loss %.4f" % float(loss))
hvd.shutdown()
