"""Balancing a pipeline by profile: time every module of an nn.Sequential on a sample
micro-batch, agree on the times over the pipeline's process set, and cut the module list into
contiguous stages so that the slowest stage is as fast as it can be.

profile_modules runs each module in turn on the sample (the output of one is the input of the
next): a few warm-up and measured repetitions of a real forward (autograd recording) and a
real backward (torch.autograd.backward with a gradient of ones), the median of each. Its
activation memory is the bytes autograd saves for the backward (saved_tensors_hooks, each
storage once, parameters left out) plus the output's bytes. It leaves the modules as it found
them: gradients, buffers (running statistics) and the RNG state are restored.

partition is a pure function: given per-module costs, it returns the balance (modules per
stage) minimising the largest stage cost by exact dynamic programming over contiguous splits
(O(S N^2)), with an optional cap on each stage's memory. Ties go to the earliest cut, so every
rank that feeds it the same table gets the same balance. With the interleaved schedule a
stage holds v parts (s, S+s, ...), so the largest part is not what the step waits for:
interleaved_partition replays the schedule (pipeline_schedule.simulate) for every cut while
there are few enough of them, and keeps the fastest.
"""

import itertools
import math
import statistics
import sys
import time

import torch

from .. import core
from .mpi_ops import Average, _set_id, _set_size
from .collective_ops import allreduce, broadcast
from .pipeline_schedule import simulate


def _restore_point(modules):
    grads = [(p, p.grad) for m in modules for p in m.parameters()]
    bufs = [(b, b.detach().clone()) for m in modules for b in m.buffers()]
    return grads, bufs, torch.get_rng_state()


def _restore(point):
    grads, bufs, rng = point
    for p, g in grads:
        p.grad = g
    with torch.no_grad():
        for b, v in bufs:
            b.copy_(v)
    torch.set_rng_state(rng)


def _module_profile(mod, x, warmup, repeats):
    params = {p.data_ptr() for p in mod.parameters()}
    fwd, bwd, saved = [], [], {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else \
            t.storage().data_ptr()
        if ptr not in params and t.data_ptr() not in params:
            saved[ptr] = max(saved.get(ptr, 0), t.numel() * t.element_size())
        return t

    y = None
    for r in range(warmup + repeats):
        xin = x.detach()
        if xin.is_floating_point():
            xin.requires_grad_(True)
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            t0 = time.perf_counter()
            y = mod(xin)
            t1 = time.perf_counter()
        if not torch.is_tensor(y):
            raise TypeError("Pipeline: balance='profile': module %s returned %s; a pipeline "
                            "module returns one tensor" % (type(mod).__name__,
                                                           type(y).__name__))
        t2 = t3 = time.perf_counter()
        if y.requires_grad:
            grad = torch.ones_like(y)
            t2 = time.perf_counter()
            torch.autograd.backward(y, grad)
            t3 = time.perf_counter()
        if r >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t3 - t2)
    act = sum(saved.values()) + y.numel() * y.element_size()
    pbytes = sum(p.numel() * p.element_size() for p in mod.parameters())
    return statistics.median(fwd), statistics.median(bwd), act, pbytes, y.detach()


def _loss_profile(loss_fn, y, target, warmup, repeats):
    """Median seconds of loss_fn(y, target)'s forward and backward (the last stage's)."""
    times = []
    for r in range(warmup + repeats):
        yin = y.detach()
        if yin.is_floating_point():
            yin.requires_grad_(True)
        t0 = time.perf_counter()
        loss = loss_fn(yin, target)
        if not torch.is_tensor(loss) or loss.numel() != 1:
            raise TypeError("Pipeline: balance='profile': loss_fn must return a scalar tensor, "
                            "got %s" % (type(loss).__name__ if not torch.is_tensor(loss)
                                        else "shape %s" % list(loss.shape)))
        if loss.requires_grad:
            loss.backward()
        if r >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def profile_modules(modules, sample, warmup=1, repeats=3, loss_fn=None):
    """Per module of `modules` (run in order on `sample`, one micro-batch's input): a dict
    with forward_s, backward_s (medians over `repeats` after `warmup`), loss_s,
    activation_bytes and parameter_bytes. With loss_fn, `sample` is (inputs, targets) and the
    last module's loss_s is loss_fn(output, targets)'s forward and backward (the last stage
    runs it; 0 elsewhere). Local: no communication (unless a module itself communicates)."""
    target = None
    if loss_fn is not None:
        if not (isinstance(sample, (tuple, list)) and len(sample) == 2):
            raise ValueError("Pipeline: balance='profile' with loss_fn= needs sample=(inputs, "
                             "targets) of one micro-batch, got %s" % type(sample).__name__)
        sample, target = sample
    if not torch.is_tensor(sample):
        raise ValueError("Pipeline: balance='profile' needs sample= a tensor (one micro-batch "
                         "of the first stage's input), or (inputs, targets) with loss_fn=, "
                         "got %s" % type(sample).__name__)
    if warmup < 0 or repeats < 1:
        raise ValueError("Pipeline: profile warmup >= 0 and repeats >= 1, got %d, %d"
                         % (warmup, repeats))
    point = _restore_point(modules)
    out, x = [], sample
    try:
        for mod in modules:
            f, b, act, pb, x = _module_profile(mod, x, warmup, repeats)
            out.append({"forward_s": f, "backward_s": b, "loss_s": 0.0,
                        "activation_bytes": act, "parameter_bytes": pb})
        if loss_fn is not None and out:
            out[-1]["loss_s"] = _loss_profile(loss_fn, x, target, warmup, repeats)
    finally:
        _restore(point)
    return out


