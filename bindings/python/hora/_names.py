"""The names of collectives (re-exported by hora.core).

Every collective needs a name that is the same on every rank. Unnamed calls get
"<op>.noname.<n>" from a per-op, per-set counter, so ranks that make the same calls in the same
order agree. Named calls become "<op>.<name>", so an allreduce and a broadcast may share
a user name."""

import itertools
import threading

from . import _lib

_name_lock = threading.Lock()
_counters = {}
# Blocking unnamed calls (hora.torch's allreduce without a name, torch/mpi_ops.py) share one
# name per op and set, "noname.sync", moved on to "noname.sync.<k>" by the k-th failed one.
_sync_failures = {}


def reset_names(process_set=None):
    """Restarts the numbering of unnamed calls: of every set (init), or of one set (at the
    end of a join, which every member reaches together)."""
    with _name_lock:
        for table in (_counters, _sync_failures):
            if process_set is None:
                table.clear()
            else:
                for key in [k for k in table if k[1] == int(process_set)]:
                    del table[key]


_calls = threading.local()


def begin_call():
    """Marks the start of a call's checks on this thread (torch/refusal.py); name_taken(token)
    then says whether op_name has been called since."""
    _calls.serial = getattr(_calls, "serial", 0) + 1
    _calls.named = None
    return _calls.serial


def name_taken(token):
    return getattr(_calls, "named", None) == token


def refuse(name, process_set, message):
    """hora_refuse: the call `name` of the set fails on every rank with `message`."""
    _lib.check(_lib.lib().hora_refuse(name.encode("utf-8"), int(process_set),
                                      message.encode("utf-8", "replace")), "refuse(%s)" % name)


def op_name(op, name, process_set=0):
    """Names are unique per process set; the counters of unnamed calls are per set too, since
    only a set's members make its calls."""
    _calls.named = getattr(_calls, "serial", None)
    if name is not None:
        return "%s.%s" % (op, name)
    with _name_lock:
        counter = _counters.setdefault((op, int(process_set)), itertools.count())
        return "%s.noname.%d" % (op, next(counter))


def sync_name(op, process_set=0):
    """The name (as passed to op_name) of the next blocking unnamed call of op in the set."""
    with _name_lock:
        k = _sync_failures.get((op, int(process_set)), 0)
    return "noname.sync" if k == 0 else "noname.sync.%d" % k


def sync_failed(op, process_set=0):
    """A blocking unnamed call failed (on every rank: see torch/mpi_ops.py): the next one
    takes a fresh name."""
    with _name_lock:
        key = (op, int(process_set))
        _sync_failures[key] = _sync_failures.get(key, 0) + 1
