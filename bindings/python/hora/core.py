"""Hora's framework-neutral layer: lifecycle, topology, handles, and the C tensor
descriptor (the names of collectives: _names.py). Framework bindings (hora.numpy_ops,
hora.torch) build on this module."""

import atexit
import ctypes
import os
import threading

from . import _diagnose
from . import _lib
from . import elastic_client
from . import errors

# hora_reduce_op_t
SUM, AVERAGE, MIN, MAX, PRODUCT = 0, 1, 2, 3, 4
# hora_dtype_t
UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64, BOOL, INT16, UINT16 = range(11)
DTYPE_SIZES = {UINT8: 1, INT8: 1, INT32: 4, INT64: 8, FLOAT16: 2, BFLOAT16: 2, FLOAT32: 4,
               FLOAT64: 8, BOOL: 1, INT16: 2, UINT16: 2}
DEVICE_CPU, DEVICE_CUDA = 0, 1

# hora_wait slices: a Python thread waiting forever stays interruptible (Ctrl-C).
_WAIT_SLICE_S = 0.5

_atexit_registered = False


# ---- lifecycle and topology ----

def init(rank=None, size=None, coordinator_address=None, token=None, deterministic=None):
    """Starts the runtime (collective). Arguments left None come from the environment
    (HORA_RANK, HORA_SIZE, HORA_COORDINATOR_ADDR, HORA_JOB_TOKEN, ...). Calling init when
    already initialized does nothing, unless the job has failed (a stall timeout or a lost
    peer: async_error() is HORA_ERR_ABORTED or HORA_ERR_PEER_FAILURE, and every operation
    would fail with it): then init shuts that runtime down and starts a new one, as every
    rank of the failed job does when it calls init (rank 0 replaces the coordinator; the
    others wait for it, up to the start timeout). deterministic: True or False overrides
    HORA_DETERMINISTIC (docs/design.md, "Deterministic reductions"); None reads it.
    In a worker of horarun's elastic mode, rank, size, address and token left None come from
    its rendezvous: this process's place in the next generation (hora.elastic_client)."""
    if deterministic not in (None, True, False):  # 0 and 1 compare equal to False and True
        raise ValueError("init: deterministic (HORA_DETERMINISTIC) must be True, False or "
                         "None, got %r" % (deterministic,))
    global _atexit_registered
    lib = _lib.lib()
    if lib.hora_is_initialized():
        failed = async_error()
        if failed is None or failed.status not in (errors.ERR_ABORTED,
                                                   errors.ERR_PEER_FAILURE):
            return
        lib.hora_shutdown()  # its status repeats the failure; the new job is what counts
    if rank is None and size is None and coordinator_address is None and token is None and \
            elastic_client.active():
        place = elastic_client.join()
        rank, size = place["rank"], place["size"]
        coordinator_address, token = place["coordinator"], place["job_token"]
    cfg = _lib.HoraConfig()
    cfg.struct_size = ctypes.sizeof(_lib.HoraConfig)
    cfg.rank = -1 if rank is None else int(rank)
    cfg.size = -1 if size is None else int(size)
    cfg.coordinator_address = coordinator_address.encode() if coordinator_address else None
    cfg.token = token.encode() if token else None
    cfg.deterministic = 0 if deterministic is None else (1 if deterministic else -1)
    _lib.check(lib.hora_init(ctypes.byref(cfg)), "hora_init")
    _diagnose.start()
    reset_names()
    with _held_lock:  # handles of an earlier init are gone with it
        _held.clear()
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        _atexit_registered = True


def diagnose():
    """Asks for a diagnosis of every rank now (not collective): what each waits for, its last
    operation, its Python stacks. Rank 0 logs it as one message and appends it to the job's
    diagnosis file (HORA_DIAGNOSE_FILE); docs/failure-model.md "Diagnosis"."""
    _lib.check(_lib.lib().hora_diagnose(), "hora_diagnose")


def _shutdown_at_exit():
    try:
        if _lib._lib is not None and _lib._lib.hora_is_initialized():
            _lib._lib.hora_shutdown()
    except Exception:  # interpreter teardown: nothing useful left to report
        pass


def shutdown():
    """Stops the runtime (collective). Safe when not initialized."""
    if _lib._lib is None:
        return
    _lib.check(_lib.lib().hora_shutdown(), "hora_shutdown")


def is_initialized():
    try:
        return bool(_lib.lib().hora_is_initialized())
    except OSError:
        return False


