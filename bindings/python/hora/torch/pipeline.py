"""Pipeline parallelism over a Hora process set: a model cut into stages, one per member.

Stage s is the member of rank s in the set (ranks in set order); with the interleaved
schedule it holds v chunks (global chunks s, S+s, 2S+s, ...). A training step cuts the batch
into M micro-batches along dimension 0; each micro-batch's activation goes from chunk to chunk
(stage s to s+1, the last stage back to stage 0 between a stage's chunks); the last chunk
applies loss_fn and the loss (divided by M, so the accumulated gradients are those of the
whole batch's mean) starts backward, whose input gradients go back the same way. The
parameters' .grad then hold the whole batch's gradient: step the stage's optimizer as usual,
or a DistributedOptimizer / ZeroOptimizer over the stage's data-parallel set.

Wire, per link (chunk g-1 to chunk g; tags offset by 3g): the first activation of a step
carries a header (int64: dtype code, ndim, dims; TAG_HEADER); the step's later activations
on that link go bare (TAG_ACTIVATION): the micro-batches of a step are equal slices of one
batch, so a stage's output shape is the same for each (checked on the sender: a different one
is a ValueError). Gradients need no header (the sender of the activation knows its shape) and
use TAG_GRADIENT. Sends are isend (waited for at the end of the step). Receives are irecv
posted a task ahead: before a task computes, its own receive and the next task's are posted
(when their shape is known), so a transfer is matched while the stage computes and a stage
waits only on data its peer has not sent yet; posted in task order, the n-th receive of a
tag still matches the n-th send, so the micro-batches keep their order.

The order of a stage's forwards and backwards is pipeline_schedule.py's (gpipe, 1f1b,
interleaved). The bubble is measured: after each step, `stats` holds the seconds spent in
compute and waiting on receives (and per task: kind, micro-batch, chunk, start, wait,
compute), and the schedule's bubble in theory.
"""

import time

import torch
import torch.nn as nn

from .. import core
from .mpi_ops import _set_id, _set_size, global_process_set, synchronize
from .collective_ops import allgather, irecv, isend
from .pipeline_balance import profile_balance
from .pipeline_schedule import SCHEDULES, ideal_bubble, tasks

TAG_HEADER, TAG_ACTIVATION, TAG_GRADIENT = 7001, 7002, 7003
_MAX_DIMS = 8
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.uint8, torch.bool, torch.int8, torch.int16]


def split_sequential(seq, num_stages, balance=None):
    """Cuts an nn.Sequential into num_stages nn.Sequential parts: balance (modules per
    stage) or as even as the module count allows."""
    mods = list(seq.children())
    if balance is None:
        if num_stages > len(mods):
            raise ValueError("split_sequential: %d stages for %d modules" % (num_stages,
                                                                            len(mods)))
        base, extra = divmod(len(mods), num_stages)
        balance = [base + (1 if i < extra else 0) for i in range(num_stages)]
    balance = list(balance)
    if len(balance) != num_stages:
        raise ValueError("split_sequential: balance %s has %d entries for %d stages"
                         % (balance, len(balance), num_stages))
    if sum(balance) != len(mods) or min(balance) < 1:
        raise ValueError("split_sequential: balance %s must be positive and add up to the %d "
                         "modules" % (balance, len(mods)))
    parts, i = [], 0
    for k in balance:
        parts.append(nn.Sequential(*mods[i:i + k]))
        i += k
    return parts


