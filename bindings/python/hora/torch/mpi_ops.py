"""horovod.torch's collectives on Hora. Handles are ints used with poll() and synchronize().
Each collective goes to the C API as data pointer, shape, dtype, device and CUDA stream."""

import itertools
import threading
import warnings

import torch

from .. import core
from .. import errors
from .compression import Compression

# Reduce ops: Horovod's public values.
Average = core.AVERAGE
Sum = core.SUM
Min = core.MIN
Max = core.MAX
Product = core.PRODUCT
Adasum = 100  # accepted as a name, rejected when used

HorovodInternalError = errors.HoraPeerFailureError

_TORCH_DTYPES = {
    torch.uint8: core.UINT8,
    torch.int8: core.INT8,
    torch.int32: core.INT32,
    torch.int64: core.INT64,
    torch.float16: core.FLOAT16,
    torch.bfloat16: core.BFLOAT16,
    torch.float32: core.FLOAT32,
    torch.float64: core.FLOAT64,
    torch.bool: core.BOOL,
}


class ProcessSet(object):
    """Only the global process set is supported; the class exists so scripts that pass
    process_set=hvd.global_process_set run unchanged."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None

    def included(self):
        return self.ranks is None or core.rank() in self.ranks

    def rank(self):
        return core.rank() if self.ranks is None else self.ranks.index(core.rank())

    def size(self):
        return core.size() if self.ranks is None else len(self.ranks)

    def __repr__(self):
        return "ProcessSet(global)" if self.ranks is None else "ProcessSet(%s)" % self.ranks


global_process_set = ProcessSet()


def _check_process_set(process_set):
    if process_set is None or process_set is global_process_set or (
            isinstance(process_set, ProcessSet) and process_set.ranks is None):
        return
    if isinstance(process_set, ProcessSet) and process_set.ranks == list(range(core.size())):
        return
    raise NotImplementedError("hora supports only the global process set, got %r"
                              % (process_set,))


def add_process_set(process_set):
    raise NotImplementedError("hora supports only the global process set")


def remove_process_set(process_set):
    raise NotImplementedError("hora supports only the global process set")


def _resolve_op(op, average):
    """Horovod's rules: `average` is deprecated; op=None means Average."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    if op is None:
        return Average
    if op == Adasum:
        raise NotImplementedError("hora does not implement Adasum; use op=hvd.Average or hvd.Sum")
    if op not in (Average, Sum, Min, Max, Product):
        raise ValueError("unknown reduce op %r" % (op,))
    return op


def _dtype_code(tensor):
    code = _TORCH_DTYPES.get(tensor.dtype)
    if code is None:
        raise TypeError("hora does not support tensors of dtype %s; supported: %s" % (
            tensor.dtype, ", ".join(str(d) for d in _TORCH_DTYPES)))
    return code


def _describe(tensor):
    """hora_tensor_t for a contiguous tensor."""
    if tensor.is_sparse:
        raise TypeError("hora does not support sparse tensors; densify them first")
    code = _dtype_code(tensor)
    if tensor.device.type == "cuda":
        index = tensor.device.index if tensor.device.index is not None else \
            torch.cuda.current_device()
        stream = torch.cuda.current_stream(tensor.device).cuda_stream
        return core.make_tensor(tensor.data_ptr(), tuple(tensor.shape), code,
                                core.DEVICE_CUDA, index, stream)
    if tensor.device.type != "cpu":
        raise TypeError("hora supports CPU and CUDA tensors, not %s" % tensor.device)
    return core.make_tensor(tensor.data_ptr() if tensor.numel() else None, tuple(tensor.shape),
                            code)


