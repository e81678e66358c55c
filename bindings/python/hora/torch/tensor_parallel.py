"""Tensor parallelism over a Hora process set, as Megatron-LM defines it.

A linear layer's weight is split across the T ranks of a tensor-parallel set:
  ColumnParallelLinear: rows of W (output features) split. The input is replicated, so
      forward is local; backward sums the input's gradient over the set (f: identity
      forward, allreduce backward). With gather_output the partial outputs are allgathered
      along the last dimension (g: allgather forward, keep own slice backward).
  RowParallelLinear: columns of W (input features) split. Each rank holds a slice of the
      input (input_is_parallel, e.g. a column-parallel output), computes a partial output,
      and the partials are summed over the set (allreduce forward, identity backward); the
      bias is replicated and added after the sum.
  VocabParallelEmbedding: rows of the table split; ids outside this rank's range look up
      zeros, and the partial embeddings are summed over the set.
Column then row (MLP: fc1 column, activation, fc2 row; attention: q, k, v column by heads,
projection row) costs one allreduce in forward and one in backward per block.

Parameters outside these layers (LayerNorm, the row-parallel bias) are replicated: every
member computes the same gradient for them. Data parallelism then runs across the DP set of
a grid (make_grid): e.g. DistributedOptimizer(process_set=grid.dp_set).

Initialization: each layer draws the whole weight with torch's generator (as nn.Linear /
nn.Embedding would, in the same order) and keeps its slice, so a model built with the same
seed holds exactly the slices of the single-process model. from_linear / from_embedding
take the slices of an existing module instead.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import core
from .process_sets import _members
from .mpi_ops import ProcessSet, add_process_set, global_process_set
from .parallel_ops import allreduce, gather_along, slice_along
from .sequence_parallel import (gather_from_sequence_parallel, mark_sequence_parallel,
                                reduce_scatter_to_sequence_parallel)

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding",
           "ParallelGrid", "make_grid", "copy_to_parallel", "reduce_from_parallel",
           "gather_from_parallel", "scatter_to_parallel"]


def _divide(what, features, n, process_set):
    if features % n:
        raise ValueError("%s is not divisible by the tensor-parallel size %d (%s)"
                         % (what, n, process_set))
    return features // n


class _CopyToParallel(torch.autograd.Function):
    """f: identity forward, the gradient summed over the set backward."""

    @staticmethod
    def forward(ctx, x, process_set):
        ctx.process_set = process_set
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return allreduce(grad, ctx.process_set), None


class _ReduceFromParallel(torch.autograd.Function):
    """g: the partials summed over the set forward, identity backward."""

    @staticmethod
    def forward(ctx, x, process_set):
        return allreduce(x, process_set)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromParallel(torch.autograd.Function):
    """allgather along the last dimension forward; this rank's slice backward."""

    @staticmethod
    def forward(ctx, x, process_set):
        ctx.n, ctx.r = _members(process_set)
        return gather_along(x, process_set, -1)

    @staticmethod
    def backward(ctx, grad):
        return slice_along(grad, ctx.n, ctx.r, -1), None


class _ScatterToParallel(torch.autograd.Function):
    """this rank's slice of the last dimension forward; allgather backward."""

    @staticmethod
    def forward(ctx, x, process_set):
        ctx.process_set = process_set
        n, r = _members(process_set)
        return slice_along(x, n, r, -1)

    @staticmethod
    def backward(ctx, grad):
        return gather_along(grad, ctx.process_set, -1), None


def copy_to_parallel(x, process_set):
    return _CopyToParallel.apply(x, process_set)


def reduce_from_parallel(x, process_set):
    return _ReduceFromParallel.apply(x, process_set)


def gather_from_parallel(x, process_set):
    return _GatherFromParallel.apply(x, process_set)


def scatter_to_parallel(x, process_set):
    return _ScatterToParallel.apply(x, process_set)


