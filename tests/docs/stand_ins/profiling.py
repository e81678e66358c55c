"""docs/profiling.md's profiled step (the block replaces the line below) with the step it
profiles: a model, a DistributedOptimizer and a loss."""

import torch

import hora.torch as hvd

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
loss = model(torch.randn(8, 16)).pow(2).mean()
# (the block)
hvd.shutdown()