class Pipeline(nn.Module):
    """This rank's stage of a pipeline over `process_set`.

    stage: this rank's module (one tensor in, one tensor out), or with the interleaved
      schedule a list of its v >= 2 chunks (global chunks s, S+s, ...; `pipe.stage` is then
      an nn.ModuleList of them).
    num_stages: if given, must be the set's size (ValueError otherwise).
    micro_batches: M; the batch's dimension 0 must be divisible by it (interleaved: M a
      multiple of the stage count).
    schedule: "1f1b" (default), "gpipe" or "interleaved".
    Construction and train_step are collective over the set (same M, schedule, chunk and
    stage count on every member: checked at construction)."""

    def __init__(self, stage, process_set=global_process_set, num_stages=None,
                 micro_batches=1, schedule="1f1b"):
        super().__init__()
        set_id = _set_id(process_set)
        n = _set_size(set_id)
        if num_stages is not None and num_stages != n:
            raise ValueError("Pipeline: %d stages, but the process set %s has %d ranks (one "
                             "stage per rank)" % (num_stages, process_set, n))
        if not isinstance(micro_batches, int) or micro_batches < 1:
            raise ValueError("Pipeline: micro_batches must be a positive int, got %r"
                             % (micro_batches,))
        chunks = list(stage) if isinstance(stage, (list, tuple, nn.ModuleList)) else [stage]
        tasks(schedule, 0, n, micro_batches, len(chunks))   # ValueError on a bad combination
        self.stage = nn.ModuleList(chunks) if len(chunks) > 1 else chunks[0]
        self.chunks = chunks
        self.process_set = process_set
        self.num_stages = n
        self.micro_batches = micro_batches
        self.schedule = schedule
        ranks = list(range(core.size())) if set_id == 0 else core.process_set_ranks(set_id)
        self.stage_index = ranks.index(core.rank()) if core.rank() in ranks else -1
        if self.stage_index < 0:
            raise ValueError("Pipeline: rank %d is not a member of %s" % (core.rank(),
                                                                         process_set))
        s = self.stage_index
        self.prev = ranks[s - 1] if s > 0 else None
        self.next = ranks[s + 1] if s < n - 1 else None
        self._ring_prev, self._ring_next = ranks[(s - 1) % n], ranks[(s + 1) % n]
        self.stats = {}
        self.balance = self.predicted_stage_s = self.profile = None
        self._check_layout(num_stages)

    @classmethod
    def from_sequential(cls, seq, process_set=global_process_set, balance=None, sample=None,
                        memory_limit=None, virtual_stages=1, loss_fn=None, replicas=None,
                        **kwargs):
        """The stage of an nn.Sequential cut for this rank. balance: None (as even as the
        module count allows), modules per stage, or "profile": every member times each
        module's forward and backward on `sample` (one micro-batch of the first stage's
        input) and the cut minimises the slowest stage (interleaved: the cut whose replay of
        the schedule ends first; pipeline_balance.py; collective),
        keeping each stage's predicted memory within `memory_limit` bytes if given; with
        loss_fn= (the one train_step gets), sample=(inputs, targets) and the last stage's
        cost includes the loss's forward and backward. The balance is `pipe.balance`.
        virtual_stages=v (with schedule="interleaved") cuts S*v parts (balance: S*v counts)
        and gives stage s parts s, S+s, ....
        With "profile", `pipe.predicted_stage_s` holds each part's predicted forward +
        backward seconds per micro-batch and `pipe.profile` the agreed per-module rows
        (forward_s, backward_s, loss_s, activation_bytes, parameter_bytes). With several
        pipelines (data or tensor parallelism beside the pipeline), replicas=grid.stage_set
        (the ranks that hold this stage in every pipeline; every rank of the job calls this at
        once) makes every pipeline cut alike: its profile then comes from that set's first
        member. Without it each pipeline cuts by its own profile, and TP peers that cut
        differently wait for each other's collectives for good."""
        set_id = _set_id(process_set)
        n = _set_size(set_id)
        if not isinstance(virtual_stages, int) or virtual_stages < 1:
            raise ValueError("Pipeline: virtual_stages must be a positive int, got %r"
                             % (virtual_stages,))
        predicted = rows = None
        if isinstance(balance, str):
            if balance != "profile":
                raise ValueError("Pipeline: balance must be None, a list of module counts or "
                                 "'profile', got %r" % balance)
            balance, predicted, _, rows = profile_balance(
                list(seq.children()), n * virtual_stages, sample, process_set,
                micro_batches=kwargs.get("micro_batches", 1),
                schedule=kwargs.get("schedule", "1f1b"), memory_limit=memory_limit,
                loss_fn=loss_fn, replicas=replicas)
        elif sample is not None or memory_limit is not None or loss_fn is not None:
            raise ValueError("Pipeline: sample=, memory_limit= and loss_fn= go with "
                             "balance='profile'")
        if balance is not None and len(balance) != n * virtual_stages:
            raise ValueError("Pipeline: balance %s gives %d stages, but the process set %s has "
                             "%d ranks (one stage per rank, %d chunks each)" % (
                                 list(balance), len(balance), process_set, n, virtual_stages))
        ranks = list(range(core.size())) if set_id == 0 else core.process_set_ranks(set_id)
        parts = split_sequential(seq, n * virtual_stages, balance)
        mine = parts[ranks.index(core.rank())::n]
        pipe = cls(mine if virtual_stages > 1 else mine[0], process_set, n, **kwargs)
        pipe.balance = [len(p) for p in parts]
        pipe.predicted_stage_s, pipe.profile = predicted, rows
        return pipe

    @property
    def is_first(self):
        return self.prev is None

    @property
    def is_last(self):
        return self.next is None

    def _check_layout(self, num_stages):
        mine = [self.num_stages, -1 if num_stages is None else num_stages,
                self.micro_batches, SCHEDULES.index(self.schedule), len(self.chunks)]
        every = allgather(torch.tensor([mine], dtype=torch.int64),
                          process_set=self.process_set).tolist()
        if any(row[0] != mine[0] or row[2:] != mine[2:] or
               (row[1] != -1 and row[1] != mine[0]) for row in every):
            raise ValueError("Pipeline: the layout differs across the stages: %s" % "; ".join(
                "stage %d: %d micro-batches, %s, %d chunks" % (i, row[2], SCHEDULES[row[3]],
                                                               row[4])
                for i, row in enumerate(every)))

    def forward(self, x):
        raise RuntimeError("Pipeline: call train_step(inputs, targets, loss_fn), or run "
                           "pipeline.stage directly")

    # ---- wire ----

    def _send_activation(self, y, g, pending):
        """Sends chunk g-1's output to chunk g (on the next stage)."""
        shape = (y.dtype, tuple(y.shape))
        announced = self._announced.get(g)
        if announced is None:
            if len(y.shape) > _MAX_DIMS:
                raise ValueError("Pipeline: activations have at most %d dimensions" % _MAX_DIMS)
            if y.dtype not in _DTYPES:
                raise TypeError("Pipeline: activations of dtype %s cannot be sent" % y.dtype)
            header = torch.zeros(2 + _MAX_DIMS, dtype=torch.int64)
            header[0], header[1] = _DTYPES.index(y.dtype), y.dim()
            header[2:2 + y.dim()] = torch.tensor(list(y.shape), dtype=torch.int64)
            pending.append(isend(header, self._ring_next, TAG_HEADER + 3 * g, self.process_set))
            self._announced[g] = shape
        elif announced != shape:
            raise ValueError("Pipeline: stage %d's chunk %d returned %s %s for one micro-batch "
                             "and %s %s for another; a stage's output shape must be the same "
                             "for every micro-batch of a step" % (
                                 self.stage_index, g - 1, announced[0], list(announced[1]),
                                 shape[0], list(shape[1])))
        pending.append(isend(y.detach().contiguous(), self._ring_next, TAG_ACTIVATION + 3 * g,
                             self.process_set))

    def _post(self, task, saved):
        """Starts the receive `task` will need if its shape is known (for an activation, once
        the link's header came; for a gradient, once the micro-batch's forward ran here), so
        that the transfer is matched while this stage computes instead of when it needs the
        data. Called in task order, so the n-th receive of a tag is still the n-th posted."""
        kind, i, k = task
        g = k * self.num_stages + self.stage_index
        if task in self._posted:
            return
        if kind == "F":
            if g == 0:
                return
            known = self._announced.get(("in", g))
            if known is not None:
                self._posted[task] = irecv(torch.empty(known[1], dtype=known[0]),
                                           self._ring_prev, TAG_ACTIVATION + 3 * g,
                                           self.process_set)
            elif ("header", g) not in self._posted:
                self._posted[("header", g)] = irecv(
                    torch.zeros(2 + _MAX_DIMS, dtype=torch.int64), self._ring_prev,
                    TAG_HEADER + 3 * g, self.process_set)
        elif g < self.num_stages * len(self.chunks) - 1 and (i, k) in saved:
            y = saved[(i, k)][1]
            if y.is_floating_point():
                # the next chunk sends a gradient for every floating-point activation (zeros
                # if it did not use it); a non-floating one has none
                self._posted[task] = irecv(torch.empty(y.shape, dtype=y.dtype),
                                           self._ring_next, TAG_GRADIENT + 3 * (g + 1),
                                           self.process_set)

    def _take(self, task, saved):
        """The data `task` receives (None if it receives nothing); blocks until it is here."""
        self._post(task, saved)
        kind, _, k = task
        g = k * self.num_stages + self.stage_index
        if kind == "F" and g > 0 and task not in self._posted:
            header = synchronize(self._posted.pop(("header", g)))
            ndim = int(header[1])
            self._announced[("in", g)] = (_DTYPES[int(header[0])],
                                          [int(d) for d in header[2:2 + ndim]])
            self._post(task, saved)
            if self._ahead is not None:   # the next task's receive may need this header
                self._post(self._ahead, saved)
        h = self._posted.pop(task, None)
        return None if h is None else synchronize(h)

    # ---- one micro-batch through one chunk ----

    def _forward(self, i, k, inputs, targets, loss_fn, saved, pending):
        g = k * self.num_stages + self.stage_index
        last = g == self.num_stages * len(self.chunks) - 1
        t0 = time.perf_counter()
        if g == 0:
            x = inputs[i]
        else:
            x = self._take(("F", i, k), saved)
            if x.is_floating_point():
                x.requires_grad_(True)
        t1 = time.perf_counter()
        y = self.chunks[k](x)
        if not torch.is_tensor(y):
            raise TypeError("Pipeline: stage %d returned %s; a stage returns one tensor"
                            % (self.stage_index, type(y).__name__))
        if last:
            loss = loss_fn(y, targets[i]) / self.micro_batches
            saved[(i, k)] = (x, loss)
            self._losses.append(loss.detach())
        else:
            self._send_activation(y, g + 1, pending)
            saved[(i, k)] = (x, y)
        self._account("F", i, k, t0, t1)

    def _backward(self, i, k, saved, pending):
        g = k * self.num_stages + self.stage_index
        t0 = time.perf_counter()
        grad = self._take(("B", i, k), saved)
        x, y = saved.pop((i, k))
        t1 = time.perf_counter()
        if y.requires_grad:
            torch.autograd.backward(y, grad)
        if g > 0 and x.is_floating_point():
            gx = x.grad if x.grad is not None else torch.zeros_like(x)
            pending.append(isend(gx.contiguous(), self._ring_prev, TAG_GRADIENT + 3 * g,
                                 self.process_set))
        self._account("B", i, k, t0, t1)

    def _account(self, kind, i, k, t0, t1):
        """A task waited from t0 to t1 (its receive), then computed until now."""
        t2 = time.perf_counter()
        self._wait += t1 - t0
        self._compute += t2 - t1
        self._tasks.append((kind, i, k, t0 - self._start, t1 - t0, t2 - t1))

    # ---- a step ----

    def _split(self, batch, what):
        if batch is None:
            raise ValueError("Pipeline: stage %d needs %s" % (self.stage_index, what))
        if batch.shape[0] % self.micro_batches:
            raise ValueError("Pipeline: the batch's %d rows are not divisible into %d "
                             "micro-batches" % (batch.shape[0], self.micro_batches))
        return list(batch.chunk(self.micro_batches))

    def train_step(self, inputs=None, targets=None, loss_fn=None):
        """Forward and backward of one batch through every stage (collective over the set).
        inputs: the batch, on the first stage; targets and loss_fn(output, target): on the
        last. Gradients accumulate in the stage's parameters (zero them before). Returns
        the batch's mean loss (a 0-d tensor) on the last stage, None elsewhere."""
        m, v = self.micro_batches, len(self.chunks)
        ins = self._split(inputs, "inputs") if self.is_first else None
        tgts = None
        if self.is_last:
            tgts = self._split(targets, "targets")
            if loss_fn is None:
                raise ValueError("Pipeline: the last stage needs loss_fn")
        saved, pending = {}, []
        self._losses, self._wait, self._compute, self._announced = [], 0.0, 0.0, {}
        self._tasks = []
        start = self._start = time.perf_counter()
        order = tasks(self.schedule, self.stage_index, self.num_stages, m, v)
        self._posted = {}   # task (or ("header", chunk)) -> its receive's handle
        for j, (kind, i, k) in enumerate(order):
            # this task's receive, then the next one's, posted before this task computes
            self._ahead = order[j + 1] if j + 1 < len(order) else None
            self._post(order[j], saved)
            if self._ahead is not None:
                self._post(self._ahead, saved)
            if kind == "F":
                self._forward(i, k, ins, tgts, loss_fn, saved, pending)
            else:
                self._backward(i, k, saved, pending)
            if self._ahead is not None:   # its shape may be known only now
                self._post(self._ahead, saved)
        t0 = time.perf_counter()
        for h in pending:
            synchronize(h)
        end = time.perf_counter()
        self._wait += end - t0
        total = end - start
        self.stats = {"step_s": total, "compute_s": self._compute, "wait_s": self._wait,
                      "bubble": self._wait / total if total > 0 else 0.0, "tasks": self._tasks,
                      "sends_s": end - t0, "started": start,
                      "ideal_bubble": ideal_bubble(self.schedule, self.num_stages, m, v)}
        if self.is_last:
            return torch.stack(self._losses).sum()
        return None