def _int_query(fn_name):
    lib = _lib.lib()
    out = ctypes.c_int32()
    _lib.check(getattr(lib, fn_name)(ctypes.byref(out)), fn_name)
    return out.value


def rank():
    return _int_query("hora_rank")


def size():
    return _int_query("hora_size")


def local_rank():
    return _int_query("hora_local_rank")


def local_size():
    return _int_query("hora_local_size")


def cross_rank():
    return _int_query("hora_cross_rank")


def cross_size():
    return _int_query("hora_cross_size")


def version():
    return _lib._decode(_lib.lib().hora_version())


def built(backend):
    """True if `backend` ("gloo", "mpi", "nccl", "shm", ...) was compiled into libhora.so."""
    return bool(_lib.lib().hora_built(backend.encode()))


def nccl_version():
    """(code, detail): NCCL's version code as libhora loads it (22809 for 2.28.9; 0 when this
    build has no NCCL backend or the library cannot be loaded) and the file it came from, or
    why it could not be loaded."""
    detail = ctypes.c_char_p()
    code = _lib.lib().hora_nccl_version(ctypes.byref(detail))
    return int(code), _lib._decode(detail.value) if detail.value is not None else ""


def cuda_info():
    """One line on CUDA: runtime and driver versions, device count or cudaGetDeviceCount's
    error; "" when this build has no CUDA support."""
    return _lib._decode(_lib.lib().hora_cuda_info())


def built_backends():
    """The data-plane backends compiled into libhora.so, sorted: ["gloo", "loopback", ...]."""
    text = _lib._decode(_lib.lib().hora_built_backends())
    return [b for b in text.split(",") if b]


def async_error():
    """None while the job is healthy, else the sticky background error as an exception
    (not raised)."""
    status, message = _lib.async_error()
    if status == errors.OK:
        return None
    return errors.error_class(status)(status, message, "background")


def start_timeline(file_path, mark_cycles=False):
    """Starts writing this rank's timeline (Chrome trace events under Horovod's names,
    docs/timeline.md): rank 0 to file_path, rank R > 0 to file_path with ".rank<R>" before
    ".json". mark_cycles adds a CYCLE_START instant per plan received and steady round. Call
    it on every rank; it does not wait for the others. Raises HoraPreconditionError when a
    timeline is already on."""
    path = os.fspath(file_path)
    _lib.check(_lib.lib().hora_start_timeline(path.encode("utf-8"), 1 if mark_cycles else 0),
               "start_timeline")


def stop_timeline():
    """Finishes this rank's timeline file; does nothing when no timeline is on."""
    _lib.check(_lib.lib().hora_stop_timeline(), "stop_timeline")


def autotune_state():
    """The fusion threshold and cycle time rank 0's coordinator plans with, as it last told
    this rank: {"fusion_threshold_bytes", "cycle_time_ms", "trial", "done"}. With
    HORA_AUTOTUNE=1 they change while the first steps' trials run and are final once done is
    True (the same on every rank); otherwise the configured values, done True
    (docs/autotune.md)."""
    fusion = ctypes.c_int64()
    cycle = ctypes.c_double()
    trial = ctypes.c_int32()
    done = ctypes.c_int()
    _lib.check(_lib.lib().hora_autotune_state(ctypes.byref(fusion), ctypes.byref(cycle),
                                              ctypes.byref(trial), ctypes.byref(done)),
               "autotune_state")
    return {"fusion_threshold_bytes": fusion.value, "cycle_time_ms": cycle.value,
            "trial": trial.value, "done": bool(done.value)}


# ---- names (in _names.py; the names stay here for the modules that use core.*) ----

from ._names import (reset_names, begin_call, name_taken, refuse, op_name,  # noqa: E402,F401
                     sync_name, sync_failed)


# ---- tensors and handles ----

# One shape array per shape, shared by every descriptor of that shape: the C API copies the
# descriptor when it enqueues (bindings/c/hora.cc ToSpec), so a read-only array is safe on any
# thread, and a call on a shape seen before builds no array.
_shape_arrays = {}
_SHAPE_CACHE_MAX = 4096


def _shape_array(shape):
    arr = _shape_arrays.get(shape)
    if arr is None:
        arr = (ctypes.c_int64 * max(len(shape), 1))(*[int(d) for d in shape])
        if len(_shape_arrays) < _SHAPE_CACHE_MAX:
            _shape_arrays[shape] = arr
    return arr


