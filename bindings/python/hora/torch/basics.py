"""horovod.torch's basics (horovod.common.basics): init, shutdown, topology, what is built."""

import logging as _logging

from .. import core as _core

_log = _logging.getLogger("hora.torch")
_last_process_sets = None  # what the last init registered (hvd.elastic's restart reuses it)
_last_deterministic = None  # the last init's deterministic argument (the restart's too)


def init(comm=None, process_sets=None, deterministic=None):
    """Starts Hora (collective). process_sets: a list of hvd.ProcessSet registered in order
    on every rank (collective), or "dynamic" (sets are added later with add_process_set,
    which Hora allows in any case). `comm` (an MPI communicator) is not supported.
    deterministic: True makes Sum and Average allreduces of CPU floating tensors
    bitwise reproducible (the left-to-right sum in rank order, whatever the fusion, grouping
    and backend), False turns that off; None (the default) reads HORA_DETERMINISTIC. It must
    be the same on every rank."""
    if comm is not None:
        raise NotImplementedError("hora.torch.init: comm is not supported; hora runs on all "
                                  "ranks of the job")
    if process_sets is not None and process_sets != "dynamic" and \
            not isinstance(process_sets, (list, tuple)):
        raise ValueError("process_sets must be a list of hvd.ProcessSet or \"dynamic\", got %r"
                         % (process_sets,))
    global _last_process_sets, _last_deterministic
    from .mpi_ops import _init_process_sets  # mpi_ops imports this module
    _core.init(deterministic=deterministic)
    _last_deterministic = deterministic
    _last_process_sets = [] if process_sets in (None, "dynamic") else list(process_sets)
    duplicate = _init_process_sets(_last_process_sets)
    if duplicate is not None:  # as Horovod: raised once every set is registered (Hora runs)
        raise ValueError("hora.torch.init: process_sets entry number %d is a duplicate of the "
                         "global set or of an earlier entry: %s"
                         % (duplicate, _last_process_sets[duplicate]))


def last_deterministic():
    """The last init's deterministic argument, for a restart."""
    return _last_deterministic


def last_process_sets():
    """The hvd.ProcessSet list the last init registered (the same objects), for a restart."""
    return list(_last_process_sets or [])


shutdown = _core.shutdown
is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
cross_rank = _core.cross_rank
cross_size = _core.cross_size


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return local_size() * cross_size() == size()


def _built(backend):
    try:
        return _core.built(backend)
    except OSError:
        return False


def mpi_built():
    return _built("mpi")


def gloo_built():
    return _built("gloo")


def nccl_built():
    """NCCL's version code as Horovod returns it (e.g. 22809), as libhora loads NCCL at run
    time; 0 when this build has no NCCL backend or NCCL cannot be loaded here
    (hora.nccl_version() says why)."""
    try:
        return _core.nccl_version()[0]
    except (OSError, AttributeError):
        return 0


def cuda_built():
    """True when libhora was built with CUDA support (whether or not this machine has a GPU)."""
    return _built("cuda")


def gpu_available(ext_base_name="torch", verbose=False):
    """Horovod's check: CUDA support built in and a usable GPU here (torch sees one)."""
    import torch
    ok = cuda_built() and torch.cuda.is_available()
    if verbose and not ok:
        import logging
        logging.getLogger("hora").info("GPU not available: %s", _core.cuda_info() or
                                       "this libhora has no CUDA support")
    return ok


def mpi_enabled():
    return mpi_built()


def gloo_enabled():
    return gloo_built()


def mpi_threads_supported():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts this rank's timeline at any point of the job; call it on every rank. Rank 0
    writes file_path (as Horovod's), rank R > 0 file_path with ".rank<R>" before ".json";
    `hora-timeline merge file_path` joins them (docs/timeline.md). mark_cycles: a CYCLE_START
    instant for each plan received and each steady round, as Horovod marks its cycles."""
    _core.start_timeline(file_path, mark_cycles)


def autotune_state():
    """The autotuner's settings on this rank (hora.autotune_state, docs/autotune.md)."""
    return _core.autotune_state()


def stop_timeline():
    """Finishes this rank's timeline file (nothing when none is on)."""
    _core.stop_timeline()
