"""Hora as a torch.distributed backend: `import hora.torch.distributed` registers "hora", then
`dist.init_process_group("hora")` runs DDP, FSDP, ZeroRedundancyOptimizer and everything else
built on torch.distributed over Hora's negotiation, fusion, data planes and failure detection.

Every group is a Hora process set (the default group is the global set). torch's calls carry
no names, so each gets one from its group; every rank issues a group's calls in the same order
(torch requires it), so the names match, and a call made by some ranks only is named by
Hora's stall report. all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor and
all_to_all_single are named by what they carry and how often it came, "c10d.<group>.<kind>.<dtype>.<shape>[.<op or root>].<n mod 8>",
so that a training loop repeats its names and Hora's steady path learns them (no coordinator
round trip once learned, docs/design.md "Steady state"); a name is reused only after its
previous call finished on this rank. The other calls take a per-group sequence number,
"c10d.<group>.<n>.<kind>".
Ranks inside a group's calls are group ranks, as torch passes them; Hora's are global.
"""

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .. import core
from . import collective_ops
from . import mpi_ops
from . import p2p
from . import process_sets
# DistBackendError is re-exported.
from .c10d_work import DistBackendError, PeerWork, Work, done  # noqa: F401

BACKEND = "hora"
# How many calls of one signature a group names apart (and may have in flight) before it
# reuses the first name.
_WINDOW = 8

_OPS = {}
for _name, _hora in (("SUM", mpi_ops.Sum), ("AVG", mpi_ops.Average),
                     ("PRODUCT", mpi_ops.Product), ("MIN", mpi_ops.Min), ("MAX", mpi_ops.Max)):
    if hasattr(dist.ReduceOp, _name):
        _OPS[getattr(dist.ReduceOp, _name)] = _hora


def _hora_op(reduce_op):
    """torch's ReduceOp (an instance or its enum value) as Hora's; others raise naming it."""
    kind = getattr(reduce_op, "op", reduce_op)
    for torch_op, hora_op in _OPS.items():
        if kind == torch_op:
            return hora_op
    raise ValueError("the hora backend does not support %s (supported: SUM, AVG, PRODUCT, "
                     "MIN, MAX)" % (kind,))


def _flat(t):
    return t.reshape(-1)