def cost(row):
    """A module's seconds per micro-batch: forward, backward and (the last one's) loss."""
    return row["forward_s"] + row["backward_s"] + row.get("loss_s", 0.0)


def stage_memory(rows, in_flight):
    """Predicted bytes a stage holding `rows` needs: parameters and their gradients, plus
    `in_flight` micro-batches' activations (optimizer state not counted)."""
    return sum(2 * r["parameter_bytes"] + in_flight * r["activation_bytes"] for r in rows)


def partition(costs, stages, memory=None, memory_limit=None):
    """The balance (modules per stage, each >= 1) cutting len(costs) modules into `stages`
    contiguous stages with the smallest largest stage cost (sum of its modules' costs).
    memory(a, b, s): the bytes stage s would need holding modules [a, b); a split where some
    stage needs more than memory_limit is not allowed (ValueError if none is allowed)."""
    n = len(costs)
    if stages < 1 or stages > n:
        raise ValueError("Pipeline: cannot cut %d modules into %d stages" % (n, stages))
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))
    inf = float("inf")

    def fits(a, b, s):
        return memory_limit is None or memory(a, b, s) <= memory_limit

    # best[s][j]: the smallest largest cost of stages 0..s holding modules [0, j)
    best = [[inf] * (n + 1) for _ in range(stages)]
    cut = [[0] * (n + 1) for _ in range(stages)]
    for j in range(1, n + 1):
        if fits(0, j, 0):
            best[0][j] = prefix[j]
    for s in range(1, stages):
        for j in range(s + 1, n + 1):
            for i in range(s, j):
                if best[s - 1][i] == inf or not fits(i, j, s):
                    continue
                v = max(best[s - 1][i], prefix[j] - prefix[i])
                if v < best[s][j]:
                    best[s][j], cut[s][j] = v, i
    if best[stages - 1][n] == inf:
        raise ValueError("Pipeline: no split of the %d modules into %d stages keeps every "
                         "stage within memory_limit=%d bytes" % (n, stages, memory_limit))
    bounds, j = [n], n
    for s in range(stages - 1, 0, -1):
        j = cut[s][j]
        bounds.append(j)
    bounds.append(0)
    bounds.reverse()
    return [bounds[k + 1] - bounds[k] for k in range(stages)]


# The most cuts interleaved_partition replays (about 0.1-0.3 ms each); past it, partition's.
MAX_REPLAYED_CUTS = 2000


def interleaved_partition(rows, stages, chunks, micro_batches, memory=None, memory_limit=None):
    """The balance (modules per part, stages * chunks parts) whose replay of the interleaved
    schedule with the rows' forward and backward costs ends first (transfers free); ties to the
    earliest cut. Parts over memory_limit (memory(a, b, part)) are not allowed. Falls back to
    partition's when more than MAX_REPLAYED_CUTS cuts exist."""
    n, parts = len(rows), stages * chunks
    if parts > n or math.comb(n - 1, parts - 1) > MAX_REPLAYED_CUTS:
        return partition([cost(r) for r in rows], parts, memory, memory_limit)
    fwd = [r["forward_s"] for r in rows]
    bwd = [r["backward_s"] + r.get("loss_s", 0.0) for r in rows]
    best, best_time = None, float("inf")
    for inner in itertools.combinations(range(1, n), parts - 1):
        bounds = (0,) + inner + (n,)
        spans = [(bounds[k], bounds[k + 1]) for k in range(parts)]
        if memory_limit is not None and any(memory(a, b, k) > memory_limit
                                            for k, (a, b) in enumerate(spans)):
            continue
        t, _ = simulate("interleaved", stages, micro_batches, chunks,
                        forward=[sum(fwd[a:b]) for a, b in spans],
                        backward=[sum(bwd[a:b]) for a, b in spans])
        if t < best_time:
            best, best_time = [b - a for a, b in spans], t
    if best is None:
        raise ValueError("Pipeline: no split of the %d modules into %d parts keeps every "
                         "part within memory_limit=%d bytes" % (n, parts, memory_limit))
    return best