def _linear_master(out_features, in_features, bias):
    """The whole weight and bias drawn as nn.Linear(in, out) draws them."""
    w = torch.empty(out_features, in_features)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    b = None
    if bias:
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        b = torch.empty(out_features).uniform_(-bound, bound)
    return w, b


def _rows(t, n, r, chunks):
    """Rank r's rows of `t` (dim 0): with chunks > 1, dim 0 is `chunks` blocks (e.g. q, k,
    v of a fused projection) and r takes its slice of each block."""
    blocks = t.reshape(chunks, n, t.shape[0] // (chunks * n), *t.shape[1:])
    return blocks[:, r].reshape(-1, *t.shape[1:]).clone()


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W's output features split over the set: this rank holds
    out_features / T rows (with `chunks`, its slice of each of `chunks` blocks). The output
    is whole on every member with gather_output, else this rank's slice (the input of a
    RowParallelLinear with input_is_parallel=True). With sequence_parallel the input is this
    member's slice of the sequence (dim sequence_dim), allgathered here
    (hora.torch.sequence_parallel)."""

    def __init__(self, in_features, out_features, bias=True, gather_output=True,
                 process_set=global_process_set, chunks=1, sequence_parallel=False,
                 sequence_dim=0, _init=True):
        super().__init__()
        self.process_set = process_set
        self.tp_size, self.tp_rank = _members(process_set)
        if out_features % chunks:
            raise ValueError("ColumnParallelLinear: out_features %d is not divisible by "
                             "chunks %d" % (out_features, chunks))
        _divide("ColumnParallelLinear: out_features %d%s" % (
            out_features, " / chunks %d" % chunks if chunks > 1 else ""),
            out_features // chunks, self.tp_size, process_set)
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.chunks = gather_output, chunks
        self.sequence_parallel, self.sequence_dim = bool(sequence_parallel), sequence_dim
        local = out_features // self.tp_size
        self.weight = nn.Parameter(torch.empty(local, in_features))
        self.bias = nn.Parameter(torch.empty(local)) if bias else None
        if _init:
            w, b = _linear_master(out_features, in_features, bias)
            self._load(w, b)

    def _load(self, w, b):
        with torch.no_grad():
            self.weight.copy_(_rows(w, self.tp_size, self.tp_rank, self.chunks))
            if self.bias is not None:
                self.bias.copy_(_rows(b, self.tp_size, self.tp_rank, self.chunks))

    @classmethod
    def from_linear(cls, linear, process_set=global_process_set, gather_output=True,
                    chunks=1, sequence_parallel=False, sequence_dim=0):
        """This rank's slice of an existing nn.Linear."""
        m = cls(linear.in_features, linear.out_features, linear.bias is not None,
                gather_output, process_set, chunks, sequence_parallel, sequence_dim,
                _init=False)
        m._load(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())
        return m

    def forward(self, x):
        if self.sequence_parallel:
            x = gather_from_sequence_parallel(x, self.process_set, self.sequence_dim)
        else:
            x = copy_to_parallel(x, self.process_set)
        y = F.linear(x, self.weight, self.bias)
        return gather_from_parallel(y, self.process_set) if self.gather_output else y

    def extra_repr(self):
        return ("in_features=%d, out_features=%d (%d here), tp=%d, gather_output=%s, "
                "sequence_parallel=%s" % (self.in_features, self.out_features,
                                          self.weight.shape[0], self.tp_size,
                                          self.gather_output, self.sequence_parallel))


