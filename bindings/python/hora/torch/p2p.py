"""Point-to-point transfers between two members of a process set (names as in
torch.distributed): isend, irecv, send, recv."""

import torch

from .. import core
from . import profiling as _profiling
from .mpi_ops import (_check_input, _contig, _describe, _register, _set_id, _set_root,
                      global_process_set, synchronize)

def _p2p_check(tensor, peer, tag, set_id, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise TypeError("%s: the peer must be an int rank" % what)
    _check_input(tensor)
    return _set_root(set_id, peer)


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Starts sending `tensor` to global rank `dst` (a member of the set); returns a handle
    for poll()/synchronize(). The n-th send to dst with a tag matches dst's n-th recv from
    this rank with that tag."""
    set_id = _set_id(process_set)
    peer = _p2p_check(tensor, dst, tag, set_id, "isend")
    c = _contig(tensor)
    h = core.send_async(_describe(c), peer, tag, keep=c, process_set=set_id)
    return _register([h], lambda hs: None, keep=c)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Starts receiving into `tensor` from global rank `src`; synchronize() returns it.
    dtype and element count must match the send."""
    set_id = _set_id(process_set)
    peer = _p2p_check(tensor, src, tag, set_id, "irecv")
    c = _contig(tensor)
    h = core.recv_async(_describe(c), peer, tag, keep=c, process_set=set_id)

    def finish(_):
        if c is not tensor:
            with torch.no_grad():
                tensor.copy_(c)
        return tensor

    return _register([h], finish, keep=(c, tensor))


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends `tensor` to global rank `dst`; returns when the transfer is done."""
    synchronize(isend(tensor, dst, tag, process_set))


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into `tensor` from global rank `src`; returns `tensor`."""
    return synchronize(irecv(tensor, src, tag, process_set))


# torch.profiler ranges (profiling.py).
_profiling.wrap(globals(), ["send", "recv", "isend", "irecv"])
