"""Loads libhora.so and declares the C API of bindings/c/hora.h for ctypes.

Search order: $HORA_LIBRARY; libhora.so next to this package; the repository's
bazel-bin/bindings/c/libhora.so (when the package runs from a source checkout); then the
loader's own search path (ctypes.util.find_library("hora"), "libhora.so", /usr/local/lib).
The library is loaded on first use, so `import hora` works without it.
"""

import ctypes
import ctypes.util
import os
import threading

from . import errors

c_status = ctypes.c_int
c_handle = ctypes.c_int64
c_int_p = ctypes.POINTER(ctypes.c_int)
c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_int64_p = ctypes.POINTER(ctypes.c_int64)


class HoraTensor(ctypes.Structure):
    """hora_tensor_t."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", c_int64_p),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("device_index", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


class HoraConfig(ctypes.Structure):
    """hora_config_t."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("rank", ctypes.c_int32),
        ("size", ctypes.c_int32),
        ("coordinator_address", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("deterministic", ctypes.c_int32),
    ]


_T = ctypes.POINTER(HoraTensor)
# name -> (restype, argtypes), exactly as in hora.h.
_PROTOTYPES = {
    "hora_init": (c_status, [ctypes.POINTER(HoraConfig)]),
    "hora_shutdown": (c_status, []),
    "hora_is_initialized": (ctypes.c_int, []),
    "hora_rank": (c_status, [c_int32_p]),
    "hora_size": (c_status, [c_int32_p]),
    "hora_local_rank": (c_status, [c_int32_p]),
    "hora_local_size": (c_status, [c_int32_p]),
    "hora_cross_rank": (c_status, [c_int32_p]),
    "hora_cross_size": (c_status, [c_int32_p]),
    "hora_allreduce_async": (c_status, [ctypes.c_char_p, _T, ctypes.c_void_p, ctypes.c_int,
                                        ctypes.c_double, ctypes.c_double, ctypes.c_int32,
                                        ctypes.POINTER(c_handle)]),
    "hora_broadcast_async": (c_status, [ctypes.c_char_p, _T, ctypes.c_int32, ctypes.c_int32,
                                        ctypes.POINTER(c_handle)]),
    "hora_allgather_async": (c_status, [ctypes.c_char_p, _T, ctypes.c_int32,
                                        ctypes.POINTER(c_handle)]),
    "hora_allgather_into_async": (c_status, [ctypes.c_char_p, _T, ctypes.c_void_p,
                                             ctypes.c_size_t, ctypes.c_int32,
                                             ctypes.POINTER(c_handle)]),
    "hora_reducescatter_async": (c_status, [ctypes.c_char_p, _T, ctypes.c_int, ctypes.c_double,
                                            ctypes.c_double, ctypes.c_int32,
                                            ctypes.POINTER(c_handle)]),
    "hora_reducescatter_into_async": (c_status, [ctypes.c_char_p, _T, ctypes.c_void_p,
                                                 ctypes.c_size_t, ctypes.c_int, ctypes.c_double,
                                                 ctypes.c_double, ctypes.c_int32,
                                                 ctypes.POINTER(c_handle)]),
    "hora_alltoall_async": (c_status, [ctypes.c_char_p, _T, c_int64_p, ctypes.c_int32,
                                       ctypes.c_int32, ctypes.POINTER(c_handle)]),
    "hora_alltoall_into_async": (c_status, [ctypes.c_char_p, _T, c_int64_p, ctypes.c_int32,
                                            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32,
                                            ctypes.POINTER(c_handle)]),
    "hora_barrier_async": (c_status, [ctypes.c_int32, ctypes.POINTER(c_handle)]),
    "hora_join_async": (c_status, [ctypes.c_int32, ctypes.POINTER(c_handle)]),
    "hora_send_async": (c_status, [_T, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                   ctypes.POINTER(c_handle)]),
    "hora_recv_async": (c_status, [_T, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                   ctypes.POINTER(c_handle)]),
    "hora_refuse": (c_status, [ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p]),
    "hora_process_set_add": (c_status, [c_int32_p, ctypes.c_int32, ctypes.c_char_p, c_int32_p]),
    "hora_process_set_remove": (c_status, [ctypes.c_int32]),
    "hora_process_set_rank": (c_status, [ctypes.c_int32, c_int32_p]),
    "hora_process_set_size": (c_status, [ctypes.c_int32, c_int32_p]),
    "hora_process_set_included": (c_status, [ctypes.c_int32, c_int_p]),
    "hora_process_set_ranks": (c_status, [ctypes.c_int32, c_int32_p, ctypes.c_int32, c_int32_p]),
    "hora_process_set_ids": (c_status, [c_int32_p, ctypes.c_int32, c_int32_p]),
    "hora_steady_stats": (c_status, [ctypes.c_int32, c_int64_p, c_int64_p, c_int64_p]),
    "hora_control_stats": (c_status, [c_int64_p, c_int64_p]),
    "hora_poll": (c_status, [c_handle, c_int_p]),
    "hora_wait": (c_status, [c_handle, ctypes.c_double]),
    "hora_release": (c_status, [c_handle]),
    "hora_result_shape": (c_status, [c_handle, c_int64_p, ctypes.c_int32, c_int32_p]),
    "hora_result_copy": (c_status, [c_handle, ctypes.c_void_p, ctypes.c_size_t]),
    "hora_result_splits": (c_status, [c_handle, c_int64_p, ctypes.c_int32]),
    "hora_result_join_rank": (c_status, [c_handle, c_int32_p]),
    "hora_start_timeline": (c_status, [ctypes.c_char_p, ctypes.c_int]),
    "hora_stop_timeline": (c_status, []),
    "hora_diagnose": (c_status, []),
    "hora_diagnosis_wait": (c_status, [ctypes.c_double, c_int64_p]),
    "hora_diagnosis_answer": (c_status, [ctypes.c_int64, ctypes.c_char_p, ctypes.c_char_p]),
    "hora_autotune_state": (c_status, [c_int64_p, ctypes.POINTER(ctypes.c_double), c_int32_p,
                                       c_int_p]),
    "hora_error_string": (ctypes.c_char_p, [c_status]),
    "hora_last_error": (ctypes.c_char_p, []),
    "hora_async_error": (c_status, [ctypes.POINTER(ctypes.c_char_p)]),
    "hora_version": (ctypes.c_char_p, []),
    "hora_built": (ctypes.c_int, [ctypes.c_char_p]),
    "hora_built_backends": (ctypes.c_char_p, []),
    "hora_nccl_version": (ctypes.c_int, [ctypes.POINTER(ctypes.c_char_p)]),
    "hora_cuda_info": (ctypes.c_char_p, []),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def candidate_paths():
    """Where libhora.so is looked for, in order."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = []
    env = os.environ.get("HORA_LIBRARY")
    if env:
        paths.append(env)
    paths.append(os.path.join(here, "libhora.so"))
    # bindings/python/hora -> repository root -> bazel-bin/bindings/c/libhora.so
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    paths.append(os.path.join(repo, "bazel-bin", "bindings", "c", "libhora.so"))
    found = ctypes.util.find_library("hora")
    if found:
        paths.append(found)
    paths.append("libhora.so")
    paths.append("/usr/local/lib/libhora.so")
    return paths


def nccl_wheel_library():
    """libnccl.so.2 of the `nvidia-nccl` wheel (the one torch brings), or None."""
    import sys
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        path = os.path.join(entry, "nvidia", "nccl", "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    return None


def _point_at_nccl_wheel():
    """libhora loads NCCL itself (HORA_NCCL_LIBRARY, then the loader's path, then
    /usr/local/cuda/lib64; docs/gpu.md). When HORA_NCCL_LIBRARY is unset and the nvidia-nccl
    wheel is installed, point it there before libhora reads it, so that Hora uses the NCCL
    torch uses."""
    if os.environ.get("HORA_NCCL_LIBRARY"):
        return
    path = nccl_wheel_library()
    if path is not None:
        os.environ["HORA_NCCL_LIBRARY"] = path


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def lib():
    """The loaded library (loads it on first call). Raises OSError naming every path tried."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        _point_at_nccl_wheel()
        tried = []
        env = os.environ.get("HORA_LIBRARY")
        for path in candidate_paths():
            is_file_path = os.sep in path
            if is_file_path and not os.path.exists(path):
                tried.append("%s (not found)" % path)
                if path == env:
                    raise OSError("HORA_LIBRARY=%s does not exist" % env)
                continue
            try:
                handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                if path == env:
                    raise OSError("cannot load HORA_LIBRARY=%s: %s" % (env, e))
                continue
            try:
                _declare(handle)
            except AttributeError as e:
                raise OSError("%s is not a compatible libhora.so: %s" % (path, e))
            _lib, _lib_path = handle, path
            return _lib
        raise OSError("libhora.so not found; set HORA_LIBRARY or build //bindings/c:libhora.so. "
                      "Tried: " + "; ".join(tried))


def lib_path():
    lib()
    return _lib_path


def _decode(b):
    if not b:
        return ""
    return b.decode("utf-8", "replace")


def last_error():
    return _decode(lib().hora_last_error())


def status_string(status):
    return _decode(lib().hora_error_string(status))


def async_error():
    """(status, message) of the sticky background error; (0, '') while healthy."""
    msg = ctypes.c_char_p()
    status = lib().hora_async_error(ctypes.byref(msg))
    return status, _decode(msg.value)


def make_error(status, operation=None):
    """Builds the exception for a failed call. Must run on the thread that made the call,
    right after it (hora_last_error is per thread)."""
    message = last_error()
    if not message and status in (errors.ERR_PEER_FAILURE, errors.ERR_ABORTED):
        _, message = async_error()
    if not message:
        message = status_string(status) or "hora status %d" % status
    # The C library names its own functions; a Python user calls hora.init() / hvd.init().
    message = message.replace("call hora_init ", "call hvd.init() (hora.init()) ")
    return errors.error_class(status)(status, message, operation)


def check(status, operation=None):
    if status != errors.OK:
        raise make_error(status, operation)
