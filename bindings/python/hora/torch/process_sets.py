"""Process sets as in Horovod: hvd.ProcessSet, the global set, registration at init and
dynamically, and the helpers that turn a process_set= argument into the C API's id."""

from .. import core
from .. import errors


class ProcessSet(object):
    """A set of ranks that run collectives together, as in Horovod: build it from a list of
    global ranks, then pass it to hvd.init(process_sets=[...]) or hvd.add_process_set(); once
    registered, process_set_id is set and every collective takes it as process_set=.
    Roots (broadcast root_rank) stay global ranks, as in Horovod."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm, cpu_operations=None):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of process ranks "
                             "(hora has no mpi4py communicators)")
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks, "
                             "got %r" % (ranks_or_comm,))
        self.ranks = ranks
        # Hora's own: the CPU backend for this set ("gloo", "loopback", ...); None = the job's.
        self.cpu_operations = cpu_operations

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None if it is not registered."""
        if self.process_set_id is None:
            return None
        return core.process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set (-1 if not a member), None if not registered."""
        if self.process_set_id is None:
            return None
        return core.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is a member, or None if the ranks are not known."""
        if self.ranks is None:
            return None
        return core.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=None)" % (
            self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _get_process_set_ids_and_ranks():
    """{id: ranks} of every registered set, the global one (0) included: what Horovod's
    HorovodBasics._get_process_set_ids_and_ranks gives (its tests read it)."""
    return {i: core.process_set_ranks(i) for i in core.process_set_ids()}


class _Basics(object):
    """hvd.mpi_ops._basics: the private HorovodBasics method Horovod's own tests read."""
    _get_process_set_ids_and_ranks = staticmethod(_get_process_set_ids_and_ranks)


_basics = _Basics()


def _init_process_sets(process_sets):
    """hvd.init(process_sets=[...]): registers the sets in order (collective) and returns the
    index of the first entry that is a duplicate, or None. As in Horovod, an entry whose ranks
    are those of a set already registered takes that set's id (a second hvd.init with the same
    list finds its sets), unless the global set or an earlier entry of the list has it: then
    the entry is a clone, and is invalidated."""
    global_process_set.ranks = list(range(core.size()))
    seen, duplicate = {0}, None
    known = {tuple(r): j for j, r in _get_process_set_ids_and_ranks().items()}
    for i, ps in enumerate(process_sets):
        if not isinstance(ps, ProcessSet):
            raise ValueError("process_sets must be a list of hvd.ProcessSet, got %r" % (ps,))
        set_id = known.get(tuple(ps.ranks))
        if set_id is None:
            set_id = known[tuple(ps.ranks)] = core.process_set_add(ps.ranks, ps.cpu_operations)
        if set_id in seen:
            ps._invalidate()
            duplicate = i if duplicate is None else duplicate
            continue
        seen.add(set_id)
        ps.process_set_id = set_id
    return duplicate


def add_process_set(process_set):
    """Adds a process set (collective: every rank calls it, in the same order) and returns
    the registered ProcessSet. A set with the same ranks as an existing one: ValueError."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    try:
        process_set.process_set_id = core.process_set_add(process_set.ranks,
                                                          process_set.cpu_operations)
    except errors.HoraError as e:
        if e.status == errors.ERR_ALREADY_EXISTS:
            raise ValueError("Attempted to add a duplicate process set: %s (%s)"
                             % (process_set, e))
        raise
    return process_set


def remove_process_set(process_set):
    """Removes a registered process set (collective). Returns False for the global set or a
    set that is not registered, True once removed."""
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    process_set._invalidate()
    core.process_set_remove(process_set_id)
    return True


def _set_id(process_set):
    """The C API's id for a process_set= argument (a ProcessSet, None or an int id)."""
    if process_set is None:
        return 0
    if isinstance(process_set, ProcessSet):
        if process_set.process_set_id is None:
            raise ValueError("%s is not registered: pass it to hvd.init(process_sets=[...]) or "
                             "hvd.add_process_set() first" % (process_set,))
        return process_set.process_set_id
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        return process_set
    raise ValueError("process_set must be a hvd.ProcessSet, got %r" % (process_set,))


def _set_root(set_id, root_rank):
    """A global root rank as the rank within the set (Horovod's roots are global ranks)."""
    if set_id == 0:
        return int(root_rank)
    ranks = core.process_set_ranks(set_id)
    if int(root_rank) not in ranks:
        raise ValueError("root_rank %d is not a member of process set %d (ranks %s)"
                         % (root_rank, set_id, ranks))
    return ranks.index(int(root_rank))


def _set_size(set_id):
    return core.size() if set_id == 0 else core.process_set_size(set_id)


def _set_rank(set_id):
    """This process's rank within the set (-1 outside it)."""
    return core.rank() if set_id == 0 else core.process_set_rank(set_id)


def _members(process_set):
    """(size, this process's rank) of a set this process belongs to; ValueError otherwise."""
    set_id = _set_id(process_set)
    n = _set_size(set_id)
    r = _set_rank(set_id)
    if r < 0:
        raise ValueError("rank %d is not a member of %s" % (core.rank(), process_set))
    return n, r


def _set_ranks(set_id):
    """The set's members' global ranks, in set-rank order."""
    return list(range(core.size())) if set_id == 0 else core.process_set_ranks(set_id)
