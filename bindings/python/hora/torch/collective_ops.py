"""horovod.torch's allgather, broadcast, alltoall, reducescatter, barrier and join."""

import torch

from .. import core
from .compression import Compression
from .mpi_ops import (Average, Sum, _check_process_set, _contig, _describe, _dtype_code,
                      _gathered, _register, _resolve_op, global_process_set, synchronize,
                      allreduce)


# ---- allgather ----

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (which may differ)."""
    _check_process_set(process_set)
    _dtype_code(tensor)
    if tensor.dim() == 0:
        raise ValueError("allgather needs a tensor with at least one dimension")
    c = _contig(tensor)
    h = core.allgather_async(core.op_name("allgather", name), _describe(c), keep=c)
    return _register([h], lambda hs: _gathered(hs[0], c), keep=c)


class HoraAllgather(torch.autograd.Function):
    """Backward: the gradient averaged over ranks (as in Horovod), then this rank's rows."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.dim = tensor.shape[0]
        return synchronize(allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average)
        dims = synchronize(allgather_async(torch.tensor([ctx.dim], dtype=torch.int64)))
        r = core.rank()
        offset = int(dims[:r].sum().item())
        return grad.narrow(0, offset, ctx.dim), None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's `tensor` along dimension 0. Autograd-aware."""
    _check_process_set(process_set)
    if tensor.dim() == 0:
        raise ValueError("allgather needs a tensor with at least one dimension")
    return HoraAllgather.apply(tensor, name)


# ---- broadcast ----

def _broadcast_async(buf, target, root_rank, name):
    if not isinstance(root_rank, int) and not hasattr(root_rank, "__index__"):
        raise TypeError("root_rank must be an int")
    _dtype_code(buf)
    h = core.broadcast_async(core.op_name("broadcast", name), _describe(buf), int(root_rank),
                             keep=buf)

    def finish(_):
        if target is not buf:
            with torch.no_grad():
                target.copy_(buf)
        return target

    return _register([h], finish, keep=(buf, target))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root's `tensor` into a new tensor; returns a handle."""
    _check_process_set(process_set)
    buf = tensor.detach().clone(memory_format=torch.contiguous_format)
    return _broadcast_async(buf, buf, root_rank, name)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast of root's `tensor`; returns a handle."""
    _check_process_set(process_set)
    return _broadcast_async(_contig(tensor), tensor, root_rank, name)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class HoraBroadcast(torch.autograd.Function):
    """Backward: the gradient averaged over ranks lands on the root, zeros elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average)
        if core.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's `tensor` on every rank, as a new tensor. Autograd-aware."""
    _check_process_set(process_set)
    return HoraBroadcast.apply(tensor, root_rank, name)


# ---- alltoall ----

def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[r] rows of `tensor` to rank r. synchronize() returns
    (output, received_splits)."""
    _check_process_set(process_set)
    _dtype_code(tensor)
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    c = _contig(tensor)
    n = core.size()
    h = core.alltoall_async(core.op_name("alltoall", name), _describe(c), _splits_list(splits),
                            keep=c)

    def finish(hs):
        out = _gathered(hs[0], c)
        received = torch.tensor(hs[0].result_splits(n), dtype=torch.int32)
        return out, received

    return _register([h], finish, keep=c)


class HoraAlltoall(torch.autograd.Function):
    """Backward: the gradient goes back with the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name):
        out, received = synchronize(alltoall_async(tensor, splits, name))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = synchronize(alltoall_async(_contig(grad_output), ctx.received))
        return grad, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of `tensor` to every rank and gathers what they send (rank order).
    Returns the output, or (output, received_splits) when `splits` is given, as Horovod."""
    _check_process_set(process_set)
    out, received = HoraAlltoall.apply(tensor, splits, name)
    if splits is None:
        return out
    return out, received


# ---- reducescatter ----

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _check_process_set(process_set)
    op = _resolve_op(op, None)
    _dtype_code(tensor)
    if tensor.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    c = _contig(tensor)
    h = core.reducescatter_async(core.op_name("reducescatter", name), _describe(c), op,
                                 prescale_factor, postscale_factor, keep=c)
    return _register([h], lambda hs: _gathered(hs[0], c), keep=c)


class HoraReducescatter(torch.autograd.Function):
    """Backward: the gathered gradient, scaled as the forward scaled its inputs."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale):
        ctx.op, ctx.scale = op, prescale * postscale
        return synchronize(reducescatter_async(tensor, name, op, global_process_set,
                                               prescale, postscale))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(allgather_async(_contig(grad_output)))
        scale = ctx.scale / core.size() if ctx.op == Average else ctx.scale
        if scale != 1.0:
            grad = grad * scale
        return grad, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over ranks; rank r keeps its part of dimension 0. Autograd-aware."""
    _check_process_set(process_set)
    op = _resolve_op(op, None)
    compressed, cctx = compression.compress(tensor)
    out = HoraReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


# ---- barrier and join ----

def barrier(process_set=global_process_set):
    """Returns when every rank has called barrier()."""
    _check_process_set(process_set)
    synchronize(_register([core.barrier_async()], lambda hs: None))


def join(device=-1):
    """This rank has no more data: until every rank has joined, it contributes zeros to the
    others' allreduces. Blocks until all ranks joined; returns the last rank to join."""
    return synchronize(_register([core.join_async()], lambda hs: hs[0].result_join_rank()))
