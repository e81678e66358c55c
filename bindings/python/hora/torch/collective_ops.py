"""horovod.torch's allgather, broadcast, alltoall, reducescatter, barrier and join."""

import torch

from .. import core
from .compression import Compression
from .mpi_ops import (Average, Sum, _contig, _describe, _dtype_code, _gathered, _register,
                      _resolve_op, _set_id, _set_root, _set_size, global_process_set,
                      synchronize, allreduce)


# ---- allgather ----

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (which may differ)."""
    set_id = _set_id(process_set)
    _dtype_code(tensor)
    if tensor.dim() == 0:
        raise ValueError("allgather needs a tensor with at least one dimension")
    c = _contig(tensor)
    h = core.allgather_async(core.op_name("allgather", name, set_id), _describe(c), keep=c,
                             process_set=set_id)
    return _register([h], lambda hs: _gathered(hs[0], c), keep=c)


class HoraAllgather(torch.autograd.Function):
    """Backward: the gradient averaged over ranks (as in Horovod), then this rank's rows."""

    @staticmethod
    def forward(ctx, tensor, name, set_id):
        ctx.dim = tensor.shape[0]
        ctx.set_id = set_id
        return synchronize(allgather_async(tensor, name, set_id))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.set_id)
        dims = synchronize(allgather_async(torch.tensor([ctx.dim], dtype=torch.int64),
                                           process_set=ctx.set_id))
        r = core.rank() if ctx.set_id == 0 else core.process_set_rank(ctx.set_id)
        offset = int(dims[:r].sum().item())
        return grad.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's `tensor` along dimension 0. Autograd-aware."""
    set_id = _set_id(process_set)
    if tensor.dim() == 0:
        raise ValueError("allgather needs a tensor with at least one dimension")
    return HoraAllgather.apply(tensor, name, set_id)


# ---- broadcast ----

def _broadcast_async(buf, target, root_rank, name, set_id=0):
    if not isinstance(root_rank, int) and not hasattr(root_rank, "__index__"):
        raise TypeError("root_rank must be an int")
    _dtype_code(buf)
    h = core.broadcast_async(core.op_name("broadcast", name, set_id), _describe(buf),
                             _set_root(set_id, root_rank), keep=buf, process_set=set_id)

    def finish(_):
        if target is not buf:
            with torch.no_grad():
                target.copy_(buf)
        return target

    return _register([h], finish, keep=(buf, target))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root's `tensor` into a new tensor; returns a handle."""
    set_id = _set_id(process_set)
    buf = tensor.detach().clone(memory_format=torch.contiguous_format)
    return _broadcast_async(buf, buf, root_rank, name, set_id)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast of root's `tensor`; returns a handle."""
    return _broadcast_async(_contig(tensor), tensor, root_rank, name, _set_id(process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class HoraBroadcast(torch.autograd.Function):
    """Backward: the gradient averaged over ranks lands on the root, zeros elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, set_id):
        ctx.root_rank, ctx.set_id = root_rank, set_id
        return synchronize(broadcast_async(tensor, root_rank, name, set_id))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.set_id)
        if core.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's `tensor` on every rank, as a new tensor. Autograd-aware."""
    return HoraBroadcast.apply(tensor, root_rank, name, _set_id(process_set))


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
    set_id = _set_id(process_set)
    _dtype_code(tensor)
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    c = _contig(tensor)
    n = _set_size(set_id)
    h = core.alltoall_async(core.op_name("alltoall", name, set_id), _describe(c),
                            _splits_list(splits), keep=c, process_set=set_id)

    def finish(hs):
        out = _gathered(hs[0], c)
        received = torch.tensor(hs[0].result_splits(n), dtype=torch.int32)
        return out, received

    return _register([h], finish, keep=c)


class HoraAlltoall(torch.autograd.Function):
    """Backward: the gradient goes back with the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, set_id):
        out, received = synchronize(alltoall_async(tensor, splits, name, set_id))
        ctx.received, ctx.set_id = received, set_id
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = synchronize(alltoall_async(_contig(grad_output), ctx.received,
                                             process_set=ctx.set_id))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of `tensor` to every rank and gathers what they send (rank order).
    Returns the output, or (output, received_splits) when `splits` is given, as Horovod."""
    out, received = HoraAlltoall.apply(tensor, splits, name, _set_id(process_set))
    if splits is None:
        return out
    return out, received


# ---- reducescatter ----

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    set_id = _set_id(process_set)
    op = _resolve_op(op, None)
    _dtype_code(tensor)
    if tensor.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    c = _contig(tensor)
    h = core.reducescatter_async(core.op_name("reducescatter", name, set_id), _describe(c), op,
                                 prescale_factor, postscale_factor, keep=c, process_set=set_id)
    return _register([h], lambda hs: _gathered(hs[0], c), keep=c)


class HoraReducescatter(torch.autograd.Function):
    """Backward: the gathered gradient, scaled as the forward scaled its inputs."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, set_id):
        ctx.op, ctx.scale, ctx.set_id = op, prescale * postscale, set_id
        return synchronize(reducescatter_async(tensor, name, op, set_id, prescale, postscale))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(allgather_async(_contig(grad_output), process_set=ctx.set_id))
        scale = ctx.scale / _set_size(ctx.set_id) if ctx.op == Average else ctx.scale
        if scale != 1.0:
            grad = grad * scale
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over ranks; rank r keeps its part of dimension 0. Autograd-aware."""
    set_id = _set_id(process_set)
    op = _resolve_op(op, None)
    compressed, cctx = compression.compress(tensor)
    out = HoraReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor, set_id)
    return compression.decompress(out, cctx)


# ---- barrier and join ----

def barrier(process_set=global_process_set):
    """Returns when every rank of the set has called barrier()."""
    synchronize(_register([core.barrier_async(_set_id(process_set))], lambda hs: None))


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: until every rank of the set has joined, it contributes
    zeros to the others' allreduces. Blocks until all joined; returns the last rank to join."""
    return synchronize(_register([core.join_async(_set_id(process_set))],
                                 lambda hs: hs[0].result_join_rank()))


# ---- point-to-point (names as in torch.distributed) ----

def _p2p_check(tensor, peer, tag, set_id, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise TypeError("%s: the peer must be an int rank" % what)
    _dtype_code(tensor)
    return _set_root(set_id, peer)


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Starts sending `tensor` to global rank `dst` (a member of the set); returns a handle
    for poll()/synchronize(). The n-th send to dst with a tag matches dst's n-th recv from
    this rank with that tag."""
    set_id = _set_id(process_set)
    peer = _p2p_check(tensor, dst, tag, set_id, "isend")
    c = _contig(tensor)
    h = core.send_async(_describe(c), peer, tag, keep=c, process_set=set_id)
    return _register([h], lambda hs: None, keep=c)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Starts receiving into `tensor` from global rank `src`; synchronize() returns it.
    dtype and element count must match the send."""
    set_id = _set_id(process_set)
    peer = _p2p_check(tensor, src, tag, set_id, "irecv")
    c = _contig(tensor)
    h = core.recv_async(_describe(c), peer, tag, keep=c, process_set=set_id)

    def finish(_):
        if c is not tensor:
            with torch.no_grad():
                tensor.copy_(c)
        return tensor

    return _register([h], finish, keep=(c, tensor))


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends `tensor` to global rank `dst`; returns when the transfer is done."""
    synchronize(isend(tensor, dst, tag, process_set))


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into `tensor` from global rank `src`; returns `tensor`."""
    return synchronize(irecv(tensor, src, tag, process_set))
