"""ZeroOptimizer's checkpoints: the gathered state (the wrapped optimizer's own format, as if
it had run unsharded) and a rank's own shard, and loading either. Internal to zero.py."""

import zlib

import torch

from .. import core
from .collective_ops import allgather


def _shard_meta(zero):
    """What a shard must match to be loaded: the layout and this rank's place in it."""
    return {"stage": zero.stage, "set_size": zero._n, "set_rank": zero._rank,
            "units": [u.numels for u in zero._units]}


def shard_state(zero):
    """This rank's shard (local): its chunks' state in the wrapped optimizer's format."""
    return {"zero_shard": _shard_meta(zero), "inner": zero.optimizer.state_dict()}


def gathered_state(zero, root):
    """Collective over the set: every chunk's state gathered back per parameter; returned on
    global rank `root` (None elsewhere; root=None: on every member)."""
    from .zero_gather import _GatherInto
    inner = zero.optimizer.state_dict()
    keys = _state_keys(zero, inner)
    index_of = _unit_to_inner(zero)
    state = {}
    for u in zero._units:
        s = inner["state"].get(index_of[u.index], {})
        full = {}
        for k in keys:
            v = s.get(k)
            if torch.is_tensor(v) and v.dim() == 1 and v.numel() == u.chunk:
                out = torch.empty(u.padded, dtype=v.dtype)
                _GatherInto(v, out, "zero%d.sd.%d.%s" % (zero._id, u.index, k),
                            zero.process_set).wait()
                full[k] = out
            elif v is not None:
                full[k] = v
        offset = 0
        for p, n in zip(u.params, u.numels):
            if full:
                state[zero._param_index[id(p)]] = {
                    k: (v[offset:offset + n].view(p.shape).clone()
                        if torch.is_tensor(v) and v.dim() == 1 and v.numel() == u.padded
                        else v) for k, v in full.items()}
            offset += n
    groups = []
    for gi, g in enumerate(inner["param_groups"]):
        hyper = {k: v for k, v in g.items() if k != "params"}
        hyper["params"] = [zero._param_index[id(p)] for p in zero._groups[gi]["params"]]
        groups.append(hyper)
    if root is not None and core.rank() != root:
        return None
    return {"state": state, "param_groups": groups}


def load_state(zero, state_dict):
    """Loads a shard saved by this rank of the same layout, or the gathered state (every rank
    passes it and takes its chunks)."""
    if "zero_shard" in state_dict:
        meta, mine = state_dict["zero_shard"], _shard_meta(zero)
        for k in ("set_size", "set_rank", "units"):
            if meta.get(k) != mine[k]:
                raise ValueError("ZeroOptimizer.load_state_dict: the shard was saved with "
                                 "%s=%r, this optimizer has %r" % (k, meta.get(k), mine[k]))
        zero.optimizer.load_state_dict(state_dict["inner"])
        return
    index_of = _unit_to_inner(zero)
    state = {}
    for u in zero._units:
        per = [state_dict["state"].get(zero._param_index[id(p)]) for p in u.params]
        if all(s is None for s in per):
            continue
        if any(s is None for s in per):
            raise ValueError("ZeroOptimizer.load_state_dict: parameters %s have no state "
                             "while others of their unit do" % [
                                 zero._param_index[id(p)] for p, s in zip(u.params, per)
                                 if s is None])
        chunk = {}
        for k, v in per[0].items():
            if _per_element(k, [s.get(k) for s in per], u.params):
                parts = [s[k].reshape(-1) for s in per]
                if u.padded > u.numel:
                    parts.append(torch.zeros(u.padded - u.numel, dtype=v.dtype))
                chunk[k] = torch.cat(parts)[u.rank * u.chunk:(u.rank + 1) * u.chunk].clone()
            else:
                chunk[k] = v
        state[index_of[u.index]] = chunk
    groups = []
    for gi, g in enumerate(state_dict["param_groups"]):
        hyper = {k: v for k, v in g.items() if k != "params"}
        hyper["params"] = zero.optimizer.state_dict()["param_groups"][gi]["params"]
        groups.append(hyper)
    zero.optimizer.load_state_dict({"state": state, "param_groups": groups})


def _state_keys(zero, inner):
    """The state's keys, the same on every member (a rank may hold none yet)."""
    mine = sorted({k for s in inner["state"].values() for k in s})
    every = allgather(torch.tensor([zlib.crc32(repr(mine).encode())], dtype=torch.int64),
                      name="zero%d.sdkeys" % zero._id, process_set=zero.process_set)
    if len(set(every.tolist())) != 1:
        raise ValueError("ZeroOptimizer.state_dict: the optimizer state differs across "
                         "ranks (keys %s on rank %d)" % (mine, core.rank()))
    return mine


def _unit_to_inner(zero):
    """unit index -> the index of its chunk in the wrapped optimizer's state_dict."""
    index, i = {}, 0
    for gi in range(len(zero._groups)):
        for u in zero._units:
            if u.group_index == gi:
                index[u.index] = i
                i += 1
    return index


def _per_element(key, values, params):
    """Whether a state entry has one value per parameter element (exp_avg) rather than one
    per tensor (step): shaped like each parameter; for 0-d parameters, by name."""
    if not all(torch.is_tensor(v) and v.shape == p.shape for v, p in zip(values, params)):
        return False
    if all(p.dim() == 0 for p in params):
        return key != "step"
    return True
