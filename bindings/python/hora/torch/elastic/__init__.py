"""hvd.elastic: horovod.torch.elastic's API (run, TorchState, ObjectState, ElasticSampler,
HostsUpdatedInterrupt), in its modules too: hora.torch.elastic.sampler, .state.

The state object keeps attributes, model, optimizer and ElasticSampler in memory at every
`commit`; `run` syncs rank 0's state before the function runs, and when the function fails
it re-forms Hora and runs it again:

- Under horarun's elastic mode (a worker its driver started: hora.elastic_client.active())
  membership changes. A HorovodInternalError (a lost peer, the coordinator's rank gone, a
  collective that failed on every rank) restores the last commit; a HostsUpdatedInterrupt
  (raised by `commit` when the driver decided a newer generation, e.g. a host was added)
  keeps the state as committed. Then Hora is shut down and started again in the next
  generation (rank, size, coordinator and token from the driver's rendezvous: the survivors
  keep their order, the lowest surviving rank is rank 0 and creates the new coordinator),
  the process sets the last hvd.init(process_sets=[...]) registered are created again in
  order, the reset callbacks run, the state is synced from the new rank 0 and the function
  runs again. The driver enforces --reset-limit; a worker it has no place for any more
  raises hora.elastic_client.RendezvousStop.
- Otherwise (a job of fixed membership) only a collective that failed on every rank while
  all of them stayed alive (a mismatch, a stall timeout) is recovered: restore, shutdown,
  init of the same ranks, callbacks, sync; a rank that died ends the job. At most
  HORA_ELASTIC_RESET_LIMIT restarts (default 3); past it the error is raised.
"""

import copy
import functools
import os

import torch

from ... import elastic_client
from ...errors import (ERR_INVALID_ARGUMENT, HoraError, HoraInvalidArgumentError,
                       HorovodInternalError, HostsUpdatedInterrupt)
from .sampler import ElasticSampler
from ..functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from ..basics import last_deterministic, last_process_sets
from ..mpi_ops import broadcast, init, rank, shutdown

RESET_LIMIT_VAR = "HORA_ELASTIC_RESET_LIMIT"
DEFAULT_RESET_LIMIT = 3


class _HostUpdates:
    """State._host_messages: empty() until horarun's elastic driver has decided a generation
    newer than the one this process joined (one short request to the driver per call; always
    empty outside elastic mode). Not collective: commit() still decides on every rank alike."""

    def empty(self):
        return (not elastic_client.active()
                or elastic_client.newest_generation() <= elastic_client.generation())


class State:
    """What `run` keeps across a reset: save() at commit, restore() after a failure, sync()
    before the function (re)starts. Subclasses define the three."""

    def __init__(self):
        self._reset_callbacks = []
        # Horovod's private names, which its own elastic scripts read (rank 0 waits on
        # `_host_messages.empty()` for the driver's notice of a host change, after setting
        # `_last_updated_timestamp` to 0). Here the notice is the driver's newer generation.
        self._host_messages = _HostUpdates()
        self._last_updated_timestamp = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called after each reset, before the sync (e.g. to rescale the learning
        rate by the new hvd.size())."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keeps the current state in memory (a copy) as the one a failure returns to, then
        checks for host updates."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when horarun's elastic driver decided a
        generation newer than this one (collective: rank 0 asks the driver and broadcasts
        the answer). Nothing to check outside elastic mode."""
        if not elastic_client.active():
            return
        newest = elastic_client.newest_generation() if rank() == 0 else 0
        newest = int(broadcast(torch.tensor([newest], dtype=torch.int64), root_rank=0,
                               name="hora.elastic.generation")[0])
        if newest > elastic_client.generation():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        """Called on a reset, before the callbacks."""


class ObjectState(State):
    """Python objects given as keyword arguments, exposed as attributes; sync() broadcasts
    rank 0's committed values (they must be picklable)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=None, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__()

    def save(self):
        self._saved_state = {k: getattr(self, k) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, v)


class _Handler:
    """Keeps one torch object of a TorchState: a deep copy of its state_dict per commit."""

    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)


class _ModelHandler(_Handler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def restore(self):
        # A DistributedOptimizer may hold the failed step's gradient handles.
        discard = getattr(self.value, "_hora_discard_in_flight", None)
        if discard is not None:
            discard()
        super().restore()

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


_HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (ElasticSampler, _SamplerHandler)]


class TorchState(ObjectState):
    """A training process's state: `model`, `optimizer` and any keyword argument. Modules,
    optimizers and ElasticSamplers are kept through their state_dict (broadcast from rank 0 at
    sync: parameters and buffers, optimizer state, the sampler's position); everything else
    as in ObjectState."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, rest = {}, {}
        for k, v in kwargs.items():
            cls = next((h for t, h in _HANDLERS if isinstance(v, t)), None)
            if cls is not None:
                handlers[k] = cls(v)
            else:
                rest[k] = v
        object.__setattr__(self, "_handlers", handlers)
        for k, h in handlers.items():
            object.__setattr__(self, k, h.value)
        super().__init__(bcast_object=broadcast_object, **rest)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)


def _reset_limit():
    text = os.environ.get(RESET_LIMIT_VAR, "")
    if not text:
        return DEFAULT_RESET_LIMIT
    try:
        limit = int(text)
    except ValueError:
        limit = -1
    if limit < 0:
        raise HoraInvalidArgumentError(
            ERR_INVALID_ARGUMENT, "%s=%r: must be a whole number >= 0 (restarts after a "
            "failed collective)" % (RESET_LIMIT_VAR, text), "hvd.elastic.run")
    return limit


def _restart(driven):
    """Shuts Hora down and starts it again (the next generation under the elastic driver),
    with the same static process sets in the same order and the same deterministic choice.
    Under the driver, a generation that cannot start (a member died meanwhile) is followed
    by the next one; the driver's --reset-limit bounds how many."""
    # The sets that were registered (a duplicate the first init refused stays out).
    sets = [ps for ps in last_process_sets() if ps.process_set_id is not None]
    while True:
        try:
            shutdown()
        except HoraError:
            pass  # its status repeats the failure that brought us here
        try:
            init(process_sets=sets, deterministic=last_deterministic())
            return
        except elastic_client.RendezvousStop:
            raise
        except (HoraError, HorovodInternalError):
            if not driven:
                raise


def run(func):
    """Decorator: func(state, ...) runs after state.sync(); a HorovodInternalError restores
    the last commit, a HostsUpdatedInterrupt keeps it, then Hora is re-formed and func runs
    again (see the module's text)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        driven = elastic_client.active()
        limit = None if driven else _reset_limit()
        resets = 0
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except elastic_client.RendezvousStop:
                raise
            except HorovodInternalError as e:
                if limit is not None and resets >= limit:
                    raise HorovodInternalError(
                        "hvd.elastic.run: giving up after %d restart(s) (%s=%d): %s"
                        % (resets, RESET_LIMIT_VAR, limit, e)) from e
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            resets += 1
            _restart(driven)
            state.on_reset()

    return wrapper


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]