def make_tensor(data_ptr, shape, dtype, device=DEVICE_CPU, device_index=0, stream=None):
    """A hora_tensor_t for a contiguous buffer. Returns the struct; its shape array is kept
    alive as an attribute."""
    if type(shape) is not tuple:
        shape = tuple(shape)
    arr = _shape_array(shape)
    t = _lib.HoraTensor(data_ptr or None, arr, len(shape), dtype, device, device_index,
                        stream or None)
    t._shape_arr = arr
    return t


def _encode_name(name):
    return name.encode("utf-8")


class Handle(object):
    """One operation in flight in the runtime. `keep` holds the buffers the runtime reads or
    writes until the handle is done. Release exactly once (release() or wait(release=True))."""

    __slots__ = ("_h", "name", "_keep", "_released", "_done", "_hold")

    def __init__(self, raw, name, keep=None, hold=None):
        self._h = raw
        self.name = name
        self._keep = keep
        self._released = False
        self._done = False
        self._hold = hold  # (name, process set) held in _held until release

    @property
    def raw(self):
        return self._h

    def poll(self):
        if self._done:
            return True
        done = ctypes.c_int()
        _lib.check(_lib.lib().hora_poll(self._h, ctypes.byref(done)), "poll(%s)" % self.name)
        self._done = bool(done.value)
        return self._done

    def wait(self, timeout=None):
        """Waits until done; raises the operation's error. timeout in seconds (None: none of
        its own; the runtime's failure detection still bounds the wait)."""
        lib = _lib.lib()
        if timeout is not None:
            status = lib.hora_wait(self._h, float(timeout))
            if status == errors.OK:
                self._done = True
            else:
                if status != errors.ERR_DEADLINE_EXCEEDED:
                    self._done = True
                raise _lib.make_error(status, self.name)
            return
        while True:
            status = lib.hora_wait(self._h, _WAIT_SLICE_S)
            if status == errors.ERR_DEADLINE_EXCEEDED:
                continue
            self._done = True
            if status != errors.OK:
                raise _lib.make_error(status, self.name)
            return

    def result_shape(self):
        lib = _lib.lib()
        max_ndim = 32
        shape = (ctypes.c_int64 * max_ndim)()
        ndim = ctypes.c_int32()
        _lib.check(lib.hora_result_shape(self._h, shape, max_ndim, ctypes.byref(ndim)),
                   "result_shape(%s)" % self.name)
        return tuple(shape[i] for i in range(ndim.value))

    def result_copy(self, dst_ptr, nbytes):
        _lib.check(_lib.lib().hora_result_copy(self._h, dst_ptr or None, nbytes),
                   "result_copy(%s)" % self.name)

    def result_splits(self, n):
        arr = (ctypes.c_int64 * max(n, 1))()
        _lib.check(_lib.lib().hora_result_splits(self._h, arr, n),
                   "result_splits(%s)" % self.name)
        return [arr[i] for i in range(n)]

    def result_join_rank(self):
        out = ctypes.c_int32()
        _lib.check(_lib.lib().hora_result_join_rank(self._h, ctypes.byref(out)),
                   "result_join_rank(%s)" % self.name)
        return out.value

    def release(self):
        if self._released:
            return
        self._released = True
        self._keep = None
        _unhold(self._hold)
        status = _lib.lib().hora_release(self._h)
        if status != errors.OK and status != errors.ERR_NOT_FOUND:
            raise _lib.make_error(status, "release(%s)" % self.name)

    def __del__(self):
        # A handle dropped without release: free it (the runtime keeps what a pending
        # operation needs). Never raise from a finalizer.
        if not getattr(self, "_released", True) and _lib._lib is not None:
            try:
                _unhold(self._hold)
                _lib._lib.hora_release(self._h)
            except Exception:
                pass


# A collective's name stays taken on this rank from its enqueue until its handle is released
# (synchronize() releases it), not only until the runtime completes it: as in Horovod, where
# the background thread's cycle keeps a name busy long enough that a second submission of it
# right after the first always fails. Without this the second one would fail or not depending
# on whether the first had already finished.
_held = set()
_held_lock = threading.Lock()


def _unhold(key):
    if key is not None:
        with _held_lock:
            _held.discard(key)


