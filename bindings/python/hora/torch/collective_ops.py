"""horovod.torch's allgather, broadcast, reducescatter, barrier and join (alltoall in
alltoall_ops.py, send/recv in p2p.py; both re-exported here)."""

import torch

from .. import core
from . import profiling as _profiling
from .compression import Compression
from .process_sets import _set_rank
from .refusal import refusing
from .unnamed import blocking
from .p2p import isend, irecv, send, recv  # noqa: F401 (re-exported)
from .mpi_ops import (Average, BadOp, Sum, _check_input, _contig, _describe,
                      _filled, _gathered, _invalid, _nonscalar, _placed, _register,
                      _resolve_op, _set_id, _set_root, _set_size, global_process_set,
                      synchronize, allreduce, grouped_allreduce, raise_if_bad)
from .alltoall_ops import alltoall, alltoall_async  # noqa: F401 (re-exported)


# ---- allgather ----

def _allgather_submit(tensors, name, set_id, group):
    """One allgather per tensor ("<name>.<i>" in a group), each input checked first."""
    with refusing("grouped_allgather" if group else "allgather", name, set_id,
                  parts=len(tensors) if group else None):
        _nonscalar(tensors, "allgather")
        wired = [_contig(t) for t in tensors]
    base = core.op_name("grouped_allgather" if group else "allgather", name, set_id)
    size = _set_size(set_id)
    handles, guesses = [], []
    try:
        for i, c in enumerate(wired):
            op = "%s.%d" % (base, i) if group else base
            # On CPU, a result of `size` equal parts (the usual case) is written by the data
            # plane straight into a tensor allocated here: no buffer of the runtime's and no
            # copy out of it. Any other size is held and copied as before.
            guess = None
            if c.device.type == "cpu" and c.numel() > 0:
                guess = torch.empty((c.shape[0] * size,) + tuple(c.shape[1:]), dtype=c.dtype)
            guesses.append(guess)
            handles.append(core.allgather_async(op, _describe(c), keep=(c, guess),
                                                process_set=set_id, out=_placed(guess)))
    except BaseException:
        for h in handles:
            h.release()
        raise

    def finish(hs):
        outs = [_gathered(h, c, g) for h, c, g in zip(hs, wired, guesses)]
        return outs if group else outs[0]

    return _register(handles, finish, keep=wired)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (which may differ)."""
    return _allgather_submit([tensor], name, _set_id(process_set), group=False)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of each tensor of the list; synchronize() returns a list."""
    return _allgather_submit(list(tensors), name, _set_id(process_set), group=True)


def _allgather_into_async(tensor, output, name, set_id):
    """An allgather of `tensor` (as one row) whose result lands in `output` (contiguous, of
    tensor's dtype, set size x tensor.numel() elements); synchronize() returns output. On CPU
    the data plane writes it there: no result buffer and no copy (c10d's
    all_gather_into_tensor, ZeroOptimizer's gathers)."""
    c = _contig(tensor.reshape(1, -1))
    h = core.allgather_async(core.op_name("allgather", name, set_id), _describe(c),
                             keep=(c, output), process_set=set_id, out=_placed(output))
    return _register([h], lambda hs: _filled(hs[0], output, "allgather into a tensor"),
                     keep=(c, output))


def _rows_of_this_rank(grad, dim, set_id):
    """Horovod's allgather backward: the gradient averaged over ranks, then this rank's rows
    (the offset is the sum of the first dimensions of the ranks before this one)."""
    dims = synchronize(allgather_async(torch.tensor([dim], dtype=torch.int64),
                                       process_set=set_id))
    r = _set_rank(set_id)
    offset = int(dims[:r].sum().item())
    return grad.narrow(0, offset, dim)


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
        return _rows_of_this_rank(grad, ctx.dim, ctx.set_id), None, None


@blocking("allgather")
def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's `tensor` along dimension 0. Autograd-aware."""
    set_id = _set_id(process_set)
    with refusing("allgather", name, set_id):
        _nonscalar([tensor], "allgather")
    return HoraAllgather.apply(tensor, name, set_id)


class HoraGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, set_id, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.set_id = set_id
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, set_id)))

    @staticmethod
    def backward(ctx, *grads):
        grads = [torch.zeros(0) if g is None else g for g in grads]
        reduced = grouped_allreduce(grads, op=Average, process_set=ctx.set_id)
        return (None, None) + tuple(_rows_of_this_rank(g, d, ctx.set_id)
                                    for g, d in zip(reduced, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A list with the allgather of each tensor. Autograd-aware."""
    set_id = _set_id(process_set)
    tensors = list(tensors)
    if not tensors:
        return []
    with refusing("grouped_allgather", name, set_id, parts=len(tensors)):
        _nonscalar(tensors, "grouped_allgather")
    return list(HoraGroupedAllgather.apply(name, set_id, *tensors))


# ---- broadcast ----

def _check_root(root_rank):
    if isinstance(root_rank, bool) or not hasattr(root_rank, "__index__"):
        raise _invalid("root_rank must be an int, got %r" % (root_rank,))
    return int(root_rank)


def _broadcast_async(tensor, inplace, root_rank, name, set_id=0):
    with refusing("broadcast", name, set_id):
        _check_input(tensor)
        root = _set_root(set_id, _check_root(root_rank))
    if inplace:
        buf = _contig(tensor)
    else:
        buf = tensor.detach().clone(memory_format=torch.contiguous_format)
    h = core.broadcast_async(core.op_name("broadcast", name, set_id), _describe(buf), root,
                             keep=buf, process_set=set_id)

    def finish(_):
        if inplace:
            if buf is not tensor:
                with torch.no_grad():
                    tensor.copy_(buf)
            return tensor
        return buf

    return _register([h], finish, keep=(buf, tensor))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root's `tensor` into a new tensor; returns a handle."""
    return _broadcast_async(tensor, False, root_rank, name, _set_id(process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast of root's `tensor`; returns a handle."""
    return _broadcast_async(tensor, True, root_rank, name, _set_id(process_set))


@blocking("broadcast")
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


@blocking("broadcast")
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's `tensor` on every rank, as a new tensor. Autograd-aware."""
    return HoraBroadcast.apply(tensor, root_rank, name, _set_id(process_set))


# ---- reducescatter ----

def _reducescatter_op(op):
    """The op, or a BadOp that _reducescatter_submit raises inside its refusal block."""
    op = _resolve_op(op, None)
    if not isinstance(op, BadOp) and op not in (Average, Sum):
        return BadOp(NotImplementedError("reducescatter supports op=hvd.Average and hvd.Sum "
                                         "only, as Horovod"))
    return op


def _reducescatter_submit(tensors, name, op, prescale, postscale, set_id, group, into=None):
    """One reducescatter per tensor. into: for each tensor, a contiguous CPU tensor of this
    rank's part's dtype and size to receive it (c10d's output), or None: one is allocated."""
    with refusing("grouped_reducescatter" if group else "reducescatter", name, set_id,
                  parts=len(tensors) if group else None):
        raise_if_bad(op)
        _nonscalar(tensors, "reducescatter")
        wired = [_contig(t) for t in tensors]
    base = core.op_name("grouped_reducescatter" if group else "reducescatter", name, set_id)
    size, rank = _set_size(set_id), _set_rank(set_id)
    handles, parts = [], []
    try:
        for i, c in enumerate(wired):
            op_name = "%s.%d" % (base, i) if group else base
            # This rank's rows (hora.h: first_dim / size, the first first_dim % size ranks one
            # more), allocated here on CPU so that the data plane writes them in place.
            rows = c.shape[0] // size + (1 if rank < c.shape[0] % size else 0)
            part, shape = None, (rows,) + tuple(c.shape[1:])
            given = into[i] if into is not None else None
            if c.device.type == "cpu" and rows > 0 and c[0].numel() > 0:
                if (given is not None and given.device.type == "cpu" and given.dtype == c.dtype
                        and given.is_contiguous() and given.numel() == rows * c[0].numel()):
                    part = given.view(shape)
                else:
                    part = torch.empty(shape, dtype=c.dtype)
            parts.append(part)
            handles.append(core.reducescatter_async(op_name, _describe(c), op, prescale,
                                                    postscale, keep=(c, part), process_set=set_id,
                                                    out=_placed(part)))
    except BaseException:
        for h in handles:
            h.release()
        raise

    def finish(hs):
        outs = [_gathered(h, c, p) for h, c, p in zip(hs, wired, parts)]
        return outs if group else outs[0]

    return _register(handles, finish, keep=wired)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over the ranks; rank r keeps its part of dimension 0."""
    return _reducescatter_submit([tensor], name, _reducescatter_op(op), prescale_factor,
                                 postscale_factor, _set_id(process_set), group=False)


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Starts a reducescatter of each tensor of the list; synchronize() returns a list."""
    return _reducescatter_submit(list(tensors), name, _reducescatter_op(op), prescale_factor,
                                 postscale_factor, _set_id(process_set), group=True)


def _reducescatter_grad(grads, op, scale, set_id):
    """Horovod's reducescatter backward: the gradient times the set size for Sum (times 1
    for Average) and the scale factors, allgathered."""
    factor = scale * (_set_size(set_id) if op == Sum else 1)
    grads = [g * factor if factor != 1.0 else g for g in grads]
    return synchronize(grouped_allgather_async([_contig(g) for g in grads],
                                               process_set=set_id))


class HoraReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, set_id):
        ctx.op, ctx.scale, ctx.set_id = op, prescale * postscale, set_id
        return synchronize(reducescatter_async(tensor, name, op, set_id, prescale, postscale))

    @staticmethod
    def backward(ctx, grad_output):
        grad, = _reducescatter_grad([grad_output], ctx.op, ctx.scale, ctx.set_id)
        return grad, None, None, None, None, None


@blocking("reducescatter")
def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over ranks; rank r keeps its part of dimension 0. Autograd-aware."""
    set_id = _set_id(process_set)
    op = _reducescatter_op(op)
    with refusing("reducescatter", name, set_id):
        _nonscalar([tensor], "reducescatter")
    compressed, cctx = compression.compress(tensor)
    out = HoraReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor, set_id)
    return compression.decompress(out, cctx)


class HoraGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, set_id, *tensors):
        ctx.op, ctx.scale, ctx.set_id = op, prescale * postscale, set_id
        ctx.shapes = [t.shape for t in tensors]
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, set_id, prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 5 + tuple(_reducescatter_grad(list(grads), ctx.op, ctx.scale,
                                                       ctx.set_id))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """A list with the reducescatter of each tensor. Autograd-aware."""
    set_id = _set_id(process_set)
    op = _reducescatter_op(op)
    tensors = list(tensors)
    if not tensors:
        return []
    with refusing("grouped_reducescatter", name, set_id, parts=len(tensors)):
        _nonscalar(tensors, "grouped_reducescatter")
    pairs = [compression.compress(t) for t in tensors]
    outs = HoraGroupedReducescatter.apply(name, op, prescale_factor, postscale_factor, set_id,
                                          *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---- sparse ----

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: allgathers of the indices and the values (so duplicates
    are summed when the result is coalesced). Returns a callable that waits and returns the
    reduced sparse tensor (Average divides the values by the set size)."""
    set_id = _set_id(process_set)
    name = core.op_name("sparse_allreduce", name, set_id)
    # Refused on this rank, both allgathers are refused, so the other ranks' calls fail too.
    with refusing("allgather", name + ".values", set_id), \
            refusing("allgather", name + ".indices", set_id):
        if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
            raise _invalid("sparse_allreduce_async needs a sparse tensor")
        op = _resolve_op(op, None)
        raise_if_bad(op)
        if op not in (Average, Sum):
            raise NotImplementedError("sparse_allreduce_async supports Average and Sum only")
    t = tensor
    indices = t._indices().transpose(0, 1).contiguous()
    values = t._values().contiguous()
    h_values = _allgather_submit([values], name + ".values", set_id, group=False)
    h_indices = _allgather_submit([indices], name + ".indices", set_id, group=False)

    def handle():
        vals = synchronize(h_values)
        idx = synchronize(h_indices)
        if op == Average:
            vals = vals / _set_size(set_id)
        if idx.dim() == 0 or vals.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(idx.transpose(0, 1), vals, t.size(), dtype=t.dtype,
                                       device=t.device)

    return handle


# ---- barrier and join ----

def barrier(process_set=global_process_set):
    """Returns when every rank of the set has called barrier()."""
    synchronize(_register([core.barrier_async(_set_id(process_set))], lambda hs: None))


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: until every rank of the set has joined, it contributes
    zeros to the others' allreduces. Blocks until all joined; returns the last rank to join.

    The ranks that had not joined may have made unnamed calls the joined ones did not make
    (an allgather refused while a rank had joined, say); so that unnamed calls keep matching
    afterwards, every member restarts their numbering when the join completes."""
    set_id = _set_id(process_set)

    def finish(hs):
        core.reset_names(set_id)
        return hs[0].result_join_rank()

    return synchronize(_register([core.join_async(set_id)], finish))


# torch.profiler ranges (profiling.py).
_profiling.wrap(globals(), [
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "sparse_allreduce_async", "barrier",
    "join"])
