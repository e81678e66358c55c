"""ZeroOptimizer: ZeRO stages 1, 2 and 3 over a Hora process set.

Layout. The parameters are cut into units: for stages 1 and 2, buckets of consecutive
parameters of one param group and dtype (at most `bucket_cap_mb` each); for stage 3, one unit
per module that owns parameters directly (a parameter tied between modules: one of its own).
A unit's parameters become views into one flat buffer padded to a multiple of the set size
N, and set rank r owns chunk r of every unit (as FSDP lays out a FlatParameter). The wrapped optimizer is rebuilt over the chunks (one tensor
per unit, the param groups' hyperparameters kept), so its state is 1/N of the model's.
Elementwise optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, ...) compute exactly what they
would over the whole model; optimizers that take a norm per tensor (LAMB, LARS) see a chunk
as one tensor.

Step, per stage:
  1: gradients stay whole on every rank until step(), which reducescatters each unit's flat
     gradient (Average over the set), steps the chunks, then allgathers the chunks into the
     flat buffers, which the parameters view.
  2: a hook on each parameter's gradient accumulator counts the unit's ready gradients; the
     last one starts the unit's reducescatter during backward and drops the parameters'
     .grad, so a rank holds whole gradients only of the units still in backward.
  3: the flat buffers' storage is freed (resized to 0) outside a unit's use: a module's
     forward gathers its units, its backward gathers them again, and a unit is freed once its
     gradients are reduced (zero_stage3.py; a parameter tied between modules is one unit that
     each of them gathers).
In every stage the parameters' .grad are dropped once reduced, and the averaged chunks once
stepped: after step() a rank holds no gradient (clip with clip_grad_norm_ before step()).
Every rank submits every unit's reducescatter once per backward pass (a unit nobody used is
reduced at step() with zeros), named by the unit, so submissions match across ranks.
"""

import contextlib
import inspect
import itertools
import zlib

import torch

from .. import core
from .mpi_ops import Average, Sum, _set_id, _set_size, global_process_set, synchronize, allreduce
from .collective_ops import allgather, reducescatter_async
from .zero_gather import _GatherInto
from . import zero_stage3

_instances = itertools.count()

def _constructor_defaults(optimizer):
    """The optimizer's defaults that its constructor accepts. torch 2.x's AdamW keeps
    `decoupled_weight_decay` in its defaults but refuses it as an argument; every group
    passed along already holds each hyperparameter, so a default left out loses nothing."""
    try:
        params = inspect.signature(type(optimizer).__init__).parameters
    except (TypeError, ValueError):
        return dict(optimizer.defaults)
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(optimizer.defaults)
    return {k: v for k, v in optimizer.defaults.items() if k in params}

