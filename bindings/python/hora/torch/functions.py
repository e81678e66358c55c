"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object."""

import io
import pickle

import torch

from .. import core
from .collective_ops import allgather_async, broadcast_async_
from .mpi_ops import global_process_set, synchronize, _set_id, _set_root

try:  # cloudpickle handles lambdas and local classes, as in Horovod; pickle otherwise
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the machine
    _pickler = pickle


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Copies root's parameters to every rank, in place. `params` is a state_dict(), the
    output of named_parameters(), or a list of tensors / (name, tensor) pairs."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    try:
        for name, p in items:
            if not isinstance(p, torch.Tensor):
                raise ValueError("broadcast_parameters: %s is a %s, not a tensor"
                                 % (name, type(p).__name__))
            handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                            name, process_set))
    finally:
        errors = []
        for h in handles:
            try:
                synchronize(h)
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]


def _pickle(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return buf.getvalue()


def _object_name(kind, name, set_id):
    # Unnamed objects are numbered per kind, not named after type(obj) as in Horovod: the
    # non-root ranks of a broadcast_object often pass None.
    return core.op_name(kind, name, set_id)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Root's picklable `obj` on every rank of the set (the others' `obj` is ignored)."""
    set_id = _set_id(process_set)
    _set_root(set_id, root_rank)  # a root outside the set is a ValueError here, on every rank
    name = _object_name("broadcast_object", name, set_id)
    if core.rank() == root_rank:
        data = _pickle(obj)
        size = torch.tensor([len(data)], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    synchronize(broadcast_async_(size, root_rank, name + ".sz", set_id))
    if core.rank() == root_rank:
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
            torch.zeros(0, dtype=torch.uint8)
    else:
        payload = torch.zeros(int(size.item()), dtype=torch.uint8)
    synchronize(broadcast_async_(payload, root_rank, name + ".t", set_id))
    if core.rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """A list with every member's picklable `obj`, in rank order."""
    set_id = _set_id(process_set)
    name = _object_name("allgather_object", name, set_id)
    data = _pickle(obj)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    sizes = synchronize(allgather_async(torch.tensor([len(data)], dtype=torch.int64),
                                        name + ".sz", set_id))
    gathered = synchronize(allgather_async(payload, name + ".t", set_id)).numpy().tobytes()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[offset:offset + n]))
        offset += n
    return out


def _init_empty_state(optimizer):
    """Creates the optimizer state the way a first step would, without changing the
    parameters: a step of the underlying optimizer on zero gradients, with the parameters
    (and the gradients there were) put back afterwards."""
    saved = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not p.requires_grad:
                continue
            saved.append((p, p.detach().clone(), p.grad))
            p.grad = torch.zeros_like(p)
    local_step = getattr(optimizer, "_hora_local_step", None)
    if local_step is not None:
        local_step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, data, grad in saved:
            p.copy_(data)
            if grad is not None:  # as in Horovod, a parameter without one keeps the zeros
                p.grad = grad


def broadcast_optimizer_state(optimizer, root_rank, model=None,
                              process_set=global_process_set):
    """Copies root's optimizer state (tensors and scalars, hyperparameters included) to every
    rank. An optimizer without state yet gets it created first, on every rank."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        _init_empty_state(optimizer)
        state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        return

    tensors = []
    scalars = {}
    setters = {}
    for gi, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key == "params":
                continue
            name = "group.%d.%s" % (gi, key)
            scalars[name] = value
            setters[name] = (group, key)
        for pid in group["params"]:
            pstate = state_dict["state"].get(pid)
            if pstate is None:
                continue
            for key in sorted(pstate):
                value = pstate[key]
                name = "state.%s.%s" % (pid, key)
                if torch.is_tensor(value):
                    tensors.append((name, value))
                else:
                    scalars[name] = value
                    setters[name] = (pstate, key)

    broadcast_parameters(tensors, root_rank, process_set)
    scalars = broadcast_object(scalars, root_rank, name="broadcast_optimizer_state.scalars",
                               process_set=process_set)
    for name, value in scalars.items():
        if name in setters:
            holder, key = setters[name]
            holder[key] = value
    optimizer.load_state_dict(state_dict)