def _contig(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


# ---- the handle table ----

class _Pending(object):
    __slots__ = ("handles", "finish", "keep")

    def __init__(self, handles, finish, keep):
        self.handles = handles
        self.finish = finish
        self.keep = keep


_handle_lock = threading.Lock()
_handle_ids = itertools.count(1)
_handle_map = {}


def _register(handles, finish, keep=None):
    with _handle_lock:
        hid = next(_handle_ids)
        _handle_map[hid] = _Pending(handles, finish, keep)
    return hid


def poll(handle):
    """True when the operation behind `handle` is done; synchronize() then won't block."""
    with _handle_lock:
        pending = _handle_map.get(handle)
    if pending is None:
        raise ValueError("unknown or already synchronized handle %r" % (handle,))
    return all(h.poll() for h in pending.handles)


def synchronize(handle):
    """Waits for the operation behind `handle` and returns its result."""
    with _handle_lock:
        pending = _handle_map.pop(handle, None)
    if pending is None:
        return None
    first_error = None
    for h in pending.handles:
        try:
            h.wait()
        except BaseException as e:  # keep waiting for the rest, then raise the first
            if first_error is None:
                first_error = e
    try:
        if first_error is not None:
            raise first_error
        return pending.finish(pending.handles)
    finally:
        for h in pending.handles:
            h.release()


def _gathered(h, like):
    shape = h.result_shape()
    out = torch.empty(shape, dtype=like.dtype, device=like.device)
    h.result_copy(out.data_ptr() if out.numel() else None,
                  out.numel() * out.element_size())
    return out


# ---- allreduce ----

def _allreduce_submit(tensors, outputs, name, op, prescale, postscale, group=False):
    """Submits one allreduce per tensor (contiguous inputs; outputs contiguous, same shape).
    Returns core handles. A group shares one base name: "<name>.<i>"."""
    handles = []
    base = core.op_name("grouped_allreduce" if group else "allreduce", name)
    try:
        for i, (t, out) in enumerate(zip(tensors, outputs)):
            op_name = "%s.%d" % (base, i) if group else base
            handles.append(core.allreduce_async(
                op_name, _describe(t), out.data_ptr() if out.numel() else None, op,
                prescale, postscale, keep=(t, out)))
    except BaseException:
        for h in handles:
            h.release()
        raise
    return handles


def _allreduce_async_impl(tensors, name, op, prescale, postscale, inplace, group):
    prepared, outputs, copy_back = [], [], []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError("expected a torch.Tensor, got %s" % type(t).__name__)
        _dtype_code(t)
        c = _contig(t)
        prepared.append(c)
        if inplace:
            outputs.append(c)
            copy_back.append(c is not t)
        else:
            outputs.append(torch.empty_like(c, memory_format=torch.contiguous_format))
            copy_back.append(False)
    handles = _allreduce_submit(prepared, outputs, name, op, prescale, postscale, group)

    def finish(_):
        results = []
        for t, out, back in zip(tensors, outputs, copy_back):
            if back:
                with torch.no_grad():
                    t.copy_(out)
                out = t
            results.append(t if inplace else out)
        return results if group else results[0]

    return _register(handles, finish, keep=(tensors, prepared, outputs))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over all ranks into a new tensor; returns a handle."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl([tensor], name, op, prescale_factor, postscale_factor,
                                 inplace=False, group=False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; returns a handle."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl([tensor], name, op, prescale_factor, postscale_factor,
                                 inplace=True, group=False)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


class HoraAllreduce(torch.autograd.Function):
    """allreduce with a backward that allreduces the gradient with the same op."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return synchronize(_allreduce_async_impl([tensor], name, op, prescale, postscale,
                                                 inplace=False, group=False))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(_allreduce_async_impl([grad_output], None, ctx.op, ctx.prescale,
                                                 ctx.postscale, inplace=False, group=False))
        return grad, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks (Average by default); the input is not modified.
    Autograd-aware: the gradient is allreduced with the same op."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    compressed, cctx = compression.compress(tensor)
    out = HoraAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl(list(tensors), name, op, prescale_factor, postscale_factor,
                                 inplace=False, group=True)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl(list(tensors), name, op, prescale_factor, postscale_factor,
                                 inplace=True, group=True)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class HoraGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, *tensors):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return tuple(synchronize(_allreduce_async_impl(list(tensors), name, op, prescale,
                                                       postscale, inplace=False, group=True)))

    @staticmethod
    def backward(ctx, *grads):
        out = synchronize(_allreduce_async_impl(list(grads), None, ctx.op, ctx.prescale,
                                                ctx.postscale, inplace=False, group=True))
        return (None, None, None, None) + tuple(out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces a list of tensors together; returns a list. Autograd-aware."""
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = HoraGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor,
                                      *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]
