"""docs/parallelism.md's tensor-parallel layers (the block replaces the line below) with what
it leaves to the user (d, vocab and the rest of the model), then one step through them."""

import torch
from torch import nn

import hora.torch as hvd

hvd.init()
torch.manual_seed(0)
d, vocab = 16, 32
model = nn.Linear(d, d)  # the rest of the user's model
# (the block)
tokens = torch.randint(0, vocab, (4, 8))
h = emb(tokens)
out = mlp(h) + qkv(h).sum()
out.sum().backward()
opt.step()
print("tensor parallel: rank %d, output %s, tp rank %d" % (hvd.rank(), tuple(out.shape),
                                                           grid.tp_rank))
hvd.shutdown()
