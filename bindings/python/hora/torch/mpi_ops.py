"""horovod.torch's collectives on Hora. Handles are ints used with poll() and synchronize().
Each collective goes to the C API as data pointer, shape, dtype, device and CUDA stream."""

import itertools
import threading
import warnings

import torch

from .. import core
from .. import errors
from . import profiling as _profiling
from .compression import Compression
from .refusal import refusing

# Reduce ops: Horovod's public values.
Average = core.AVERAGE
Sum = core.SUM
Min = core.MIN
Max = core.MAX
Product = core.PRODUCT
Adasum = 100  # Horovod's algorithm over send/recv (adasum.py)

HorovodInternalError = errors.HorovodInternalError

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
    torch.int16: core.INT16,
}
if hasattr(torch, "uint16"):  # torch >= 2.3 (a "shell" dtype there: few ops, but it moves)
    _TORCH_DTYPES[torch.uint16] = core.UINT16


def _invalid(message):
    """The error for an input refused before anything is submitted: a ValueError (as
    horovod.torch raises for bad arguments) that is also a RuntimeError (a HoraError), so
    that either `except` clause of a Horovod script catches it."""
    return errors.HoraInvalidArgumentError(errors.ERR_INVALID_ARGUMENT, message)


class UnsupportedDtypeError(errors.HoraInvalidArgumentError, TypeError):
    """A tensor dtype hora cannot reduce or move (ValueError as in Horovod, TypeError too)."""


from .process_sets import (ProcessSet, global_process_set, _init_process_sets,  # noqa: E402,F401
                           add_process_set, remove_process_set, _set_id, _set_root, _set_size,
                           _basics)
from . import unnamed  # noqa: E402 (blocking calls without a name)


class BadOp:
    """What _resolve_op returns for an op it refuses: the error is raised by raise_if_bad
    inside the call's `refusing` block, so that it fails the call on every rank of the set
    (raised earlier, it would fail on this rank alone and leave the others waiting)."""

    def __init__(self, error):
        self.error = error


def raise_if_bad(op):
    if isinstance(op, BadOp):
        raise op.error


def _resolve_op(op, average):
    """Horovod's rules: `average` is deprecated; op=None means Average. A refused op comes
    back as a BadOp (raise_if_bad); a BadOp passes through."""
    if isinstance(op, BadOp):
        return op
    if op is not None and average is not None:
        return BadOp(ValueError("The op parameter supersedes average. Please provide only one "
                                "of them."))
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    if op is None:
        return Average
    if op not in (Average, Sum, Min, Max, Product, Adasum):
        return BadOp(ValueError("unknown reduce op %r" % (op,)))
    return op


def _dtype_code(tensor):
    code = _TORCH_DTYPES.get(tensor.dtype)
    if code is None:
        raise UnsupportedDtypeError(
            errors.ERR_INVALID_ARGUMENT, "hora does not support tensors of dtype %s; "
            "supported: %s" % (tensor.dtype, ", ".join(str(d) for d in _TORCH_DTYPES)))
    return code


def _check_input(tensor, what="tensor"):
    """Everything hora checks about one input before anything is submitted."""
    if not isinstance(tensor, torch.Tensor):
        raise _invalid("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise _invalid("hora does not support sparse tensors here; use "
                       "hvd.sparse_allreduce_async or densify them first")
    if tensor.device.type not in ("cpu", "cuda"):
        raise _invalid("hora supports CPU and CUDA tensors, not %s" % tensor.device)
    _dtype_code(tensor)


def _nonscalar(tensors, what):
    """_check_input for each tensor, none a scalar, all on one device."""
    for t in tensors:
        _check_input(t)
        if t.dim() == 0:
            raise _invalid("%s needs tensors with at least one dimension, got a scalar" % what)
    _check_devices(tensors)


def _describe(tensor):
    """hora_tensor_t for a contiguous tensor of a dtype the C API takes."""
    _check_input(tensor)
    code = _TORCH_DTYPES[tensor.dtype]
    if tensor.device.type == "cuda":
        index = tensor.device.index if tensor.device.index is not None else \
            torch.cuda.current_device()
        stream = torch.cuda.current_stream(tensor.device).cuda_stream
        return core.make_tensor(tensor.data_ptr(), tuple(tensor.shape), code,
                                core.DEVICE_CUDA, index, stream)
    return core.make_tensor(tensor.data_ptr() if tensor.numel() else None, tuple(tensor.shape),
                            code)


