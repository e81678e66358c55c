"""ZeroOptimizer stage 3's parameters (internal to zero.py).

Layout: a parameter lives in the unit of the modules that own it directly. A parameter owned
by one module shares a unit with that module's other parameters (of its group and dtype); a
parameter tied between modules (`head.weight = emb.weight`) is one unit of its own, which
each of those modules gathers for its forward and its backward. Autograd sums the uses'
gradients before the parameter's accumulator runs, so the unit is reduced once per backward.

Lifecycle: a forward pre-hook gathers the module's units (counting the modules using each
at the moment: nested or tied modules keep it until the last one returns) and starts the
next module's (the order the first forward recorded); a forward hook releases them and
wraps the outputs in an identity Function whose backward gathers them again; a unit is
freed once its gradient is reduced. Freeing resizes the flat buffer's storage to 0, so the
views autograd saved stay valid.

Guard: each stage-3 parameter's class becomes `ShardedParameter`, whose `__torch_function__`
raises a RuntimeError naming the parameter when an operation reads it while its unit is not
gathered (e.g. `x @ self.emb.weight.T` in a parent's forward), instead of reading freed
memory. Metadata (shape, dtype, .grad, requires_grad, hashing) stays readable.
"""

import torch

from .zero_gather import _GatherInto, _PreBackward, _replace_tensors, _tensors_in

FREE, GATHERING, FULL = 0, 1, 2

_T = torch.Tensor
_METADATA = {
    _T.__hash__, _T.grad.__get__, _T.grad.__set__, _T.grad.__delete__,
    _T.requires_grad.__get__, _T.requires_grad.__set__, _T.requires_grad_, _T.is_leaf.__get__,
    _T.grad_fn.__get__, _T.shape.__get__, _T.dtype.__get__, _T.device.__get__,
    _T.layout.__get__, _T.ndim.__get__, _T.size, _T.dim, _T.numel, _T.nelement,
    _T.element_size, _T.is_floating_point, _T.is_complex, _T.is_sparse.__get__,
    _T.is_cuda.__get__, _T.register_hook,
}


class ShardedParameter(torch.nn.Parameter):
    """A stage-3 parameter: reading its values outside its unit's gathered time raises."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func not in _METADATA:
            for a in args:
                if isinstance(a, (list, tuple)):
                    for b in a:
                        _check(b, func)
                else:
                    _check(a, func)
            for v in (kwargs or {}).values():
                _check(v, func)
        return torch._C._disabled_torch_function_impl(func, types, args, kwargs or {})


def _check(t, func):
    if type(t) is ShardedParameter and t._hora_zero_unit.state != FULL:
        names = t._hora_zero_names
        raise RuntimeError(
            "ZeroOptimizer stage 3: parameter %r%s was read (by %s) while its shard is not "
            "gathered. Stage 3 gathers a parameter only during the forward and backward of "
            "the modules that own it (%s): use it through their forward, or inside `with "
            "opt.gathered():`" % (names[0], "".join(" (also %r)" % n for n in names[1:]),
                                  getattr(func, "__name__", func),
                                  ", ".join(repr(n.rpartition(".")[0] or "<model>")
                                            for n in names)))


def make_units(model, groups, param_index, make_unit):
    """The stage-3 units: one per (set of owning modules, param group, dtype), in the order
    named_modules() meets them. Returns the units, the modules with the units each uses, and
    every parameter's qualified names (several when tied)."""
    group_of = {id(p): gi for gi, g in enumerate(groups) for p in g["params"]}
    owners, names, direct = {}, {}, []
    for mname, m in model.named_modules():
        mine = {}
        for pname, p in m._parameters.items():
            if p is None or id(p) not in group_of:
                continue
            owners.setdefault(id(p), []).append(len(direct))
            names.setdefault(id(p), []).append(mname + "." + pname if mname else pname)
            mine[id(p)] = p
        direct.append((m, list(mine.values())))
    missing = [param_index[id(p)] for g in groups for p in g["params"] if id(p) not in owners]
    if missing:
        raise ValueError("ZeroOptimizer stage 3: optimizer parameters %s are not parameters "
                         "of model" % missing)
    by_key = {}   # (owning modules, group, dtype) -> {id: parameter}, in order met
    for m, mine in direct:
        for p in mine:
            by_key.setdefault((tuple(owners[id(p)]), group_of[id(p)], p.dtype), {})[id(p)] = p
    units, used_by = [], [[] for _ in direct]
    for key, ps in by_key.items():
        u = make_unit(len(units), list(ps.values()), key[1])
        units.append(u)
        for mi in key[0]:
            used_by[mi].append(u)
    return units, [(m, us) for (m, _), us in zip(direct, used_by) if us], names


