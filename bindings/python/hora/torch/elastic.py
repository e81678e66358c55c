"""hvd.elastic: horovod.torch.elastic's API (run, TorchState, ObjectState, ElasticSampler) for
a job of fixed membership.

A Hora job has the ranks it was started with: no host discovery, no ranks added or removed,
so HostsUpdatedInterrupt is never raised and `check_host_updates` has nothing to check. What
works as in Horovod: the state object (attributes, model, optimizer and ElasticSampler kept in
memory at every `commit`), the first `sync` (every rank takes rank 0's state before the
function runs), and recovery from a collective that failed on every rank while all of them
stayed alive (a mismatch, a stall timeout): `run` restores the last commit, restarts Hora
(shutdown, then init: a new job of the same ranks, with the process sets the last
hvd.init(process_sets=[...]) registered; sets added later with add_process_set are not
added again), calls the reset callbacks, syncs and runs the function again. A rank that
died ends the job instead (horarun stops the others; without horarun, the survivors'
restart fails at its start timeout with an error naming the missing ranks). At most
HORA_ELASTIC_RESET_LIMIT restarts (default 3; horovodrun's --reset-limit is refused by
horarun, which has no elastic mode); past it the error is raised, so a failure that repeats
cannot loop for ever.
"""

import copy
import functools
import os

import torch

from ..errors import ERR_INVALID_ARGUMENT, HoraInvalidArgumentError, HorovodInternalError
from .elastic_sampler import ElasticSampler
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .basics import last_deterministic, last_process_sets
from .mpi_ops import init, shutdown

RESET_LIMIT_VAR = "HORA_ELASTIC_RESET_LIMIT"
DEFAULT_RESET_LIMIT = 3


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that the job's hosts changed; never raised in Hora (fixed membership),
    defined for the scripts that catch it."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync


class State:
    """What `run` keeps across a reset: save() at commit, restore() after a failure, sync()
    before the function (re)starts. Subclasses define the three."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after each reset, before the sync (e.g. to rescale the learning
        rate by the new hvd.size(); in Hora the size never changes)."""
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
        """Raises HostsUpdatedInterrupt when the job's hosts changed: never in Hora."""

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


def run(func):
    """Decorator: func(state, ...) runs after state.sync(); a HorovodInternalError (a
    collective that failed on every rank) restores the last commit, restarts Hora and runs it
    again, at most HORA_ELASTIC_RESET_LIMIT times (see the module's text)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        limit = _reset_limit()
        resets = 0
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if resets >= limit:
                    raise HorovodInternalError(
                        "hvd.elastic.run: giving up after %d restart(s) (%s=%d): %s"
                        % (resets, RESET_LIMIT_VAR, limit, e)) from e
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            resets += 1
            sets = last_process_sets()
            shutdown()
            # The same static sets again, in the same order, and the same deterministic choice.
            init(process_sets=sets, deterministic=last_deterministic())
            state.on_reset()

    return wrapper


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]
