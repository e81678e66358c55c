"""Point-to-point transfers between two members of a process set (names as in
torch.distributed): isend, irecv, send, recv."""

import torch

from .. import core
from . import profiling as _profiling
from .mpi_ops import _contig, _describe, _register, _set_id, _set_root, global_process_set


def submit(tensor, peer, tag, process_set, send):
    """(the runtime's handle, the contiguous tensor it reads or writes). The blocking calls
    and the torch.distributed backend's Works (c10d_work.PeerWork) wait on the handle
    directly: a small transfer is a few tens of microseconds, and the handle table's
    bookkeeping was a noticeable part of it."""
    what = "isend" if send else "irecv"
    set_id = _set_id(process_set)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise TypeError("%s: the peer must be an int rank" % what)
    set_peer = _set_root(set_id, peer)
    c = _contig(tensor)
    enqueue = core.send_async if send else core.recv_async
    return enqueue(_describe(c), set_peer, tag, keep=c, process_set=set_id), c


def finished(h):
    """Waits for a handle of submit, then releases it (also when it failed)."""
    try:
        h.wait()
    finally:
        h.release()


def received(tensor, c):
    if c is not tensor:
        with torch.no_grad():
            tensor.copy_(c)
    return tensor


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Starts sending `tensor` to global rank `dst` (a member of the set); returns a handle
    for poll()/synchronize(). The n-th send to dst with a tag matches dst's n-th recv from
    this rank with that tag."""
    h, c = submit(tensor, dst, tag, process_set, True)
    return _register([h], lambda hs: None, keep=c)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Starts receiving into `tensor` from global rank `src`; synchronize() returns it.
    dtype and element count must match the send."""
    h, c = submit(tensor, src, tag, process_set, False)
    return _register([h], lambda hs: received(tensor, c), keep=(c, tensor))


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends `tensor` to global rank `dst`; returns when the transfer is done."""
    finished(submit(tensor, dst, tag, process_set, True)[0])


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into `tensor` from global rank `src`; returns `tensor`."""
    h, c = submit(tensor, src, tag, process_set, False)
    finished(h)
    return received(tensor, c)


# torch.profiler ranges (profiling.py).
_profiling.wrap(globals(), ["send", "recv", "isend", "irecv"])