class Stage3(object):
    """Gathers and frees a ZeroOptimizer's stage-3 units around its model's modules."""

    def __init__(self, zero, modules, names, prefetch):
        self.zero = zero
        self.modules = modules    # [(module, [units it uses])]
        self.prefetch = prefetch
        self.order = []           # module indices in the order the first forward ran them
        self.order_done = False
        for u in zero._units:
            u.users = 0           # forwards using the unit now
            self.free(u)
            for p in u.params:
                p._hora_zero_unit = u
                p._hora_zero_names = names[id(p)]
                if type(p) is torch.nn.Parameter:   # a subclass of its own keeps its class
                    p.__class__ = ShardedParameter
        for i, (m, _) in enumerate(modules):
            m.register_forward_pre_hook(self._make_pre_forward(i))
            m.register_forward_hook(self._make_post_forward(i))

    def gather_async(self, u):
        if u.state != FREE:
            return
        u.flat.storage().resize_(u.padded)
        u.ag_handle = _GatherInto(u.shard, u.flat, "zero%d.ag.%d" % (self.zero._id, u.index),
                                  self.zero.process_set)
        u.state = GATHERING

    def gather(self, u):
        self.gather_async(u)
        if u.state == GATHERING:
            u.ag_handle.wait()
            u.ag_handle = None
            u.state = FULL

    def free(self, u):
        if u.state == GATHERING:
            u.ag_handle.wait()
            u.ag_handle = None
        u.flat.storage().resize_(0)
        u.state = FREE

    def reduced(self, u):
        """The unit's gradient is reduced: free it unless a forward is using it."""
        if u.state != FREE and not u.users:
            self.free(u)

    def _neighbour(self, i, step):
        if not (self.prefetch and self.order_done) or i not in self.order:
            return []
        j = self.order.index(i) + step
        return self.modules[self.order[j]][1] if 0 <= j < len(self.order) else []

    def _make_pre_forward(self, i):
        def pre_forward(module, inputs):
            if not self.order_done:
                if i in self.order:
                    self.order_done = True
                else:
                    self.order.append(i)
            for u in self.modules[i][1]:
                u.users += 1
                self.gather(u)
            for u in self._neighbour(i, +1):
                self.gather_async(u)
        return pre_forward

    def _make_post_forward(self, i):
        def post_forward(module, inputs, output):
            for u in self.modules[i][1]:
                u.users -= 1
                if not u.users:
                    self.free(u)
            if not torch.is_grad_enabled():
                return None
            ts = _tensors_in(output)
            idx = [k for k, t in enumerate(ts) if t.requires_grad]
            if not idx:
                return None
            wrapped = _PreBackward.apply(self, i, *[ts[k] for k in idx])
            wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
            for k, w in zip(idx, wrapped):
                ts[k] = w
            return _replace_tensors(output, iter(ts))
        return post_forward

    def pre_backward(self, i):
        """A gradient reached module i's outputs: gather its units, prefetch the previous
        module's (forward order) that are still to be reduced."""
        self.order_done = True   # a backward ends the first forward's order
        for u in self.modules[i][1]:
            self.gather(u)
        for u in self._neighbour(i, -1):
            if not u.reduced:
                self.gather_async(u)

    def gather_all(self):
        """ZeroOptimizer.gathered(): every unit whole, and kept so by a use of its own
        through the forwards run inside the block."""
        for u in self.zero._units:
            u.users += 1
            self.gather_async(u)
        for u in self.zero._units:
            self.gather(u)

    def free_all(self):
        for u in self.zero._units:
            u.users -= 1
            if not u.users:
                self.free(u)