class HoraProcessGroup(dist.ProcessGroup):
    """One torch group on one Hora process set (`members`: its global ranks, in group order)."""

    def __init__(self, rank, size, members, group_name, process_set):
        super().__init__(rank, size)
        self._members = members
        self._name = str(group_name)
        self._set = process_set
        self._seq = 0
        self._uses = {}   # signature -> calls so far (_repeatable)
        self._last = {}   # repeatable name -> the Work that used it last

    # -- what torch asks of a backend --
    def getBackendName(self):
        return BACKEND

    def name(self):
        return BACKEND

    @property
    def group_name(self):
        return self._name

    def _get_backend(self, device=None):
        """This group serves every device itself (torch asks, e.g. in batch_isend_irecv)."""
        return self

    def __repr__(self):
        return "HoraProcessGroup(group %s, rank %d of %d, global ranks %s)" % (
            self._name, self.rank(), self.size(), self._members)

    # -- helpers --
    def _next(self, kind):
        """A name for this call only (".noname.<n>": the runtime forgets it once planned)."""
        self._seq += 1
        return "c10d.%s.%s.noname.%d" % (self._name, kind, self._seq)

    def _repeatable(self, kind, t, extra="", rows_alike=True):
        """A name for the n-th call of this signature in this group: the same on every rank
        (torch's order), and repeated every _WINDOW calls, once the previous call of that
        name has finished here. rows_alike=False: the first dimension may differ across
        ranks (all_to_all_single), so it is not part of the signature."""
        shape = tuple(t.shape) if rows_alike else ("rows",) + tuple(t.shape[1:])
        sig = "%s.%s.%s%s" % (kind, str(t.dtype).replace("torch.", ""),
                              "x".join(str(d) for d in shape) or "scalar", extra)
        n = self._uses.get(sig, 0)
        self._uses[sig] = n + 1
        name = "c10d.%s.%s.%d" % (self._name, sig, n % _WINDOW)
        prev = self._last.pop(name, None)
        if prev is not None:
            prev._complete()  # never raises: its error stays with its own wait()
        return name

    def _remember(self, names, work):
        for n in names:
            self._last[n] = work
        return work

    def _global(self, group_rank, what):
        if not 0 <= group_rank < len(self._members):
            raise ValueError("%s: rank %d is not in this group of %d ranks"
                             % (what, group_rank, len(self._members)))
        return self._members[group_rank]

    def _work(self, name, handles, finish, kind=Work):
        return kind("%s (group %s)" % (name, self._name), handles, finish)

    # -- collectives --
    def allreduce(self, tensors, opts=None):
        op = _hora_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        names = [self._repeatable("allreduce", t, ".op%d" % op) for t in tensors]
        handles = [mpi_ops.allreduce_async_(t, name=n, op=op, process_set=self._set)
                   for n, t in zip(names, tensors)]
        return self._remember(names, self._work(names[0] if names else "allreduce", handles,
                                                lambda _: tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        op = _hora_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        name = self._next("allreduce_coalesced")
        if not tensors:
            return done(name, tensors)
        h = mpi_ops.grouped_allreduce_async_(tensors, name=name, op=op, process_set=self._set)
        return self._work(name, [h], lambda _: tensors)

    def broadcast(self, tensors, opts=None):
        root = self._global(opts.rootRank if opts is not None else 0, "broadcast")
        names = [self._repeatable("broadcast", t, ".root%d" % root) for t in tensors]
        handles = [mpi_ops.broadcast_async_(t, root, name=n, process_set=self._set)
                   for n, t in zip(names, tensors)]
        return self._remember(names, self._work(names[0] if names else "broadcast", handles,
                                                lambda _: tensors))

    def _gather_rows(self, name, input_tensor):
        """Every member's input flattened, as the rows of one [size, numel] tensor."""
        return mpi_ops.allgather_async(_flat(input_tensor).unsqueeze(0), name=name,
                                       process_set=self._set)

    def allgather(self, output_lists, input_tensors, opts=None):
        name = self._next("allgather")
        handles = []
        for i, (outs, t) in enumerate(zip(output_lists, input_tensors)):
            self._check_parts(outs, t, "allgather")
            handles.append(self._gather_rows("%s.%d" % (name, i), t))

        def finish(results):
            with torch.no_grad():
                for outs, rows in zip(output_lists, results):
                    for out, row in zip(outs, rows):
                        out.copy_(row.view(out.shape))
            return output_lists

        return self._work(name, handles, finish)

    def _allgather_base(self, output, input_tensor, opts=None):
        if output.numel() != input_tensor.numel() * self.size():
            raise ValueError("all_gather_into_tensor: the output has %d elements, needs %d x %d"
                             % (output.numel(), self.size(), input_tensor.numel()))
        if output.dtype != input_tensor.dtype:
            raise ValueError("all_gather_into_tensor: output %s, input %s"
                             % (output.dtype, input_tensor.dtype))
        name = self._repeatable("allgather_into_tensor", input_tensor)
        if output.is_contiguous() and output.dtype in mpi_ops._TORCH_DTYPES:
            return self._remember([name], self._work(
                name, [self._gather_into(name, input_tensor, output)], lambda _: [output]))
        h = self._gather_rows(name, input_tensor)

        def finish(results):
            with torch.no_grad():
                output.copy_(results[0].view(output.shape))
            return [output]

        return self._remember([name], self._work(name, [h], finish))

    def _gather_into(self, name, input_tensor, output):
        """An allgather whose result lands in `output` (contiguous, a dtype the C API takes):
        on CPU the data plane writes it there, on a GPU the runtime's result is copied in;
        FSDP's hot path, without _gather_rows' extra copy."""
        return collective_ops._allgather_into_async(
            input_tensor, output, name, process_sets._set_id(self._set))

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i) for o, i in zip(outputs, inputs)]
        return self._work(self._next("allgather_coalesced"), [],
                          lambda _: [w.wait() and o for w, o in zip(works, outputs)])

    def _check_parts(self, parts, like, what):
        if len(parts) != self.size():
            raise ValueError("%s: %d tensors for a group of %d ranks"
                             % (what, len(parts), self.size()))
        for p in parts:
            if p.numel() != like.numel() or p.dtype != like.dtype:
                raise ValueError("%s: every part must have %d elements of %s, got %d of %s"
                                 % (what, like.numel(), like.dtype, p.numel(), p.dtype))

    def _reduce_rows(self, name, stacked, op, output):
        """Reduces [size, numel] `stacked` over the group; this rank's row lands in output."""
        me = self.rank()
        if op in (mpi_ops.Sum, mpi_ops.Average):  # on CPU the data plane writes into output
            h = collective_ops._reducescatter_submit(
                [stacked], name, op, 1.0, 1.0, process_sets._set_id(self._set), group=False,
                into=[output])
            pick = lambda r: r[0]  # noqa: E731
        else:  # Hora's reducescatter has Sum and Average; the rest reduce everything
            h = mpi_ops.allreduce_async_(stacked, name=name, op=op, process_set=self._set)
            pick = lambda r: r[me]  # noqa: E731

        def finish(results):
            got = pick(results[0])
            if got.data_ptr() != output.data_ptr():  # else it is output's own storage
                with torch.no_grad():
                    output.copy_(got.view(output.shape))
            return [output]

        return self._work(name, [h], finish)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = _hora_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if len(outputs) != 1:
            raise ValueError("reduce_scatter: one output tensor per call, got %d" % len(outputs))
        self._check_parts(input_lists[0], outputs[0], "reduce_scatter")
        stacked = torch.stack([_flat(p) for p in input_lists[0]])
        return self._reduce_rows(self._next("reduce_scatter"), stacked, op, outputs[0])

    def _reduce_scatter_base(self, output, input_tensor, opts=None):
        op = _hora_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if input_tensor.numel() != output.numel() * self.size():
            raise ValueError("reduce_scatter_tensor: the input has %d elements, needs %d x %d"
                             % (input_tensor.numel(), self.size(), output.numel()))
        stacked = input_tensor.reshape(self.size(), -1).contiguous()
        name = self._repeatable("reduce_scatter_tensor", input_tensor, ".op%d" % op)
        return self._remember([name], self._reduce_rows(name, stacked, op, output))

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._work(self._next("reduce_scatter_coalesced"), [],
                          lambda _: [w.wait() and o for w, o in zip(works, outputs)])

    def alltoall_base(self, output, input_tensor, output_splits, input_splits, opts=None):
        name = self._repeatable("all_to_all_single", input_tensor, rows_alike=False)
        n = self.size()
        if not input_splits:
            if input_tensor.shape[0] % n:
                raise ValueError("all_to_all_single: dimension 0 (%d) does not divide by the "
                                 "group size %d" % (input_tensor.shape[0], n))
            input_splits = [input_tensor.shape[0] // n] * n
        # The data plane writes into torch's output itself when it can.
        into = output if (output.device.type == "cpu" and output.is_contiguous() and
                          output.dtype == input_tensor.dtype and output.numel() > 0) else None
        h = mpi_ops.alltoall_async(input_tensor, splits=list(input_splits), name=name,
                                   process_set=self._set, _output=into)

        def finish(results):
            received, _ = results[0]
            if received is output:
                return [output]
            if received.numel() != output.numel():
                raise ValueError("all_to_all_single: received %d elements into an output of %d"
                                 % (received.numel(), output.numel()))
            with torch.no_grad():
                output.copy_(received.view(output.shape))
            return [output]

        return self._remember([name], self._work(name, [h], finish))

    all_to_all_single = alltoall_base

    def alltoall(self, outputs, inputs, opts=None):
        name = self._next("alltoall")
        if len(inputs) != self.size() or len(outputs) != self.size():
            raise ValueError("all_to_all: needs %d input and output tensors, got %d and %d"
                             % (self.size(), len(inputs), len(outputs)))
        dtype = inputs[0].dtype
        sent = torch.cat([_flat(t).to(dtype) for t in inputs])
        h = mpi_ops.alltoall_async(sent, splits=[t.numel() for t in inputs], name=name,
                                   process_set=self._set)

        def finish(results):
            received, splits = results[0]
            parts = torch.split(received, [int(s) for s in splits.tolist()])
            with torch.no_grad():
                for out, part in zip(outputs, parts):
                    if part.numel() != out.numel():
                        raise ValueError("all_to_all: %d elements arrived for an output of %d"
                                         % (part.numel(), out.numel()))
                    out.copy_(part.view(out.shape))
            return outputs

        return self._work(name, [h], finish)

    def barrier(self, opts=None):
        name = self._next("barrier")
        h = mpi_ops.allreduce_async_(torch.zeros(1), name=name, op=mpi_ops.Sum,
                                     process_set=self._set)
        return self._work(name, [h], lambda _: [])

    def reduce(self, tensors, opts=None):
        op = _hora_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        root = opts.rootRank if opts is not None else 0
        name = self._next("reduce")
        handles = [mpi_ops.allreduce_async(t, name="%s.%d" % (name, i), op=op,
                                           process_set=self._set)
                   for i, t in enumerate(tensors)]

        def finish(results):
            if self.rank() == root:
                with torch.no_grad():
                    for t, r in zip(tensors, results):
                        t.copy_(r)
            return tensors

        return self._work(name, handles, finish)

    def gather(self, output_lists, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        name = self._next("gather")
        t = input_tensors[0]
        if self.rank() == root:
            self._check_parts(output_lists[0], t, "gather")
        h = self._gather_rows(name, t)

        def finish(results):
            if self.rank() == root:
                with torch.no_grad():
                    for out, row in zip(output_lists[0], results[0]):
                        out.copy_(row.view(out.shape))
            return output_lists

        return self._work(name, [h], finish)

    def scatter(self, outputs, input_lists, opts=None):
        root = opts.rootRank if opts is not None else 0
        name = self._next("scatter")
        out = outputs[0]
        n = self.size()
        if self.rank() == root:
            self._check_parts(input_lists[0], out, "scatter")
            sent = torch.stack([_flat(p) for p in input_lists[0]])
            splits = [1] * n
        else:  # only the root sends
            sent = torch.empty((0, out.numel()), dtype=out.dtype)
            splits = [0] * n
        h = mpi_ops.alltoall_async(sent, splits=splits, name=name, process_set=self._set)

        def finish(results):
            with torch.no_grad():
                out.copy_(results[0][0].view(out.shape))
            return outputs

        return self._work(name, [h], finish)

    # -- point to point --
    def send(self, tensors, dst, tag=0):
        peer = self._global(dst, "send")
        submitted = [p2p.submit(t, peer, tag, self._set, True) for t in tensors]
        return self._work("send to group rank %d (tag %d)" % (dst, tag),
                          [h for h, _ in submitted], lambda _: tensors, PeerWork)

    def recv(self, tensors, src, tag=0):
        peer = self._global(src, "recv")
        submitted = [p2p.submit(t, peer, tag, self._set, False) for t in tensors]

        def finish(_):
            for t, (_, c) in zip(tensors, submitted):
                p2p.received(t, c)
            return tensors

        return self._work("recv from group rank %d (tag %d)" % (src, tag),
                          [h for h, _ in submitted], finish, PeerWork)

    def recv_anysource(self, tensors, tag=0):
        raise ValueError("the hora backend has no receive from any source: name the sender")


# -- creating groups --

def _process_set_for(members):
    """The Hora process set of a group's global ranks: the global set for the whole job, an
    existing set with these ranks, else a new one (collective over the job)."""
    if members == list(range(core.size())):
        return process_sets.global_process_set
    for set_id in core.process_set_ids():
        if core.process_set_ranks(set_id) == members:
            return set_id
    return mpi_ops.add_process_set(members)


def _create(opts, backend_options=None):
    """The creator torch calls for each group this rank is a member of."""
    if not core.is_initialized():
        mpi_ops.init()
    members = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    if not list(opts.global_ranks_in_group):  # the default group: the whole Hora job
        if (opts.group_rank, opts.group_size) != (core.rank(), core.size()):
            raise ValueError("init_process_group('hora'): torch says rank %d of %d, Hora's "
                             "job is rank %d of %d (set RANK/WORLD_SIZE as the launcher does, "
                             "or start with horarun)" % (opts.group_rank, opts.group_size,
                                                         core.rank(), core.size()))
    return HoraProcessGroup(opts.group_rank, opts.group_size, members, opts.group_id,
                            _process_set_for(members))


# torch creates a group's backend only on its members, but a Hora process set is added by
# every rank of the job: the non-members add it here.
_helper = c10d._new_process_group_helper


def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, *args,
                              **kwargs):
    ranks = list(global_ranks_in_group or [])
    if (ranks and BACKEND in str(backend).lower() and core.is_initialized()
            and core.rank() not in ranks):
        _process_set_for(sorted(ranks))
    return _helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
    c10d._new_process_group_helper = _new_process_group_helper
