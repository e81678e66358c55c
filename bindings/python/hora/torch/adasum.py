"""Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation"), Horovod's
op=hvd.Adasum, on CPU over hora.torch's send/recv.

adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b   (a coefficient is 1 when
its vector is zero). Over 2^k ranks the combination is a tree, the pairs of each level being
ranks that differ in bit `level` of their rank in the set: (0,1), (2,3), ... then (01, 23),
...; the lower half's vector is `a`. Each pair exchanges its whole vectors (recursive
doubling), so every rank computes the same result from the same inputs in the same order:
the result is bitwise identical on every rank. Dot products and norms in float64; the result
is cast back to the tensor's dtype. Every tensor is combined on its own (as Horovod, which
computes the coefficients per tensor, layer-wise, inside a fused buffer).

Horovod's CPU Adasum needs MPI and a power-of-2 number of ranks; here any backend works, and
a set whose size is not a power of 2 is refused with an error naming the size."""

import contextlib

import torch

from . import collective_ops, mpi_ops
from .process_sets import _set_rank, _set_ranks, _set_size

# Tags of Adasum's transfers, one per tree level; apart from what scripts use (small tags).
_TAG_BASE = 1 << 24


def _combine(a, b):
    dot = torch.dot(a, b)
    anormsq = torch.dot(a, a)
    bnormsq = torch.dot(b, b)
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq != 0 else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq != 0 else 1.0
    return acoeff * a + bcoeff * b


# Tensors whose exchanges are in flight together: up to this many bytes of float64 copies.
_GROUP_BYTES = 64 << 20


def adasum_many(tensors, set_id=0):
    """The Adasum of every member's tensors, each a new tensor of its dtype and shape, with the
    transfers of a group of tensors (up to _GROUP_BYTES) in flight together: one round of waits
    per level and group, not per tensor (a model's gradients are tens or hundreds of tensors)."""
    n = _set_size(set_id)
    if n == 1:
        return [t.detach().clone() for t in tensors]
    if n & (n - 1):
        raise mpi_ops._invalid("op=Adasum needs a power-of-2 number of ranks in the process "
                               "set, got %d" % n)
    for t in tensors:
        if not t.is_floating_point():
            raise mpi_ops._invalid("op=Adasum needs a floating-point tensor, got %s" % t.dtype)
    me, ranks = _set_rank(set_id), _set_ranks(set_id)
    results, group, size = [], [], 0
    for t in tensors:
        group.append(t)
        size += t.numel() * 8
        if size >= _GROUP_BYTES:
            results += _combine_group(group, me, ranks, n, set_id)
            group, size = [], 0
    if group:
        results += _combine_group(group, me, ranks, n, set_id)
    return results


def _combine_group(tensors, me, ranks, n, set_id):
    mine = [t.detach().reshape(-1).to(torch.float64).clone() for t in tensors]
    level = 0
    while (1 << level) < n:
        partner = me ^ (1 << level)
        peer, tag = ranks[partner], _TAG_BASE + level
        theirs = [torch.empty_like(m) for m in mine]
        # The n-th send to a peer with a tag matches its n-th recv: both sides post in order.
        handles = []
        for m, x in zip(mine, theirs):
            handles.append(collective_ops.isend(m, peer, tag, process_set=set_id))
            handles.append(collective_ops.irecv(x, peer, tag, process_set=set_id))
        for h in handles:
            mpi_ops.synchronize(h)
        mine = [_combine(m, x) if me < partner else _combine(x, m) for m, x in zip(mine, theirs)]
        level += 1
    return [m.to(t.dtype).reshape(t.shape) for m, t in zip(mine, tensors)]


class _DistributedAdasumMixin(object):
    """DistributedOptimizer(op=hvd.Adasum), as Horovod's: step() applies the wrapped
    optimizer to this rank's own gradients, then replaces each parameter's change by the
    Adasum of every rank's change (compressed with `compression` on the way)."""

    def __init__(self, optimizer, compression, backward_passes_per_step, set_id):
        super().__init__(optimizer.param_groups)
        self.defaults = dict(optimizer.defaults)
        for p, s in optimizer.state.items():
            self.state[p] = s
        self._compression = compression
        self._set_id = set_id
        self.backward_passes_per_step = backward_passes_per_step
        self.op = mpi_ops.Adasum

    def synchronize(self):
        """Nothing to wait for: Adasum combines the parameters' changes inside step()."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        yield

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes

    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        start = [p.detach().clone() for p in params]
        loss = super().step() if closure is None else super().step(closure)
        with torch.no_grad():
            deltas = [self._compression.compress(p.detach() - before)
                      for p, before in zip(params, start)]
            combined = adasum_many([d for d, _ in deltas], self._set_id)
            for p, before, (_, ctx), c in zip(params, start, deltas, combined):
                p.copy_(before + self._compression.decompress(c, ctx).to(p.dtype))
        return loss


def distributed_adasum_optimizer(optimizer, compression, backward_passes_per_step, set_id):
    cls = type(optimizer.__class__.__name__, (_DistributedAdasumMixin, optimizer.__class__),
               {"__module__": optimizer.__class__.__module__})
    return cls(optimizer, compression, backward_passes_per_step, set_id)
