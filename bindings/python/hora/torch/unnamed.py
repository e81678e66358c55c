"""Blocking calls without a name (allreduce, allgather, broadcast, reducescatter, alltoall):
each runs under one name per op and process set, "<op>.noname.sync" (core.sync_name), instead
of the next number of the unnamed calls. A numbered name never repeats, so the steady path
(which learns by name) would never take a loop of them, and each would cost a coordinator
round trip. Ranks agree on the name as they agree on the numbers, by making the same calls in
the same order (a blocking call takes no number on any rank); a lock per op and set keeps two
threads of one rank from having it in flight at once (reentrant: a nested call in the same
thread fails with "submitted twice", never hangs). A call that failed moves the set on to a
fresh name (core.sync_failed): a rank that refused the call (bad input) raises at once while
its refusal waits at the coordinator for the other ranks, so its next call must not reuse the
name; every rank sees the failure, so all move on together (and hvd.init and the end of a
join reset it, as the numbers)."""

import functools
import inspect
import threading

from .. import core
from .process_sets import _set_id

_locks_lock = threading.Lock()
_locks = {}


def sync_unnamed(process_set, call, op):
    """call(name) under the set's name for blocking unnamed calls of op."""
    set_id = _set_id(process_set)
    with _locks_lock:
        lock = _locks.setdefault((op, set_id), threading.RLock())
    with lock:
        try:
            return call(core.sync_name(op, set_id))
        except Exception:
            core.sync_failed(op, set_id)
            raise


def blocking(op):
    """Decorator of a blocking call with `name` and `process_set` parameters: called without
    a name, it runs under sync_unnamed. Arguments are looked up by position, not bound (a
    bind costs more than the 4-byte steady call itself)."""
    def wrap(fn):
        params = inspect.signature(fn).parameters
        at_name = list(params).index("name")
        at_set = list(params).index("process_set")
        default_set = params["process_set"].default

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if (args[at_name] if len(args) > at_name else kwargs.get("name")) is not None:
                return fn(*args, **kwargs)
            process_set = args[at_set] if len(args) > at_set else kwargs.get("process_set",
                                                                              default_set)

            def named(name):
                if len(args) > at_name:
                    return fn(*(args[:at_name] + (name,) + args[at_name + 1:]), **kwargs)
                return fn(*args, **dict(kwargs, name=name))

            return sync_unnamed(process_set, named, op)

        return call

    return wrap
