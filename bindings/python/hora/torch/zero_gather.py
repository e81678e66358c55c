"""ZeroOptimizer's gathering pieces (zero.py): an allgather of a unit's chunks into its flat
buffer, and, for stage 3, the identity Function whose backward gathers a unit again plus the
walk over a module's outputs that finds and re-inserts their tensors."""

import torch

from .mpi_ops import _set_id, synchronize
from .collective_ops import _allgather_into_async


class _GatherInto(object):
    """An allgather of `src` (1-D, the same size on every member) into `dst` (N * src.numel()
    elements, contiguous): on CPU the data plane writes dst itself, with no temporary the
    size of dst and no copy out of it; wait() returns dst."""

    def __init__(self, src, dst, name, process_set):
        self.handle = _allgather_into_async(src.detach(), dst, name, _set_id(process_set))

    def wait(self):
        return synchronize(self.handle)


class _PreBackward(torch.autograd.Function):
    """Identity on a stage-3 module's outputs; its backward gathers the module's units again."""

    @staticmethod
    def forward(ctx, stage3, module_index, *tensors):
        ctx.stage3, ctx.module_index = stage3, module_index
        out = tuple(t.view_as(t) for t in tensors)
        return out if len(out) != 1 else out[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.stage3.pre_backward(ctx.module_index)
        return (None, None) + grads


def _tensors_in(obj):
    if torch.is_tensor(obj):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors_in(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors_in(o)]
    return []


def _replace_tensors(obj, it):
    if torch.is_tensor(obj):
        return next(it)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace_tensors(o, it) for o in obj)
    if isinstance(obj, dict):
        return {k: _replace_tensors(v, it) for k, v in obj.items()}
    return obj