class RowParallelLinear(nn.Module):
    """y = x W^T + b with W's input features split over the set: this rank holds
    in_features / T columns. The input is this rank's slice of the last dimension with
    input_is_parallel, else the whole input (sliced here). The output is whole on every
    member; the bias is replicated. With sequence_parallel (input_is_parallel too) the
    output is this member's slice of the sequence (dim sequence_dim): the partial outputs are
    reduce-scattered, and the bias's gradient summed over the set."""

    def __init__(self, in_features, out_features, bias=True, input_is_parallel=False,
                 process_set=global_process_set, sequence_parallel=False, sequence_dim=0,
                 _init=True):
        super().__init__()
        self.process_set = process_set
        self.tp_size, self.tp_rank = _members(process_set)
        local = _divide("RowParallelLinear: in_features %d" % in_features, in_features,
                        self.tp_size, process_set)
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel = input_is_parallel
        if sequence_parallel and not input_is_parallel:
            raise ValueError("RowParallelLinear: sequence_parallel needs input_is_parallel=True "
                             "(the input of a ColumnParallelLinear(gather_output=False))")
        self.sequence_parallel, self.sequence_dim = bool(sequence_parallel), sequence_dim
        self.weight = nn.Parameter(torch.empty(out_features, local))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        if self.bias is not None and self.sequence_parallel:
            mark_sequence_parallel([self.bias], process_set)
        if _init:
            w, b = _linear_master(out_features, in_features, bias)
            self._load(w, b)

    def _load(self, w, b):
        k = self.weight.shape[1]
        with torch.no_grad():
            self.weight.copy_(w[:, self.tp_rank * k:(self.tp_rank + 1) * k])
            if self.bias is not None:
                self.bias.copy_(b)

    @classmethod
    def from_linear(cls, linear, process_set=global_process_set, input_is_parallel=False,
                    sequence_parallel=False, sequence_dim=0):
        m = cls(linear.in_features, linear.out_features, linear.bias is not None,
                input_is_parallel, process_set, sequence_parallel, sequence_dim, _init=False)
        m._load(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())
        return m

    def forward(self, x):
        if not self.input_is_parallel:
            x = scatter_to_parallel(x, self.process_set)
        elif x.shape[-1] != self.weight.shape[1]:
            raise ValueError("RowParallelLinear: input has %d features, this rank's slice is "
                             "%d (in_features %d / tp %d)" % (x.shape[-1], self.weight.shape[1],
                                                              self.in_features, self.tp_size))
        y = F.linear(x, self.weight)
        if self.sequence_parallel:
            y = reduce_scatter_to_sequence_parallel(y, self.process_set, self.sequence_dim)
        else:
            y = reduce_from_parallel(y, self.process_set)
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return ("in_features=%d (%d here), out_features=%d, tp=%d, input_is_parallel=%s, "
                "sequence_parallel=%s" % (self.in_features, self.weight.shape[1],
                                          self.out_features, self.tp_size,
                                          self.input_is_parallel, self.sequence_parallel))


