"""docs/parallelism.md's vocab-parallel loss (the block replaces the line below) with what it
leaves to the user (the TP set, the hidden states, the targets), then checks the loss against
F.cross_entropy of the gathered logits."""

import torch
import torch.nn.functional as F

import hora.torch as hvd

hvd.init()
tp = hvd.make_grid(tp=hvd.size()).tp_set
torch.manual_seed(0)
d, vocab = 16, 30
padded = -(-vocab // hvd.size()) * hvd.size()
h = torch.randn(4, 8, d)
targets = torch.randint(0, vocab, (4, 8))
# (the block)
whole = hvd.allgather(head(h).detach().movedim(-1, 0).contiguous(), process_set=tp)
want = F.cross_entropy(whole.movedim(0, -1)[..., :vocab].reshape(-1, vocab),
                       targets.reshape(-1), label_smoothing=0.1)
assert abs(loss.item() - want.item()) < 1e-5, (loss.item(), want.item())
assert head.weight.grad is not None
print("vocab-parallel loss: rank %d, %.5f" % (hvd.rank(), loss.item()))
hvd.shutdown()
