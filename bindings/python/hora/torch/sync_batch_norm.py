"""SyncBatchNorm: batch normalization with the batch statistics of every rank, as
horovod.torch.SyncBatchNorm, on CPU as well as CUDA (Horovod's runs on CUDA only).

In training, each rank sums its inputs, their squares and its element count per channel
(in float64), and one allreduce (Sum) of those gives the statistics of the global batch.
That allreduce is hora's autograd-aware one, whose backward is an allreduce (Sum) of the
gradient: exactly the gradient of the global statistics with respect to each rank's inputs,
so the backward pass follows from autograd (one allreduce per layer, like Horovod's
sum_dy / sum_dy_xmu exchange). weight and bias get this rank's share of their gradient, as in
Horovod (DistributedOptimizer averages them). Every rank must run forward and backward of
the layer (collective). In eval mode, and when there is one rank, it is torch's batch_norm.
"""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from . import basics
from .mpi_ops import Sum, allreduce


class SyncBatchNorm(_BatchNorm):
    """Synchronous N-dimensional batch normalization (input (N, C, ...)); arguments as
    torch.nn.BatchNorm*d. Collective in training mode: every rank calls it in the same
    order."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum,
                            self.eps)

    def _momentum(self):
        if self.momentum is None:  # cumulative moving average, as torch's _BatchNorm
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        if basics.size() == 1:
            return self._run_bn(input)
        return self._sync_bn(input)

    def _sync_bn(self, input):
        c = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        x = input.to(torch.float64)
        count = input.numel() // c
        local = torch.cat([x.sum(dims), (x * x).sum(dims),
                           torch.full((1,), float(count), dtype=torch.float64,
                                      device=input.device)])
        total = allreduce(local, op=Sum, name=None)
        n = total[2 * c].detach()
        if int(n.item()) <= 1:
            raise ValueError("SyncBatchNorm needs more than 1 value per channel over all "
                             "ranks, got input of size %s" % (tuple(input.shape),))
        mean = total[:c] / n
        var = (total[c:2 * c] / n - mean * mean).clamp_min(0)
        if self.training and self.track_running_stats:
            m = self._momentum()
            with torch.no_grad():
                unbiased = var.detach() * (n / (n - 1))
                self.running_mean.mul_(1 - m).add_(mean.detach().to(self.running_mean.dtype),
                                                   alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.to(self.running_var.dtype),
                                                  alpha=m)
        shape = [1, c] + [1] * (input.dim() - 2)
        invstd = torch.rsqrt(var + self.eps)
        out = (x - mean.view(shape)) * invstd.view(shape)
        out = out.to(input.dtype)
        if self.weight is not None:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