def _enqueue(fn_name, name, *args, keep=None, hold=None):
    if hold is not None:
        with _held_lock:
            if hold in _held:
                code = errors.ERR_ALREADY_EXISTS
                raise errors.error_class(code)(
                    code, "an operation named '%s' is already in flight on this rank; wait for "
                    "it before enqueueing the name again" % hold[0])
            _held.add(hold)
    raw = _lib.c_handle()
    lib = _lib._lib or _lib.lib()
    try:
        status = getattr(lib, fn_name)(*args, ctypes.byref(raw))
    except BaseException:
        _unhold(hold)
        raise
    if status != errors.OK:
        _unhold(hold)
        raise _lib.make_error(status, "%s(%s)" % (fn_name, name) if name else fn_name)
    return Handle(raw.value, name or fn_name, keep, hold)


def allreduce_async(name, tensor, out_ptr, op, prescale=1.0, postscale=1.0, keep=None,
                    process_set=0):
    return _enqueue("hora_allreduce_async", name, _encode_name(name), ctypes.byref(tensor),
                    out_ptr or None, int(op), float(prescale), float(postscale),
                    int(process_set), keep=(tensor, keep), hold=(name, int(process_set)))


def broadcast_async(name, tensor, root, keep=None, process_set=0):
    return _enqueue("hora_broadcast_async", name, _encode_name(name), ctypes.byref(tensor),
                    int(root), int(process_set), keep=(tensor, keep),
                    hold=(name, int(process_set)))


# `out` (allgather, reducescatter, alltoall): (pointer, bytes) of the caller's buffer, or None.
# With it the data plane writes a CPU result of exactly that many bytes straight there
# (hora_*_into_async); a result of another size is held, as without it (result_copy into the
# buffer works either way, and copies nothing when the result is already there).

def allgather_async(name, tensor, keep=None, process_set=0, out=None):
    if out is not None:
        return _enqueue("hora_allgather_into_async", name, _encode_name(name),
                        ctypes.byref(tensor), out[0], int(out[1]), int(process_set),
                        keep=(tensor, keep), hold=(name, int(process_set)))
    return _enqueue("hora_allgather_async", name, _encode_name(name), ctypes.byref(tensor),
                    int(process_set), keep=(tensor, keep), hold=(name, int(process_set)))


def reducescatter_async(name, tensor, op, prescale=1.0, postscale=1.0, keep=None,
                        process_set=0, out=None):
    scales = (int(op), float(prescale), float(postscale), int(process_set))
    if out is not None:
        return _enqueue("hora_reducescatter_into_async", name, _encode_name(name),
                        ctypes.byref(tensor), out[0], int(out[1]), *scales,
                        keep=(tensor, keep), hold=(name, int(process_set)))
    return _enqueue("hora_reducescatter_async", name, _encode_name(name), ctypes.byref(tensor),
                    *scales, keep=(tensor, keep), hold=(name, int(process_set)))


def alltoall_async(name, tensor, splits=None, keep=None, process_set=0, out=None):
    if splits is None:
        arr, n = None, 0
    else:
        n = len(splits)
        arr = (ctypes.c_int64 * max(n, 1))(*[int(s) for s in splits])
    if out is not None:
        return _enqueue("hora_alltoall_into_async", name, _encode_name(name),
                        ctypes.byref(tensor), arr, n, out[0], int(out[1]), int(process_set),
                        keep=(tensor, arr, keep), hold=(name, int(process_set)))
    return _enqueue("hora_alltoall_async", name, _encode_name(name), ctypes.byref(tensor),
                    arr, n, int(process_set), keep=(tensor, arr, keep),
                    hold=(name, int(process_set)))


def barrier_async(process_set=0):
    return _enqueue("hora_barrier_async", "barrier", int(process_set))


def join_async(process_set=0):
    return _enqueue("hora_join_async", "join", int(process_set))


def send_async(tensor, peer, tag=0, keep=None, process_set=0):
    """Sends the tensor to `peer` (a rank of the process set). The n-th send to a peer with a
    tag matches the peer's n-th recv from this rank with that tag."""
    return _enqueue("hora_send_async", "send to %d" % peer, ctypes.byref(tensor), int(peer),
                    int(tag), int(process_set), keep=(tensor, keep))


def recv_async(tensor, peer, tag=0, keep=None, process_set=0):
    """Receives into the tensor from `peer`; dtype and element count must match the send."""
    return _enqueue("hora_recv_async", "recv from %d" % peer, ctypes.byref(tensor), int(peer),
                    int(tag), int(process_set), keep=(tensor, keep))


# ---- process sets (in _sets.py; the names stay here for the modules that use core.*) ----

from ._sets import (process_set_add, process_set_remove, process_set_rank,  # noqa: E402,F401
                    process_set_size, process_set_ranks, process_set_ids, steady_stats,
                    control_stats)
