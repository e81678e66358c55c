"""horovod.torch's alltoall (re-exported by collective_ops and mpi_ops)."""

import torch

from .. import core
from . import profiling as _profiling
from .refusal import refusing
from .unnamed import blocking
from .mpi_ops import (_contig, _describe, _filled, _gathered, _invalid, _nonscalar, _placed,
                      _register, _set_id, _set_size, global_process_set, synchronize)


def _splits_list(splits, tensor, n):
    """Horovod's checks, before anything is submitted: splits (a tensor or sequence of ints,
    one per rank of the set) add up to the first dimension; without splits, the first
    dimension divides evenly. A ValueError otherwise."""
    if splits is None:
        if tensor.shape[0] % n:
            raise _invalid("alltoall without splits needs the first dimension (%d) to be a "
                           "multiple of the number of ranks (%d)" % (tensor.shape[0], n))
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64) or splits.is_floating_point():
            raise _invalid("alltoall splits must hold 32-bit (or 64-bit) integers, got %s"
                           % splits.dtype)
        values = [int(s) for s in splits.reshape(-1).tolist()]
    else:
        try:
            values = list(splits)
        except TypeError:
            raise _invalid("alltoall splits must be a tensor or a sequence of ints")
        if any(isinstance(s, bool) or not hasattr(s, "__index__") for s in values):
            raise _invalid("alltoall splits must be ints, got %r" % (splits,))
        values = [int(s) for s in values]
    if len(values) != n:
        raise _invalid("alltoall needs one split per rank (%d), got %d" % (n, len(values)))
    if any(s < 0 for s in values):
        raise _invalid("alltoall splits must not be negative: %s" % values)
    if sum(values) != tensor.shape[0]:
        raise _invalid("alltoall splits add up to %d, but the first dimension is %d"
                       % (sum(values), tensor.shape[0]))
    return values


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set,
                   _output=None):
    """Starts sending splits[r] rows of `tensor` to rank r. synchronize() returns
    (output, received_splits). `_output` (c10d's all_to_all_single): a contiguous CPU tensor
    of `tensor`'s dtype that the received elements fill, returned as the output (a
    ValueError when they do not fill it)."""
    set_id = _set_id(process_set)
    with refusing("alltoall", name, set_id):
        _nonscalar([tensor], "alltoall")
        n = _set_size(set_id)
        split_list = _splits_list(splits, tensor, n)
    c = _contig(tensor)
    # On CPU, as many rows received as sent (equal splits everywhere, the usual case) land
    # straight in a tensor allocated here; any other count is held and copied.
    if _output is not None:
        guess = _output
    else:
        guess = torch.empty_like(c) if c.device.type == "cpu" and c.numel() > 0 else None
    h = core.alltoall_async(core.op_name("alltoall", name, set_id), _describe(c), split_list,
                            keep=(c, guess), process_set=set_id, out=_placed(guess))
    splits_device = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")

    def finish(hs):
        out = (_gathered(hs[0], c, guess) if _output is None else
               _filled(hs[0], _output, "all_to_all_single"))
        received = torch.tensor(hs[0].result_splits(n), dtype=torch.int32,
                                device=splits_device)
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
        grad, _ = synchronize(alltoall_async(_contig(grad_output), ctx.received.cpu(),
                                             process_set=ctx.set_id))
        return grad, None, None, None


@blocking("alltoall")
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of `tensor` to every rank and gathers what they send (rank order).
    Returns the output, or (output, received_splits) when `splits` is given, as Horovod."""
    set_id = _set_id(process_set)
    with refusing("alltoall", name, set_id):
        _nonscalar([tensor], "alltoall")
        _splits_list(splits, tensor, _set_size(set_id))  # a ValueError here, not in autograd
    out, received = HoraAlltoall.apply(tensor, splits, name, set_id)
    if splits is None:
        return out
    return out, received


# torch.profiler ranges (profiling.py).
_profiling.wrap(globals(), ["alltoall", "alltoall_async"])
