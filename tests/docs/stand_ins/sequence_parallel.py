"""docs/parallelism.md's sequence-parallel block (the block replaces the line below) with what
it leaves to the user (the TP set, d, the whole input x of [sequence, batch, d]), then checks
the output and the LayerNorm's gradient against the same block on one process."""

import torch
import torch.nn.functional as F
from torch import nn

import hora.torch as hvd

hvd.init()
tp = hvd.make_grid(tp=hvd.size()).tp_set
d = 8
x = torch.randn(4 * hvd.size(), 2, d, generator=torch.Generator().manual_seed(1))
torch.manual_seed(0)
# (the block)
torch.manual_seed(0)
rfc1, rfc2, rln = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.LayerNorm(d)
want = x + rfc2(F.gelu(rfc1(rln(x))))
assert torch.allclose(out, want, atol=1e-5), (out - want).abs().max()
out.square().sum().backward()
want.square().sum().backward()
assert torch.allclose(ln.weight.grad, rln.weight.grad, atol=1e-4), "LayerNorm gradient"
print("sequence parallel: rank %d, output %s, slice %s" % (hvd.rank(), tuple(out.shape),
                                                           tuple(xs.shape)))
hvd.shutdown()