class VocabParallelEmbedding(nn.Module):
    """nn.Embedding with the rows of the table split over the set: rank r holds ids
    [r * V/T, (r+1) * V/T). The output is whole on every member, or with sequence_parallel
    this member's slice of the sequence (dim sequence_dim of the ids)."""

    def __init__(self, num_embeddings, embedding_dim, process_set=global_process_set,
                 sequence_parallel=False, sequence_dim=0, _init=True):
        super().__init__()
        self.process_set = process_set
        self.tp_size, self.tp_rank = _members(process_set)
        local = _divide("VocabParallelEmbedding: num_embeddings %d" % num_embeddings,
                        num_embeddings, self.tp_size, process_set)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.sequence_parallel, self.sequence_dim = bool(sequence_parallel), sequence_dim
        self.start, self.end = self.tp_rank * local, (self.tp_rank + 1) * local
        self.weight = nn.Parameter(torch.empty(local, embedding_dim))
        if _init:
            master = torch.empty(num_embeddings, embedding_dim)
            nn.init.normal_(master)
            self._load(master)

    def _load(self, master):
        with torch.no_grad():
            self.weight.copy_(master[self.start:self.end])

    @classmethod
    def from_embedding(cls, embedding, process_set=global_process_set, sequence_parallel=False,
                       sequence_dim=0):
        m = cls(embedding.num_embeddings, embedding.embedding_dim, process_set,
                sequence_parallel, sequence_dim, _init=False)
        m._load(embedding.weight.detach())
        return m

    def forward(self, ids):
        outside = (ids < self.start) | (ids >= self.end)
        local = (ids - self.start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        if self.sequence_parallel:
            return reduce_scatter_to_sequence_parallel(out, self.process_set, self.sequence_dim)
        return reduce_from_parallel(out, self.process_set)

    def extra_repr(self):
        return "%d, %d (rows %d..%d here), tp=%d" % (self.num_embeddings, self.embedding_dim,
                                                     self.start, self.end, self.tp_size)


class ParallelGrid(object):
    """This rank's place in a tp x dp x pp grid of the job's ranks (tp fastest, then dp,
    then pp, as Megatron-LM orders them: global rank = (pp_rank * dp + dp_rank) * tp +
    tp_rank) and the process sets of its row in each direction; stage_set: every rank of its
    pipeline stage (its TP peers and their DP replicas: tp x dp ranks), the set whose members
    must cut a model alike (Pipeline.from_sequential's replicas=). A set that spans the whole
    job is hvd.global_process_set."""

    def __init__(self, tp, dp, pp, tp_set, dp_set, pp_set, stage_set):
        self.tp, self.dp, self.pp = tp, dp, pp
        self.tp_set, self.dp_set, self.pp_set = tp_set, dp_set, pp_set
        self.stage_set = stage_set
        r = core.rank()
        self.tp_rank = r % tp
        self.dp_rank = (r // tp) % dp
        self.pp_rank = r // (tp * dp)

    def __repr__(self):
        return "ParallelGrid(tp=%d, dp=%d, pp=%d; rank %d at tp %d, dp %d, pp %d)" % (
            self.tp, self.dp, self.pp, core.rank(), self.tp_rank, self.dp_rank, self.pp_rank)


def make_grid(tp=1, pp=1, dp=None):
    """Registers the tensor-, data- and pipeline-parallel sets of a grid over every rank of
    the job (collective: every rank calls it with the same sizes) and returns this rank's
    ParallelGrid. dp defaults to size / (tp * pp)."""
    n = core.size()
    for what, v in (("tp", tp), ("pp", pp)):
        if not isinstance(v, int) or v < 1:
            raise ValueError("make_grid: %s must be a positive int, got %r" % (what, v))
    if dp is None:
        if n % (tp * pp):
            raise ValueError("make_grid: tp %d x pp %d does not divide the job's %d ranks"
                             % (tp, pp, n))
        dp = n // (tp * pp)
    if tp * pp * dp != n:
        raise ValueError("make_grid: tp %d x dp %d x pp %d = %d ranks, the job has %d"
                         % (tp, dp, pp, tp * dp * pp, n))
    rank_of = lambda t, d, p: (p * dp + d) * tp + t  # noqa: E731
    rows = {"tp": [[rank_of(t, d, p) for t in range(tp)] for p in range(pp) for d in range(dp)],
            "dp": [[rank_of(t, d, p) for d in range(dp)] for p in range(pp) for t in range(tp)],
            "pp": [[rank_of(t, d, p) for p in range(pp)] for d in range(dp) for t in range(tp)],
            "stage": [[rank_of(t, d, p) for d in range(dp) for t in range(tp)]
                      for p in range(pp)]}
    known = {tuple(range(n)): global_process_set}
    for ids in core.process_set_ids():
        if ids != 0:
            known.setdefault(tuple(core.process_set_ranks(ids)), _Registered(ids))
    mine = {}
    for kind in ("tp", "dp", "pp", "stage"):
        for ranks in rows[kind]:
            key = tuple(ranks)
            if key not in known:
                known[key] = add_process_set(ProcessSet(list(ranks)))
            if core.rank() in ranks:
                mine[kind] = known[key]
    return ParallelGrid(tp, dp, pp, mine["tp"], mine["dp"], mine["pp"], mine["stage"])


def _Registered(set_id):
    """A ProcessSet object for a set registered earlier (by id)."""
    ps = ProcessSet(core.process_set_ranks(set_id))
    ps.process_set_id = set_id
    return ps
