"""Process sets through the C API (hora_process_set_*) and the steady path's counters per set;
re-exported by hora.core."""

import ctypes

from . import _lib


def process_set_add(ranks, cpu_operations=None):
    """Collective over every rank: adds a set of `ranks` (global ranks) and returns its id."""
    ranks = [int(r) for r in ranks]
    arr = (ctypes.c_int32 * max(len(ranks), 1))(*ranks)
    out = ctypes.c_int32()
    ops = cpu_operations.encode() if cpu_operations else None
    _lib.check(_lib.lib().hora_process_set_add(arr, len(ranks), ops, ctypes.byref(out)),
               "add_process_set(%s)" % ranks)
    return out.value


def process_set_remove(process_set_id):
    _lib.check(_lib.lib().hora_process_set_remove(int(process_set_id)),
               "remove_process_set(%d)" % process_set_id)


def process_set_rank(process_set_id):
    """This rank's rank in the set, or -1 when it is not a member."""
    out = ctypes.c_int32()
    _lib.check(_lib.lib().hora_process_set_rank(int(process_set_id), ctypes.byref(out)),
               "process_set_rank(%d)" % process_set_id)
    return out.value


def process_set_size(process_set_id):
    out = ctypes.c_int32()
    _lib.check(_lib.lib().hora_process_set_size(int(process_set_id), ctypes.byref(out)),
               "process_set_size(%d)" % process_set_id)
    return out.value


def _int32_list(fn, args, what):
    """A C query that fills an int32 array: asked once for the length, then for the values."""
    n = ctypes.c_int32()
    _lib.check(fn(*args, None, 0, ctypes.byref(n)), what)
    arr = (ctypes.c_int32 * max(n.value, 1))()
    _lib.check(fn(*args, arr, n.value, ctypes.byref(n)), what)
    return [arr[i] for i in range(n.value)]


def process_set_ranks(process_set_id):
    return _int32_list(_lib.lib().hora_process_set_ranks, (int(process_set_id),),
                       "process_set_ranks(%d)" % process_set_id)


def steady_stats(process_set_id=0):
    """The steady path's counters of a set on this rank (hora_steady_stats): the operations it
    ran without the coordinator, the submissions of cached names that went the normal way, and
    the names cached."""
    fast, slow, entries = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    _lib.check(_lib.lib().hora_steady_stats(int(process_set_id), ctypes.byref(fast),
                                            ctypes.byref(slow), ctypes.byref(entries)),
               "steady_stats(%d)" % process_set_id)
    return {"fast": fast.value, "slow": slow.value, "entries": entries.value}


def control_stats():
    """What this rank has sent to the coordinator on rank 0 since init (hora_control_stats),
    heartbeats aside: {"messages": ..., "notices": tensors announced}. Steady operations add
    nothing."""
    messages, notices = ctypes.c_int64(), ctypes.c_int64()
    _lib.check(_lib.lib().hora_control_stats(ctypes.byref(messages), ctypes.byref(notices)),
               "control_stats")
    return {"messages": messages.value, "notices": notices.value}


def process_set_ids():
    return _int32_list(_lib.lib().hora_process_set_ids, (), "process_set_ids")
