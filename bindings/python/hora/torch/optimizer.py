"""DistributedOptimizer: wraps a torch optimizer so that gradients are averaged over ranks.

By default the gradients live in flat buckets (buckets.py, as torch DDP does it): a hook on
each parameter's gradient accumulator marks the gradient ready, and the last ready gradient
of a bucket starts one allreduce of the whole bucket, so communication overlaps the rest of
backward. With compression, explicit groups, parameters on several devices or
HORA_BUCKET_CAP_MB=0, each gradient (or group) gets its own allreduce instead. step() first
waits for every reduction (synchronize()), then runs the wrapped optimizer's step.
Every rank submits every parameter each step, zeros for parameters a rank did not use,
so that all ranks submit the same names.
"""

import contextlib
import threading
import warnings

import torch

from . import buckets as _buckets
from .compression import Compression
from .. import core as _core
from . import adasum as _adasum
from .mpi_ops import (Adasum, Average, _resolve_op, _set_id, raise_if_bad, allreduce_async_,
                      global_process_set, synchronize as _synchronize_handle)


def _process_set_rank(set_id):
    return _core.process_set_rank(set_id)

_ZERO_GRAD_MSG = ("optimizer.zero_grad() was called after loss.backward() but before "
                  "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                  "cause a race condition.")
_TOO_MANY_PASSES_MSG = ("Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")


def _check_names(param_groups, named_parameters):
    if any(not isinstance(p, tuple) or len(p) != 2 for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    seen, dups = set(), []
    for name, _ in named_parameters:
        if name in seen and name not in dups:
            dups.append(name)
        seen.add(name)
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. "
                         "Found duplicates: %s" % ", ".join(str(d) for d in dups))
    named_ids = {id(p) for _, p in named_parameters}
    unnamed = [id(p) for g in param_groups for p in g["params"] if id(p) not in named_ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))