def cut(rows, stages, chunks, micro_batches, memory=None, memory_limit=None):
    """The balance of the profile's rows for `stages` ranks holding `chunks` parts each:
    interleaved_partition's with several parts per rank, else partition's."""
    if chunks > 1:
        return interleaved_partition(rows, stages, chunks, micro_batches, memory, memory_limit)
    return partition([cost(r) for r in rows], stages, memory, memory_limit)


def _first_member(process_set):
    """The set's first member, as a global rank (what broadcast's root is)."""
    set_id = _set_id(process_set)
    return 0 if set_id == 0 else core.process_set_ranks(set_id)[0]


def agreed_profile(modules, sample, process_set, warmup=1, repeats=3, loss_fn=None,
                   replicas=None):
    """profile_modules on every member of the set (collective), the times averaged over the
    set, then the first member's times and memory broadcast so that every member holds the
    same numbers bit for bit (and cuts the same way). replicas: this rank's set of the
    pipelines' copies of its stage (data parallelism across pipelines); the numbers then come
    from that set's first member, so that every pipeline cuts alike."""
    rows = profile_modules(modules, sample, warmup, repeats, loss_fn)
    t = torch.tensor([[r["forward_s"], r["backward_s"], r["loss_s"]] for r in rows],
                     dtype=torch.float64)
    t = allreduce(t, op=Average, name="pipeline.profile.times",
                  process_set=process_set)
    root = _first_member(process_set)
    t = broadcast(t, root, name="pipeline.profile.agreed", process_set=process_set)
    m = torch.tensor([[r["activation_bytes"], r["parameter_bytes"]] for r in rows],
                     dtype=torch.int64)
    m = broadcast(m, root, name="pipeline.profile.memory", process_set=process_set)
    if replicas is not None:
        first = _first_member(replicas)
        t = broadcast(t, first, name="pipeline.profile.replicas", process_set=replicas)
        m = broadcast(m, first, name="pipeline.profile.replicas.memory", process_set=replicas)
    for r, (f, b, l) in zip(rows, t.tolist()):
        r["forward_s"], r["backward_s"], r["loss_s"] = f, b, l
    for r, (a, p) in zip(rows, m.tolist()):
        r["activation_bytes"], r["parameter_bytes"] = a, p
    return rows


def in_flight(schedule, stage, stages, micro_batches):
    """Micro-batches whose activations a stage holds at once under `schedule` (interleaved:
    counted as 1F1B over the S*v parts, an approximation)."""
    if schedule == "gpipe":
        return micro_batches
    return min(stages - stage, micro_batches)


def profile_balance(modules, stages, sample, process_set, micro_batches=1, schedule="1f1b",
                    memory_limit=None, warmup=1, repeats=3, loss_fn=None, replicas=None):
    """The agreed profile (collective) and the balance it gives: (balance, per-stage predicted
    seconds of one micro-batch's forward + backward (+ the loss on the last), per-stage
    predicted bytes, the per-module rows of agreed_profile). The set's first member prints
    them once."""
    rows = agreed_profile(modules, sample, process_set, warmup, repeats, loss_fn, replicas)
    costs = [cost(r) for r in rows]

    def memory(a, b, s):
        return stage_memory(rows[a:b], in_flight(schedule, s, stages, micro_batches))

    n = _set_size(_set_id(process_set))
    balance = cut(rows, n, stages // n, micro_batches, memory, memory_limit)
    times, mems, a = [], [], 0
    for s, k in enumerate(balance):
        times.append(sum(costs[a:a + k]))
        mems.append(memory(a, a + k, s))
        a += k
    if core.rank() == _first_member(process_set):
        sys.stderr.write(
            "hora: pipeline balance %s by profile; predicted forward+backward per micro-batch "
            "and stage: %s ms (even split by count would be %s ms); memory per stage %s KiB\n"
            % (balance, ", ".join("%.2f" % (1e3 * t) for t in times),
               ", ".join("%.2f" % (1e3 * t) for t in even_times(costs, stages)),
               ", ".join("%d" % (m // 1024) for m in mems)))
        sys.stderr.flush()
    return balance, times, mems, rows


def even_times(costs, stages):
    """Per-stage cost of split_sequential's even split by module count."""
    base, extra = divmod(len(costs), stages)
    out, a = [], 0
    for s in range(stages):
        k = base + (1 if s < extra else 0)
        out.append(sum(costs[a:a + k]))
        a += k
    return out