class _Unit(object):
    """A flat buffer holding some parameters; this rank owns chunk `rank` of it."""

    def __init__(self, index, params, group_index, n, rank):
        self.index = index
        self.params = params
        self.group_index = group_index
        self.numels = [p.numel() for p in params]
        self.numel = sum(self.numels)
        self.chunk = -(-self.numel // n) if self.numel else 0
        self.padded = self.chunk * n
        self.rank = rank
        p0 = params[0]
        self.flat = torch.zeros(self.padded, dtype=p0.dtype, device=p0.device)
        offset = 0
        with torch.no_grad():
            for p, k in zip(params, self.numels):
                self.flat[offset:offset + k].copy_(p.detach().reshape(-1))
                p.data = self.flat[offset:offset + k].view_as(p)
                offset += k
        self.shard = None       # the optimizer's tensor: chunk `rank` of flat
        self.ready = 0          # gradients accumulated in this backward pass
        self.rs_handle = None   # reducescatter in flight
        self.reduced = False    # reduced at least once since the last step
        self.grad = None        # this rank's chunk of the averaged gradient
        self.state = zero_stage3.FULL
        self.ag_handle = None

    def own(self):
        return self.flat[self.rank * self.chunk:(self.rank + 1) * self.chunk]

    def flat_grad(self, dtype):
        parts = [torch.zeros(k, dtype=self.flat.dtype) if p.grad is None
                 else p.grad.detach().reshape(-1) for p, k in zip(self.params, self.numels)]
        if self.padded > self.numel:
            parts.append(torch.zeros(self.padded - self.numel, dtype=self.flat.dtype))
        flat = torch.cat(parts)
        return flat if dtype is None else flat.to(dtype)


class ZeroOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer (built over the model's parameters, not stepped yet) so that
    its state (stage 1), the gradients (2) and the parameters (3) are sharded over the ranks
    of `process_set`; gradients are averaged over the set, as DistributedOptimizer does.

    model: required for stage 3 (hooks on its modules); stage 3 gathers a parameter only
           during the forward and backward of the modules that own it (tied parameters: any
           of them); reading it elsewhere raises a RuntimeError naming it.
    comm_dtype: None, torch.float16 or torch.bfloat16: the dtype gradients travel in
           (prescaled by 1/N before the sum); parameters always travel in their own dtype.
    bucket_cap_mb: the largest unit of stages 1 and 2.
    prefetch: stage 3 starts gathering the next unit (forward order, reversed in backward)
           while the current one computes.

    Collective over the set: construction, step(), state_dict(gather=True), gathered(),
    clip_grad_norm_(). Every member must build the same layout (checked: ValueError).
    """

    def __init__(self, optimizer, model=None, stage=1, process_set=global_process_set,
                 comm_dtype=None, bucket_cap_mb=25, prefetch=True):
        if stage not in (1, 2, 3):
            raise ValueError("ZeroOptimizer: stage must be 1, 2 or 3, got %r" % (stage,))
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("ZeroOptimizer wraps a torch.optim.Optimizer, got %s"
                            % type(optimizer).__name__)
        if any(optimizer.state.values()):
            raise ValueError("ZeroOptimizer: wrap the optimizer before its first step (its "
                             "state would not be sharded)")
        if comm_dtype not in (None, torch.float16, torch.bfloat16, torch.float32):
            raise ValueError("ZeroOptimizer: comm_dtype must be None, torch.float16 or "
                             "torch.bfloat16, got %r" % (comm_dtype,))
        if stage == 3 and model is None:
            raise ValueError("ZeroOptimizer: stage 3 needs model= (it hooks the modules' "
                             "forward to gather their parameters)")
        self.stage = stage
        self.process_set = process_set
        self._set = _set_id(process_set)
        self._n = _set_size(self._set)
        self._rank = core.rank() if self._set == 0 else core.process_set_rank(self._set)
        if self._rank < 0:
            raise ValueError("ZeroOptimizer: rank %d is not a member of %s"
                             % (core.rank(), process_set))
        self._comm_dtype = None if comm_dtype == torch.float32 else comm_dtype
        self._prefetch = prefetch
        self._id = next(_instances)
        self._groups = optimizer.param_groups
        self._param_index = {}   # id(param) -> index in the original optimizer's order
        for g in self._groups:
            for p in g["params"]:
                self._param_index[id(p)] = len(self._param_index)
        if stage == 3:
            self._units, modules, names = zero_stage3.make_units(
                model, self._groups, self._param_index,
                lambda i, ps, gi: _Unit(i, ps, gi, self._n, self._rank))
        else:
            self._units = self._make_units(int(bucket_cap_mb * 1048576))
        self._check_layout()
        for u in self._units:
            if stage == 3:
                u.shard = torch.nn.Parameter(u.own().clone())
            else:
                u.shard = torch.nn.Parameter(u.own())   # shares flat's storage
        groups = []
        for gi, g in enumerate(self._groups):
            hyper = {k: v for k, v in g.items() if k != "params"}
            hyper["params"] = [u.shard for u in self._units if u.group_index == gi]
            groups.append(hyper)
        self.optimizer = type(optimizer)(groups, **_constructor_defaults(optimizer))
        self.defaults = self.optimizer.defaults
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state
        self._grad_hooks = []
        self._synced = False
        self.step_memory = None
        if stage >= 2:
            self._hook_gradients()
        self._stage3 = zero_stage3.Stage3(self, modules, names, prefetch) if stage == 3 else None

    # ---- layout ----

    def _make_units(self, cap_bytes):
        """Stages 1 and 2: buckets of consecutive parameters of one group and dtype."""
        units = []
        for gi, g in enumerate(self._groups):
            bucket, size = [], 0
            for p in reversed(g["params"]):   # roughly the order backward produces them
                nbytes = p.numel() * p.element_size()
                if bucket and (size + nbytes > cap_bytes or p.dtype != bucket[0].dtype):
                    units.append(_Unit(len(units), bucket, gi, self._n, self._rank))
                    bucket, size = [], 0
                bucket.append(p)
                size += nbytes
            if bucket:
                units.append(_Unit(len(units), bucket, gi, self._n, self._rank))
        return units

    def _check_layout(self):
        sig = [self.stage, len(self._units), sum(u.numel for u in self._units),
               zlib.crc32(repr([(u.numels, str(u.flat.dtype), u.group_index)
                                for u in self._units]).encode())]
        every = allgather(torch.tensor([sig], dtype=torch.int64),
                          name="zero%d.layout" % self._id, process_set=self.process_set)
        rows = [tuple(r) for r in every.tolist()]
        if len(set(rows)) != 1:
            ranks = core.process_set_ranks(self._set) if self._set else list(range(self._n))
            raise ValueError(
                "ZeroOptimizer: the parameter layout differs across the ranks of the process "
                "set: %s" % "; ".join("rank %d: stage %d, %d units, %d elements" % (
                    g, r[0], r[1], r[2]) for g, r in zip(ranks, rows)))

    # ---- gradients ----

    def _hook_gradients(self):
        for u in self._units:
            for p in u.params:
                if not p.requires_grad:
                    continue
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._make_hook(u))
                self._grad_hooks.append(acc)

    def _make_hook(self, unit):
        def hook(*_):
            unit.ready += 1
            if unit.ready == sum(1 for p in unit.params if p.requires_grad):
                self._reduce(unit)
        return hook

    def _reduce(self, u):
        """Starts the unit's reducescatter; the previous one of this step is folded first."""
        self._fold(u)
        flat = u.flat_grad(self._comm_dtype)
        name = "zero%d.rs.%d" % (self._id, u.index)
        if self._comm_dtype is None:
            u.rs_handle = reducescatter_async(flat, name=name, op=Average,
                                              process_set=self.process_set)
        else:
            u.rs_handle = reducescatter_async(flat, name=name, op=Sum,
                                              process_set=self.process_set,
                                              prescale_factor=1.0 / self._n)
        u.ready = 0
        u.reduced = True
        self._synced = False
        for p in u.params:   # the unit's whole gradients are in `flat` now
            p.grad = None
        if self._stage3 is not None:
            self._stage3.reduced(u)

    def _fold(self, u):
        if u.rs_handle is None:
            return
        got = synchronize(u.rs_handle).to(u.shard.dtype)
        u.rs_handle = None
        u.grad = got if u.grad is None else u.grad.add_(got)

    def synchronize(self):
        """Waits for every unit's reduction (a unit not reduced in this step is reduced now)
        and puts this rank's chunk of the averaged gradient in the chunks' .grad."""
        for u in self._units:
            if self.stage == 1 or not u.reduced or u.ready:
                self._reduce(u)
        for u in self._units:
            self._fold(u)
            u.shard.grad = u.grad
            u.grad = None
            u.reduced = False
        self._synced = True

    @contextlib.contextmanager
    def gathered(self):
        """Stage 3: every parameter whole inside the block (collective); e.g. for
        model.state_dict() or an evaluation. Other stages: nothing to do."""
        if self._stage3 is None:
            yield
            return
        self._stage3.gather_all()
        try:
            yield
        finally:
            self._stage3.free_all()

    # ---- the optimizer's interface ----

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = self.memory_bytes()["gradients"]
        if not self._synced:
            self.synchronize()
        grads = max(grads, self.memory_bytes()["gradients"])
        self.optimizer.step()
        self._synced = False
        for u in self._units:    # the averaged chunks were only for this step
            u.shard.grad = None
        mem = self.memory_bytes()
        mem["gradients"] = grads
        mem["total"] = mem["parameters"] + grads + mem["optimizer_state"]
        self.step_memory = mem
        if self.stage < 3:
            handles = [_GatherInto(u.shard, u.flat, "zero%d.ag.%d" % (self._id, u.index),
                                   self.process_set) for u in self._units]
            for h in handles:
                h.wait()
        return loss

    def zero_grad(self, set_to_none=True):
        for u in self._units:
            for p in u.params:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.detach_().zero_()
            u.shard.grad = None

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clips the averaged gradients by their global norm (collective; after
        synchronize(), which it calls when needed). Returns the total norm."""
        if not self._synced:
            self.synchronize()
        local = sum((u.shard.grad.double().norm(norm_type) ** norm_type
                     for u in self._units), torch.zeros((), dtype=torch.float64))
        total = allreduce(local.reshape(1), op=Sum, name="zero%d.norm" % self._id,
                          process_set=self.process_set)[0] ** (1.0 / norm_type)
        coef = max_norm / (float(total) + 1e-6)
        if coef < 1:
            for u in self._units:
                u.shard.grad.mul_(coef)
        return total

    def add_param_group(self, param_group):
        raise NotImplementedError("ZeroOptimizer: add parameter groups to the optimizer "
                                  "before wrapping it")

    # ---- memory ----

    def memory_bytes(self):
        """Bytes this rank holds now: parameters (whole buffers, or chunks plus gathered units
        in stage 3), gradients (whole .grad plus averaged chunks) and optimizer state. After
        each step, `step_memory` holds the same with the gradients held when step() began
        (stage 1: every whole .grad) or after their reduction, whichever was more."""
        params = sum(u.shard.numel() * u.shard.element_size() for u in self._units
                     if self.stage == 3)
        params += sum(u.flat.storage().size() * u.flat.element_size() for u in self._units)
        grads = sum(p.grad.numel() * p.grad.element_size() for u in self._units
                    for p in u.params if p.grad is not None)
        grads += sum(g.numel() * g.element_size() for u in self._units
                     for g in (u.shard.grad, u.grad) if g is not None)
        state = sum(v.numel() * v.element_size() for s in self.optimizer.state.values()
                    for v in s.values() if torch.is_tensor(v))
        return {"parameters": params, "gradients": grads, "optimizer_state": state,
                "total": params + grads + state}

    # ---- checkpoints (zero_checkpoint.py) ----

    def state_dict(self, gather=True, root=0):
        """gather=True (collective): the state of the wrapped optimizer as if it had run
        unsharded (its own format, indexed by the original parameters), returned on global
        rank `root` (None elsewhere; root=None: on every member). gather=False (local): this
        rank's shard, for load_state_dict on the same rank of the same layout."""
        from . import zero_checkpoint
        if not gather:
            return zero_checkpoint.shard_state(self)
        return zero_checkpoint.gathered_state(self, root)

    def load_state_dict(self, state_dict):
        """Loads either format of state_dict(): a shard saved by this rank of the same layout,
        or the gathered state (every rank passes it, and takes its chunks)."""
        from . import zero_checkpoint
        zero_checkpoint.load_state(self, state_dict)

    def __repr__(self):
        return "ZeroOptimizer(stage=%d, set size %d, %d units, %r)" % (
            self.stage, self._n, len(self._units), self.optimizer)