class _DistributedMixin(object):
    """Placed before the user's optimizer class in a dynamically made subclass."""

    def __init__(self, optimizer, named_parameters, compression, backward_passes_per_step,
                 op, gradient_predivide_factor, groups, sparse_as_dense, set_id=0):
        super().__init__(optimizer.param_groups)
        self._set_id = set_id
        self.defaults = dict(optimizer.defaults)
        for p, s in optimizer.state.items():
            self.state[p] = s
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = backward_passes_per_step

        if named_parameters is not None:
            named_parameters = list(named_parameters)
            _check_names(self.param_groups, named_parameters)
        else:  # Horovod's names, the same on every rank
            named_parameters = [("allreduce.noname.%d.%d" % (gi, pi), p)
                                for gi, g in enumerate(self.param_groups)
                                for pi, p in enumerate(g["params"])]
        self._names = {p: name for name, p in named_parameters}
        self._parameter_names = self._names  # Horovod's attribute: parameter -> name

        # A rank outside the process set neither reduces nor waits: its step() is the
        # wrapped optimizer's own (as in Horovod).
        self._included = set_id == 0 or _process_set_rank(set_id) >= 0
        params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        if not self._included:
            params = []
        cap = _buckets.cap_bytes()
        self._reducer = None
        if _buckets.applicable(params, compression, groups, cap):
            self._reducer = _buckets.BucketReducer(params, cap, sparse_as_dense, set_id,
                                                   self._names)
            groups = None
        self._units = self._make_units(params, groups)
        self._unit_of = {p: u for u, members in enumerate(self._units) for p in members}
        self._lock = threading.Lock()
        self._delay = {p: backward_passes_per_step for p in params}
        self._ready = {}        # unit -> set of params whose gradient is final
        self._launched = {}     # unit -> [(param, handle, compressed, ctx)]
        self._touched = set()   # params whose hook fired since the last synchronize
        self._should_synchronize = True
        self._synchronized = False
        self._grad_accs = []
        self._register_hooks(params)

    @staticmethod
    def _make_units(params, groups):
        if groups is None or groups == 0:
            return [[p] for p in params]
        if isinstance(groups, int):
            if groups < 0:
                raise ValueError("groups must be a non-negative int or a list of lists")
            n = min(groups, len(params)) or 1
            per, extra = divmod(len(params), n)
            units, start = [], 0
            for i in range(n):
                end = start + per + (1 if i < extra else 0)
                units.append(params[start:end])
                start = end
            return [u for u in units if u]
        if not isinstance(groups, (list, tuple)) or any(
                not isinstance(g, (list, tuple)) for g in groups):
            raise ValueError("groups must be an int or a list of lists of parameters")
        known = {id(p) for p in params}
        grouped, units = set(), []
        for g in groups:
            unit = []
            for p in g:
                if id(p) not in known:
                    raise ValueError("groups holds a parameter the optimizer does not "
                                     "update (or that does not require grad)")
                if id(p) in grouped:
                    raise ValueError("a parameter appears in more than one group")
                grouped.add(id(p))
                unit.append(p)
            if unit:
                units.append(unit)
        units.extend([p] for p in params if id(p) not in grouped)
        return units

    def _register_hooks(self, params):
        # Each hook runs once p.grad holds this pass's gradient: torch >= 2.1's
        # post-accumulate-grad hook where it exists, else a hook on p's AccumulateGrad node
        # (kept alive in _grad_accs; the node is what torch 1.x offers).
        post = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
        with torch.enable_grad():
            for p in params:
                if post:
                    self._grad_accs.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
                    continue
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(p))
                self._grad_accs.append(grad_acc)

    def _make_hook(self, p):
        if self._reducer is not None:
            return self._make_bucket_hook(p)

        def hook(*unused):
            with self._lock:
                unit = self._unit_of[p]
                if unit in self._launched or self._delay[p] <= 0:
                    raise AssertionError(_TOO_MANY_PASSES_MSG)
                self._touched.add(p)
                self._delay[p] -= 1
                if self._delay[p] == 0:
                    ready = self._ready.setdefault(unit, set())
                    ready.add(p)
                    if len(ready) == len(self._units[unit]):
                        self._launch(unit)
        return hook

    def _make_bucket_hook(self, p):
        reducer = self._reducer

        def hook(*unused):
            with self._lock:
                if reducer.launched(p) or self._delay[p] <= 0:
                    raise AssertionError(_TOO_MANY_PASSES_MSG)
                self._touched.add(p)
                self._delay[p] -= 1
                if self._delay[p] == 0:
                    reducer.grad_ready(p, self._scale_factors() + (self.op,))
        return hook

    def _scale_factors(self):
        if self.op == Average:
            # The runtime divides by size for Average: sum(g / f) * f / size.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _launch(self, unit):
        prescale, postscale = self._scale_factors()
        entries = []
        try:
            for p in self._units[unit]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                grad = p.grad
                if grad.is_sparse:
                    if not self.sparse_as_dense:  # Horovod: allgathers of indices, values
                        entries.append((p, _buckets.sparse_reduce(
                            grad, self._names[p], self.op, self._set_id), None, None, grad))
                        continue
                    grad = grad.to_dense()
                compressed, ctx = self._compression.compress(grad)
                handle = allreduce_async_(compressed, name=self._names[p], op=self.op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self._set_id)
                entries.append((p, handle, compressed, ctx, grad))
        finally:
            self._launched[unit] = entries

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those not started yet) and writes
        the averaged gradients into p.grad."""
        if not self._included:
            self._synchronized = True
            return
        if self._reducer is not None:
            return self._synchronize_buckets()
        with self._lock:
            for unit in range(len(self._units)):
                if unit not in self._launched:
                    self._launch(unit)
            launched, self._launched = self._launched, {}
            self._ready.clear()
            self._touched.clear()
            for p in self._delay:
                self._delay[p] = self.backward_passes_per_step
        first_error = None
        for unit in sorted(launched):
            for p, handle, compressed, ctx, grad in launched[unit]:
                try:
                    if callable(handle):  # a sparse reduction
                        out = handle()
                    else:
                        out = self._compression.decompress(_synchronize_handle(handle), ctx)
                except Exception as e:
                    if first_error is None:
                        first_error = e
                    continue
                if p.grad.is_sparse:
                    p.grad = out if out.is_sparse else out.to_sparse()
                elif out is not p.grad:
                    p.grad.copy_(out)
        if first_error is not None:
            raise first_error
        self._synchronized = True

    def _synchronize_buckets(self):
        with self._lock:
            try:
                started = self._reducer.launch_rest(self._scale_factors() + (self.op,))
            finally:
                self._touched.clear()
                for p in self._delay:
                    self._delay[p] = self.backward_passes_per_step
        self._reducer.wait(started)
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() yourself first,
        e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return self._hora_local_step(closure)

    def _hora_local_step(self, closure=None):
        """The wrapped optimizer's own step, without any communication."""
        if closure is None:
            return super().step()
        return super().step(closure)

    def _hora_discard_in_flight(self):
        """Forgets every gradient reduction started since the last synchronize, without
        waiting: after a failed collective hvd.elastic restarts Hora, and those handles
        belong to the job that is gone. The next backward starts the step afresh."""
        with self._lock:
            self._launched.clear()
            self._ready.clear()
            self._touched.clear()
            for p in self._delay:
                self._delay[p] = self.backward_passes_per_step
            if self._reducer is not None:
                self._reducer.discard()
        self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        if self._launched or self._touched or (
                self._reducer is not None and self._reducer.in_flight()):
            raise AssertionError(_ZERO_GRAD_MSG)
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """An optimizer of the same class as `optimizer` whose step() applies gradients
    averaged (op) over the ranks of process_set. See horovod.torch.DistributedOptimizer."""
    set_id = _set_id(process_set)
    op = _resolve_op(op, None)
    raise_if_bad(op)  # at construction: no call on the other ranks waits for it
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if gradient_predivide_factor <= 0:
        raise ValueError("gradient_predivide_factor must be positive")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    if num_groups:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be "
                      "removed in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if isinstance(optimizer, (_DistributedMixin, _adasum._DistributedAdasumMixin)):
        raise ValueError("optimizer is already a DistributedOptimizer")
    if op == Adasum:  # Horovod's: local steps, the parameters' changes combined by Adasum
        return _adasum.distributed_adasum_optimizer(optimizer, compression,
                                                    int(backward_passes_per_step), set_id)
    cls = type(optimizer.__class__.__name__, (_DistributedMixin, optimizer.__class__),
               {"__module__": optimizer.__class__.__module__})
    return cls(optimizer, named_parameters, compression, int(backward_passes_per_step), op,
               gradient_predivide_factor, groups, sparse_as_dense, set_id)
