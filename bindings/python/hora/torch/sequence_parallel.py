"""Sequence parallelism over a tensor-parallel set (Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models", 2022; Megatron-LM's `sequence_parallel`).

Between the tensor-parallel blocks (LayerNorm, dropout, the residual) every member of the set
would hold the whole activation. With sequence parallelism each holds 1/T of the sequence
instead, and the block boundaries change collective:
  into a ColumnParallelLinear(sequence_parallel=True): the slices are allgathered along the
      sequence (forward) and the input's gradient reduce-scattered back to them (backward),
      where plain tensor parallelism had identity / allreduce;
  out of a RowParallelLinear(sequence_parallel=True): the partial outputs are
      reduce-scattered along the sequence (forward) and the gradient allgathered (backward),
      where plain tensor parallelism had allreduce / identity.
The same bytes move as with one allreduce each way, and the activations in between take 1/T
of the memory.

A parameter used only on a slice of the sequence (a LayerNorm between blocks, the
row-parallel bias) gets 1/T of its gradient on each member: mark_sequence_parallel(module,
process_set) sums it over the set during backward (RowParallelLinear does so for its bias),
so every member steps with the whole gradient, as Megatron-LM's allreduce of the
`sequence_parallel` parameters' gradients does.

The sequence dimension is `dim` (0 by default: Megatron's [sequence, batch, hidden]); its
length must divide by the set's size.
"""

import torch

from .parallel_ops import allreduce, gather_along, reduce_scatter_along, slice_along
from .process_sets import _members

__all__ = ["scatter_to_sequence_parallel", "gather_from_sequence_parallel",
           "reduce_scatter_to_sequence_parallel", "mark_sequence_parallel"]


def _check(x, process_set, dim, what):
    n, r = _members(process_set)
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError("%s: dim %d is not a dimension of a tensor of shape %s"
                         % (what, dim, tuple(x.shape)))
    if x.shape[dim] % n:
        raise ValueError("%s: the sequence (dim %d, length %d) does not divide by the "
                         "tensor-parallel size %d (%s)" % (what, dim, x.shape[dim], n,
                                                          process_set))
    return n, r


class _Scatter(torch.autograd.Function):
    """This member's slice of the sequence forward; allgather backward."""

    @staticmethod
    def forward(ctx, x, process_set, dim):
        n, r = _check(x, process_set, dim, "scatter_to_sequence_parallel")
        ctx.process_set, ctx.dim = process_set, dim
        return slice_along(x, n, r, dim)

    @staticmethod
    def backward(ctx, grad):
        return gather_along(grad, ctx.process_set, ctx.dim), None, None


class _Gather(torch.autograd.Function):
    """allgather along the sequence forward; backward the gradient's reduce-scatter when
    each member holds a partial of it (the input of a column-parallel linear), else this
    member's slice (every member computed the same whole gradient)."""

    @staticmethod
    def forward(ctx, x, process_set, dim, grad_is_partial):
        ctx.n, ctx.r = _members(process_set)
        ctx.process_set, ctx.dim, ctx.partial = process_set, dim, grad_is_partial
        return gather_along(x, process_set, dim)

    @staticmethod
    def backward(ctx, grad):
        if ctx.partial:
            return reduce_scatter_along(grad, ctx.process_set, ctx.dim), None, None, None
        return slice_along(grad, ctx.n, ctx.r, ctx.dim), None, None, None


class _ReduceScatter(torch.autograd.Function):
    """The partials summed and scattered along the sequence forward; allgather backward."""

    @staticmethod
    def forward(ctx, x, process_set, dim):
        _check(x, process_set, dim, "reduce_scatter_to_sequence_parallel")
        ctx.process_set, ctx.dim = process_set, dim
        return reduce_scatter_along(x, process_set, dim)

    @staticmethod
    def backward(ctx, grad):
        return gather_along(grad, ctx.process_set, ctx.dim), None, None


def scatter_to_sequence_parallel(x, process_set, dim=0):
    """The whole sequence in, this member's 1/T of it out (e.g. the embedding's output)."""
    return _Scatter.apply(x, process_set, dim)


def gather_from_sequence_parallel(x, process_set, dim=0, grad_is_partial=True):
    """Every member's slice of the sequence in, the whole sequence out. grad_is_partial:
    the output feeds a column-parallel linear (each member's gradient is a partial sum);
    False where every member computes the same whole gradient (e.g. the same loss)."""
    return _Gather.apply(x, process_set, dim, grad_is_partial)


def reduce_scatter_to_sequence_parallel(x, process_set, dim=0):
    """Each member's partial of the whole sequence in (a row-parallel linear's), the sum's
    slice for this member out."""
    return _ReduceScatter.apply(x, process_set, dim)


def mark_sequence_parallel(module_or_params, process_set):
    """Sums the gradients of parameters used on a slice of the sequence (a LayerNorm between
    blocks) over the set during backward. Takes a module (its parameters) or parameters;
    marks each with `sequence_parallel = True`. Returns what it was given."""
    params = (list(module_or_params.parameters())
              if isinstance(module_or_params, torch.nn.Module) else list(module_or_params))
    _members(process_set)
    for p in params:
        if getattr(p, "sequence_parallel", False):
            continue
        p.sequence_parallel = True
        p.register_hook(lambda g, ps=process_set: allreduce(g, ps))
    return module_or_params
