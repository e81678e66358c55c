"""Stands for the user's train.py in the docs' commands (tests/docs/test_doc_blocks.py): a
small complete hora.torch job (torch 1.13 or 2.x) that trains a linear model for 3 epochs and
checks that every rank ends with the same parameters."""

import sys

import torch

import hora.torch as hvd

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
gen = torch.Generator().manual_seed(1 + hvd.rank())
x = torch.randn(32, 8, generator=gen)
y = x.sum(dim=1, keepdim=True)
for epoch in range(1, 4):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    if hvd.rank() == 0:
        print("epoch %d loss %.2f" % (epoch, loss.item()))
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
same = torch.equal(hvd.allreduce(flat, op=hvd.Max), hvd.allreduce(flat, op=hvd.Min))
print("rank %d of %d: parameters identical on every rank: %s" % (hvd.rank(), hvd.size(),
                                                                 "PASS" if same else "FAIL"))
if hvd.rank() == 1:
    print("warning: this train.py stands for yours", file=sys.stderr)
hvd.shutdown()
raise SystemExit(0 if same else 1)