def _contig(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _check_devices(tensors):
    """A group must be on one device (Horovod: RuntimeError for a CPU/GPU mix)."""
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise _invalid("the tensors of one grouped operation must be on one device, got %s"
                       % ", ".join(sorted(str(d) for d in devices)))


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


def _placed(t):
    """core's `out` for tensor t: its buffer when it is a non-empty CPU tensor, else None."""
    if t is None or t.device.type != "cpu" or t.numel() == 0:
        return None
    return t.data_ptr(), t.numel() * t.element_size()


def _filled(h, output, what):
    """`output` holding a result: written there by the data plane when the sizes agree
    (nothing to copy; CPU), else copied from the held result (a GPU output too)."""
    numel = 1
    for d in h.result_shape():
        numel *= d
    if numel != output.numel():
        raise ValueError("%s: received %d elements into an output of %d"
                         % (what, numel, output.numel()))
    h.result_copy(output.data_ptr() if numel else None, numel * output.element_size())
    return output


def _gathered(h, like, guess=None):
    """The gathered tensor: `guess` itself when the result has its shape (the data plane wrote
    it there: core's `out`), else a new tensor the result is copied into."""
    shape = h.result_shape()
    if guess is not None and tuple(shape) == tuple(guess.shape):
        h.result_copy(guess.data_ptr(), guess.numel() * guess.element_size())  # copies nothing
        return guess
    out = torch.empty(shape, dtype=like.dtype, device=like.device)
    h.result_copy(out.data_ptr() if out.numel() else None,
                  out.numel() * out.element_size())
    return out


# ---- allreduce ----

def _allreduce_submit(tensors, outputs, name, op, prescale, postscale, group=False, set_id=0):
    """Submits one allreduce per tensor (contiguous inputs; outputs contiguous, same shape).
    Returns core handles. A group shares one base name: "<name>.<i>"."""
    handles = []
    base = core.op_name("grouped_allreduce" if group else "allreduce", name, set_id)
    try:
        for i, (t, out) in enumerate(zip(tensors, outputs)):
            op_name = "%s.%d" % (base, i) if group else base
            handles.append(core.allreduce_async(
                op_name, _describe(t), out.data_ptr() if out.numel() else None, op,
                prescale, postscale, keep=(t, out), process_set=set_id))
    except BaseException:
        for h in handles:
            h.release()
        raise
    return handles


def _allreduce_async_impl(tensors, name, op, prescale, postscale, inplace, group, set_id=0):
    with refusing("grouped_allreduce" if group else "allreduce", name, set_id,
                  parts=len(tensors) if group else None):
        raise_if_bad(op)
        for t in tensors:  # every input is checked before anything is submitted
            _check_input(t)
        _check_devices(tensors)
    if op == Adasum:
        return _adasum_now(tensors, prescale, postscale, inplace, group, set_id)
    prepared, outputs, copy_back = [], [], []
    for t in tensors:
        c = _contig(t)
        prepared.append(c)
        if inplace:
            outputs.append(c)
            copy_back.append(c is not t)
        else:
            outputs.append(torch.empty_like(c, memory_format=torch.contiguous_format))
            copy_back.append(False)
    handles = _allreduce_submit(prepared, outputs, name, op, prescale, postscale, group, set_id)

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


def _adasum_now(tensors, prescale, postscale, inplace, group, set_id):
    """op=Adasum: computed here, now (p2p transfers between pairs of ranks, adasum.py); the
    handle returned is already complete."""
    from .adasum import adasum_many
    results = []
    combined = adasum_many([t * prescale if prescale != 1.0 else t for t in tensors], set_id)
    for t, r in zip(tensors, combined):
        if postscale != 1.0:
            r = r * postscale
        if inplace:
            with torch.no_grad():
                t.copy_(r)
            r = t
        results.append(r)
    return _register([], lambda _: results if group else results[0], keep=tensors)


# ---- the fast path: one CPU, contiguous, dense tensor of a supported dtype, no compression,
# no scaling, the global set, no autograd graph to record. It makes exactly the calls the full
# path makes for such a tensor (same name, same C API call, same held name, same errors), minus
# the checks that cannot fail for it; anything else takes the full path.
_FAST_OPS = {None: Average, Average: Average, Sum: Sum, Min: Min, Max: Max, Product: Product}
_Tensor = torch.Tensor
_strided = torch.strided
_grad_enabled = torch.is_grad_enabled


def _fast_submit(tensor, name, op):
    """A handle for allreduce(tensor) on the fast path, or None when the tensor needs the
    full path. op: an entry of _FAST_OPS."""
    if type(tensor) is not _Tensor or not tensor.is_cpu or tensor.layout is not _strided \
            or not tensor.is_contiguous() or (tensor.requires_grad and _grad_enabled()):
        return None
    code = _TORCH_DTYPES.get(tensor.dtype)
    if code is None:
        return None
    out = torch.empty_like(tensor)
    n = tensor.numel()
    desc = core.make_tensor(tensor.data_ptr() if n else None, tensor.shape, code)
    h = core.allreduce_async(core.op_name("allreduce", name, 0), desc,
                             out.data_ptr() if n else None, op, keep=(tensor, out))
    return h, out


def _fast_eligible(average, compression, prescale, postscale, process_set, op):
    return (average is None and process_set is global_process_set and
            compression is Compression.none and prescale == 1.0 and postscale == 1.0 and
            (op is None or op.__class__ is int) and op in _FAST_OPS)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over all ranks into a new tensor; returns a handle."""
    if _fast_eligible(average, Compression.none, prescale_factor, postscale_factor,
                      process_set, op):
        fast = _fast_submit(tensor, name, _FAST_OPS[op])
        if fast is not None:
            h, out = fast
            return _register((h,), lambda _: out)
    set_id = _set_id(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl([tensor], name, op, prescale_factor, postscale_factor,
                                 inplace=False, group=False, set_id=set_id)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; returns a handle."""
    set_id = _set_id(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl([tensor], name, op, prescale_factor, postscale_factor,
                                 inplace=True, group=False, set_id=set_id)


@unnamed.blocking("allreduce")
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


class HoraAllreduce(torch.autograd.Function):
    """allreduce with a backward that allreduces the gradient with the same op."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, set_id):
        ctx.op, ctx.prescale, ctx.postscale, ctx.set_id = op, prescale, postscale, set_id
        return synchronize(_allreduce_async_impl([tensor], name, op, prescale, postscale,
                                                 inplace=False, group=False, set_id=set_id))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(_allreduce_async_impl([grad_output], None, ctx.op, ctx.prescale,
                                                 ctx.postscale, inplace=False, group=False,
                                                 set_id=ctx.set_id))
        return grad, None, None, None, None, None


@unnamed.blocking("allreduce")
def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks (Average by default); the input is not modified.
    Autograd-aware: the gradient is allreduced with the same op."""
    if _fast_eligible(average, compression, prescale_factor, postscale_factor, process_set,
                      op):
        fast = _fast_submit(tensor, name, _FAST_OPS[op])
        if fast is not None:
            try:
                fast[0].wait()
            finally:
                fast[0].release()
            return fast[1]
    set_id = _set_id(process_set)
    op = _resolve_op(op, average)
    compressed, cctx = compression.compress(tensor)
    out = HoraAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor, set_id)
    return compression.decompress(out, cctx)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    set_id = _set_id(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl(list(tensors), name, op, prescale_factor, postscale_factor,
                                 inplace=False, group=True, set_id=set_id)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    set_id = _set_id(process_set)
    op = _resolve_op(op, average)
    return _allreduce_async_impl(list(tensors), name, op, prescale_factor, postscale_factor,
                                 inplace=True, group=True, set_id=set_id)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class HoraGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, set_id, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.set_id = op, prescale, postscale, set_id
        return tuple(synchronize(_allreduce_async_impl(list(tensors), name, op, prescale,
                                                       postscale, inplace=False, group=True,
                                                       set_id=set_id)))

    @staticmethod
    def backward(ctx, *grads):
        out = synchronize(_allreduce_async_impl(list(grads), None, ctx.op, ctx.prescale,
                                                ctx.postscale, inplace=False, group=True,
                                                set_id=ctx.set_id))
        return (None, None, None, None, None) + tuple(out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Reduces a list of tensors together; returns a list. Autograd-aware."""
    set_id = _set_id(process_set)
    op = _resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = HoraGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, set_id,
                                      *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# torch.profiler ranges (profiling.py), before other modules import these names.
_profiling.wrap(globals(), ["synchronize", "allreduce", "allreduce_", "allreduce_async",
                            "allreduce_async_", "grouped_allreduce", "grouped_allreduce_",
                            "grouped_allreduce_async", "grouped_allreduce_async_"])

# ---- horovod.torch.mpi_ops's names: `from horovod.torch.mpi_ops import ...` keeps working ----
# (imported last: these modules import the helpers above)
from .basics import (init, shutdown, is_initialized, rank, size, local_rank,  # noqa: E402
                     local_size, cross_rank, cross_size, is_homogeneous, mpi_built,
                     gloo_built, nccl_built, cuda_built, gpu_available, rocm_built,
                     ddl_built, ccl_built, mpi_enabled, gloo_enabled, mpi_threads_supported, start_timeline,
                     stop_timeline, autotune_state)
from .collective_ops import (allgather, allgather_async, grouped_allgather,  # noqa: E402
                             grouped_allgather_async, broadcast, broadcast_, broadcast_async,
                             broadcast_async_, alltoall, alltoall_async, reducescatter,
                             reducescatter_async, grouped_reducescatter,
                             grouped_reducescatter_async, sparse_allreduce_async, barrier,
                             join, send, recv, isend, irecv)

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "gloo_built", "nccl_built",
    "cuda_built", "gpu_available", "rocm_built", "ddl_built", "ccl_built", "mpi_enabled", "gloo_enabled",
    "mpi_threads_supported", "start_timeline", "stop_timeline", "autotune_state",
    "Average", "Sum", "Min", "Max", "Product", "Adasum", "HorovodInternalError",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "poll", "synchronize", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async", "allgather", "allgather_async",
    "grouped_allgather", "grouped_allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "send", "recv", "isend", "irecv", "Compression",
]
