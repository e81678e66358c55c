"""Blocking collectives over a process set along one dimension of a tensor, as the parallel
layers' autograd functions call them (tensor_parallel, sequence_parallel,
vocab_parallel_loss)."""

from .mpi_ops import Sum, synchronize, allreduce_async
from .collective_ops import allgather_async, reducescatter_async


def allreduce(x, process_set, op=Sum):
    return synchronize(allreduce_async(x.contiguous(), op=op, process_set=process_set))


def gather_along(x, process_set, dim):
    """Every member's `x` concatenated along `dim`, in rank order."""
    moved = x.movedim(dim, 0).contiguous()
    got = synchronize(allgather_async(moved, process_set=process_set))
    return got.movedim(0, dim).contiguous()


def slice_along(x, n, r, dim):
    """Member r's of n equal slices of `x` along `dim`."""
    k = x.shape[dim] // n
    return x.narrow(dim, r * k, k).contiguous()


def reduce_scatter_along(x, process_set, dim):
    """This member's slice along `dim` of the sum of every member's `x`."""
    moved = x.movedim(dim, 0).contiguous()
    out = synchronize(reducescatter_async(moved, op=Sum, process_set=process_set))
    return out.movedim(0, dim).contiguous()
