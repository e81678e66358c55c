"""Hora: a collective communication runtime for distributed deep learning.

`hora` works on numpy arrays; `hora.torch` is horovod.torch's API on torch tensors.
Both go through the C API of libhora.so (bindings/c/hora.h) with ctypes.
"""

from .errors import (HoraError, HoraPeerFailureError, HoraMismatchError, HoraTimeoutError,
                     HoraPreconditionError)
from .core import (init, shutdown, is_initialized, rank, size, local_rank, local_size,
                   cross_rank, cross_size, version, built, built_backends, nccl_version, cuda_info,
                   async_error, autotune_state, steady_stats, control_stats, diagnose)
from .numpy_ops import (Sum, Average, Min, Max, Product, AsyncResult, allreduce,
                        allreduce_async, broadcast, broadcast_async, allgather,
                        allgather_async, reducescatter, reducescatter_async, alltoall,
                        alltoall_async, barrier, join)

__all__ = [
    "HoraError", "HoraPeerFailureError", "HoraMismatchError", "HoraTimeoutError",
    "HoraPreconditionError", "init", "shutdown", "is_initialized", "rank", "size",
    "local_rank", "local_size", "cross_rank", "cross_size", "version", "built", "built_backends", "nccl_version", "cuda_info", "async_error", "autotune_state",
    "steady_stats", "control_stats", "diagnose",
    "Sum", "Average", "Min", "Max", "Product", "AsyncResult", "allreduce", "allreduce_async",
    "broadcast", "broadcast_async", "allgather", "allgather_async", "reducescatter",
    "reducescatter_async", "alltoall", "alltoall_async", "barrier", "join",
]
