"""The small-op fast path under hora.torch's allreduce of a contiguous CPU tensor
(docs/benchmarks-steady.md "Lean Python path"): core.allreduce_async and Handle.wait/release
for that case, with the same name hold, C API call and errors, minus the per-call descriptor
building."""

import ctypes

from . import _lib
from . import errors
from .core import DEVICE_CPU, Handle, _WAIT_SLICE_S, _held, _held_lock, _unhold

# One shape array per (shape) reused across calls: the C API copies the descriptor when it
# enqueues (bindings/c/hora.cc ToSpec), so a shared read-only array is safe on any thread.
_shape_arrays = {}
_SHAPE_CACHE_MAX = 4096


def _shape_array(shape):
    arr = _shape_arrays.get(shape)
    if arr is None:
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        if len(_shape_arrays) < _SHAPE_CACHE_MAX:
            _shape_arrays[shape] = arr
    return arr


def allreduce_cpu_async(name, data_ptr, shape, dtype, out_ptr, op, keep=None, process_set=0):
    """allreduce_async for a contiguous CPU buffer, without a make_tensor per call: the same
    checks, errors and held name as allreduce_async."""
    hold = (name, process_set)
    with _held_lock:
        if hold in _held:
            code = errors.ERR_ALREADY_EXISTS
            raise errors.error_class(code)(
                code, "an operation named '%s' is already in flight on this rank; wait for "
                "it before enqueueing the name again" % name)
        _held.add(hold)
    try:
        arr = _shape_array(shape)
        desc = _lib.HoraTensor(data_ptr or None, arr, len(shape), dtype, DEVICE_CPU, 0, None)
        raw = _lib.c_handle()
        lib = _lib._lib or _lib.lib()
        status = lib.hora_allreduce_async(name.encode("utf-8"), ctypes.byref(desc),
                                          out_ptr or None, op, 1.0, 1.0, process_set,
                                          ctypes.byref(raw))
    except BaseException:
        _unhold(hold)
        raise
    if status != errors.OK:
        _unhold(hold)
        raise _lib.make_error(status, "hora_allreduce_async(%s)" % name)
    return Handle(raw.value, name, keep, hold)


def wait_release(handle):
    """handle.wait() then handle.release() whatever the wait did, as synchronize() does for
    one handle."""
    lib = _lib._lib or _lib.lib()
    raw = handle._h
    try:
        while True:
            status = lib.hora_wait(raw, _WAIT_SLICE_S)
            if status != errors.ERR_DEADLINE_EXCEEDED:
                break
        handle._done = True
        if status != errors.OK:
            raise _lib.make_error(status, handle.name)
    finally:
        handle.release()
