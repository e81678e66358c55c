"""Collectives on numpy arrays. Each *_async function returns an AsyncResult whose wait()
returns the result; the blocking forms wait at once."""

import numpy as np

from . import core

Sum, Average, Min, Max, Product = core.SUM, core.AVERAGE, core.MIN, core.MAX, core.PRODUCT

_NP_DTYPES = {
    np.dtype(np.uint8): core.UINT8,
    np.dtype(np.int8): core.INT8,
    np.dtype(np.int16): core.INT16,
    np.dtype(np.uint16): core.UINT16,
    np.dtype(np.int32): core.INT32,
    np.dtype(np.int64): core.INT64,
    np.dtype(np.float16): core.FLOAT16,
    np.dtype(np.float32): core.FLOAT32,
    np.dtype(np.float64): core.FLOAT64,
    np.dtype(np.bool_): core.BOOL,
}


def _dtype_code(arr):
    code = _NP_DTYPES.get(arr.dtype)
    if code is None:
        raise TypeError("hora does not support arrays of dtype %s; supported: %s" % (
            arr.dtype, ", ".join(str(d) for d in _NP_DTYPES)))
    return code


def _as_array(x):
    arr = np.ascontiguousarray(x)
    _dtype_code(arr)
    return arr


def _describe(arr):
    return core.make_tensor(arr.ctypes.data if arr.size else None, arr.shape,
                            _dtype_code(arr))


class AsyncResult(object):
    """An operation in flight. wait() returns its result and frees the handle."""

    def __init__(self, handle, finish):
        self._handle = handle
        self._finish = finish
        self._result = None
        self._finished = False

    def poll(self):
        return self._finished or self._handle.poll()

    def wait(self, timeout=None):
        if not self._finished:
            try:
                self._handle.wait(timeout)
                self._result = self._finish(self._handle)
            except core.errors.HoraTimeoutError:
                raise
            except BaseException:
                self._handle.release()
                self._finished = True
                raise
            self._handle.release()
            self._finished = True
        return self._result


def _gathered(handle, dtype):
    shape = handle.result_shape()
    out = np.empty(shape, dtype=dtype)
    handle.result_copy(out.ctypes.data if out.size else None, out.nbytes)
    return out


def allreduce_async(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    out=None):
    """Reduces `array` over all ranks into `out` (a new array when None; may be `array`
    itself for in place, when it is contiguous)."""
    arr = _as_array(array)
    if out is None:
        out = np.empty_like(arr)
    elif not (out.flags.c_contiguous and out.shape == arr.shape and out.dtype == arr.dtype):
        raise ValueError("out must be a contiguous array with the input's shape and dtype")
    t = _describe(arr)
    h = core.allreduce_async(core.op_name("allreduce", name), t,
                             out.ctypes.data if out.size else None, op, prescale_factor,
                             postscale_factor, keep=(arr, out))
    return AsyncResult(h, lambda _: out)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              out=None):
    return allreduce_async(array, op, name, prescale_factor, postscale_factor, out).wait()


def broadcast_async(array, root_rank, name=None, inplace=False):
    """Root's array to every rank. inplace=True writes into `array` (must be contiguous)."""
    if inplace:
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise ValueError("in-place broadcast needs a contiguous numpy array")
        buf = array
    else:
        buf = np.array(array, copy=True, order="C")
    h = core.broadcast_async(core.op_name("broadcast", name), _describe(buf), root_rank,
                             keep=buf)
    return AsyncResult(h, lambda _: buf)


def broadcast(array, root_rank, name=None, inplace=False):
    return broadcast_async(array, root_rank, name, inplace).wait()


def allgather_async(array, name=None):
    arr = _as_array(array)
    h = core.allgather_async(core.op_name("allgather", name), _describe(arr), keep=arr)
    return AsyncResult(h, lambda handle: _gathered(handle, arr.dtype))


def allgather(array, name=None):
    return allgather_async(array, name).wait()


def reducescatter_async(array, op=Average, name=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    arr = _as_array(array)
    h = core.reducescatter_async(core.op_name("reducescatter", name), _describe(arr), op,
                                 prescale_factor, postscale_factor, keep=arr)
    return AsyncResult(h, lambda handle: _gathered(handle, arr.dtype))


def reducescatter(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    return reducescatter_async(array, op, name, prescale_factor, postscale_factor).wait()


def alltoall_async(array, splits=None, name=None):
    """Sends splits[r] rows to rank r. Result: (received array, received splits)."""
    arr = _as_array(array)
    if splits is not None:
        splits = [int(s) for s in np.asarray(splits).reshape(-1)]
    h = core.alltoall_async(core.op_name("alltoall", name), _describe(arr), splits, keep=arr)
    n = core.size()
    return AsyncResult(h, lambda handle: (_gathered(handle, arr.dtype),
                                          np.array(handle.result_splits(n), dtype=np.int64)))


def alltoall(array, splits=None, name=None):
    return alltoall_async(array, splits, name).wait()


def barrier():
    AsyncResult(core.barrier_async(), lambda _: None).wait()


def join():
    """This rank has no more data; returns the last rank to join once all have."""
    return AsyncResult(core.join_async(), lambda h: h.result_join_rank()).wait()
