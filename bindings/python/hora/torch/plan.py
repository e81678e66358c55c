"""A planner for parallel layouts: profile, predict, confirm the best few, print a table.

    horarun -np 4 python3 -m hora.torch.plan examples/gpt_parallel.py:plan_spec \\
        --global-batch 16 --memory-budget-mb 64

plan() is collective over the whole job (N ranks). Candidates at a fixed global batch G:
DP N with DistributedOptimizer and with ZeRO 1-3; TP t x DP N/t; PP p x DP N/p and TP t x
PP p x DP N/(t p) (1F1B, the stages cut by profile), with ZeRO-1 where DP > 1, for each
micro-batch count M that divides the rows; PP p x DP N/p with the interleaved schedule (2
parts per stage) where M is a multiple of p and the model has at least 2p modules.

Prediction, from measurements on this job:
- compute: pipeline_balance.profile_modules of the model built for the layout's TP set on
  one DP rank's rows (G/dp; per micro-batch G/(dp M) for PP): the sum of forward and backward
  per module, TP collectives inside the modules included; one profile per TP degree, model
  and rows, shared by the layouts that run the same;
- data parallel: the timed allreduce of the gradient bytes over the layout's DP set (ZeRO-1/2:
  a reducescatter and an allgather; ZeRO-3: those per module, plus its forward allgathers);
- pipeline: the schedule replayed (pipeline_schedule.simulate) with the forward and
  backward of the profile's cut (for 1F1B about M times the slowest stage plus the others
  once; the interleaved cut is interleaved_partition's), plus the timed send/recv latency for
  each activation and gradient;
- the optimizer's step: its timed step on the whole model, per byte, times the bytes the
  layout steps on a rank (ZeRO: 1/dp; TP: its slices; PP: the biggest stage);
- compute never faster than the host's cores allow: the uncontended costs are measured by
  one rank (or TP group) while the others wait, and the host's ranks' work divided by its
  cores (os.sched_getaffinity) bounds the step from below;
- memory per rank: parameters, gradients and Adam's two moments (4 x parameter bytes),
  divided as the layout shards them, plus the activations in flight.
The layouts that fit the budget are sorted by predicted time. Those predicted within
`margin` (25 %: about the predictions' error on a shared machine) of the fastest prediction,
at least 3, run `steps` steps each (after one warm-up), or the first `confirm` when given;
the table gives predicted and measured seconds, and the choice is the fastest measured. A
layout predicted 20 % slower than another can be the faster one, so confirming a fixed three
missed the fastest by 13-15 % in two runs of 17 layouts (2026-12-08, docs/parallelism.md).
"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

import torch

from .. import core
from .collective_ops import allgather, allreduce, broadcast, isend, recv, reducescatter
from .mpi_ops import Average, Max, synchronize
from .optimizer import DistributedOptimizer
from .pipeline import Pipeline
from .pipeline_balance import cost, cut, profile_modules
from .pipeline_schedule import simulate
from .tensor_parallel import make_grid
from .zero import ZeroOptimizer


class Layout(object):
    def __init__(self, tp=1, pp=1, zero=0, micro_batches=1, virtual_stages=1):
        self.tp, self.pp, self.zero, self.micro_batches = tp, pp, zero, micro_batches
        self.virtual_stages = virtual_stages   # > 1: the interleaved schedule

    @property
    def schedule(self):
        return "interleaved" if self.virtual_stages > 1 else "1f1b"

    def __str__(self):
        dp = core.size() // (self.tp * self.pp)
        parts = []
        if self.tp > 1:
            parts.append("TP %d" % self.tp)
        if self.pp > 1:
            parts.append("PP %d (M=%d%s)" % (self.pp, self.micro_batches,
                                             ", interleaved x%d" % self.virtual_stages
                                             if self.virtual_stages > 1 else ""))
        parts.append("DP %d" % dp + (" ZeRO-%d" % self.zero if self.zero else ""))
        return " x ".join(parts)


def candidates(n, global_batch, micro_batches=(2, 4, 8)):
    """The layouts of n ranks plan() considers."""
    out = [Layout(zero=z) for z in range(4)]
    for t in (2, 4, 8):
        if t <= n and n % t == 0:
            out.append(Layout(tp=t))
    for t in (1, 2, 4, 8):
        for p in (2, 4, 8):
            if t * p <= n and n % (t * p) == 0:
                rows = global_batch // (n // (t * p))
                # ZeRO-1 too where the stage has DP replicas (as DeepSpeed, not 2 or 3: they
                # would reduce, and 3 gather, once per micro-batch)
                zeros = (0, 1) if n // (t * p) > 1 else (0,)
                out += [Layout(tp=t, pp=p, zero=z, micro_batches=m) for z in zeros
                        for m in micro_batches if rows % m == 0 and m >= p]
    # the interleaved schedule (2 parts per stage, M a multiple of the stages), without TP or
    # ZeRO; a model with fewer modules than parts drops it (predict)
    for p in (2, 4, 8):
        if p <= n and n % p == 0:
            rows = global_batch // (n // p)
            out += [Layout(pp=p, micro_batches=m, virtual_stages=2) for m in micro_batches
                    if rows % m == 0 and m % p == 0]
    return [c for c in out if global_batch % (n // (c.tp * c.pp)) == 0]


def _mean(value, name):
    """The job's mean of a local float, the same bits on every rank."""
    return allreduce(torch.tensor([value], dtype=torch.float64), op=Average,
                     name="plan." + name).item()


def _timed(fn, repeats=3):
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _p2p_latency(n):
    """One-way seconds of a small send/recv between neighbours (ring), averaged."""
    r = core.rank()
    t = torch.zeros(4096)

    def ring():
        h = isend(t, (r + 1) % n, 9101)
        recv(torch.empty_like(t), (r - 1) % n, 9101)
        synchronize(h)

    return _timed(ring, 5)


def _step_seconds_per_byte(factory, optimizer):
    """The optimizer's step on the whole model (zero gradients), every rank at once, in
    seconds per parameter byte (the job's mean)."""
    torch.manual_seed(0)
    model = factory(make_grid())
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = optimizer(params)
    return _mean(_timed(opt.step), "opt") / max(1, _nbytes(params))


def _nbytes(params):
    return sum(p.numel() * p.element_size() for p in params)


def _profile_alone(grid, mods, sample, loss_fn):
    """Per-module rows (forward_s, backward_s with the last one's loss, activation_bytes) on
    `sample` (inputs, targets), measured by rank 0's TP group while every other rank waits
    (the uncontended cost), sent to all."""
    if grid.dp_rank == 0 and grid.pp_rank == 0:
        rows = profile_modules(mods, sample, warmup=1, repeats=5, loss_fn=loss_fn)
        t = torch.tensor([[r["forward_s"], r["backward_s"] + r["loss_s"], r["activation_bytes"]]
                          for r in rows], dtype=torch.float64)
    else:
        t = torch.zeros(len(mods), 3, dtype=torch.float64)
    t = broadcast(t, 0, name="plan.profile")
    return [{"forward_s": f, "backward_s": b, "activation_bytes": int(a)}
            for f, b, a in t.tolist()]


def _host_bound(work, grid, measured):
    """The least seconds the host's cores need for its ranks' `work` (uncontended
    seconds per rank; TP peers measured together count their share of the cores)."""
    cores, per_host = measured["cores"], core.local_size()
    share = min(1.0, float(cores) / grid.tp)
    return per_host * work * share / cores


def _profile(grid, mods, pbytes, rows, batch, loss_fn, measured):
    """_profile_alone of `rows` rows, measured once per TP degree, model and rows: layouts
    that run the same modules on the same rows (DP with and without ZeRO; PP cut from the
    same model) share one profile, so that their predictions differ only by what differs
    between them, not by the noise of separate measurements (collective)."""
    key = (grid.tp, rows, len(mods), pbytes)
    profiles = measured.setdefault("profiles", {})
    if key not in profiles:
        profiles[key] = _profile_alone(grid, mods, batch(rows), loss_fn)
    return profiles[key]


def _dp_seconds(units, zero, grid):
    """The job's mean seconds of one step's DP collectives over grid.dp_set for gradient units
    of `units` bytes: allreduce, or (ZeRO) reducescatter and allgather, ZeRO-3 a second
    allgather (forward and backward; collective)."""
    dp = grid.dp
    bufs = [torch.zeros(-(-max(1, b // 4) // dp) * dp) for b in units if b]

    def run():
        for u in bufs:
            if zero == 0:
                allreduce(u, op=Average, process_set=grid.dp_set)
                continue
            reducescatter(u, op=Average, process_set=grid.dp_set)
            for _ in range(2 if zero == 3 else 1):
                allgather(u[:u.numel() // dp], process_set=grid.dp_set)

    return _mean(_timed(run) if dp > 1 else 0.0, "comm")


def _state_bytes(pbytes, dp, zero):
    """Parameters, gradients and Adam's two moments per rank, sharded as ZeRO `zero` shards
    them; and the bytes a rank steps."""
    state = {0: 4 * pbytes, 1: 2 * pbytes + 2 * pbytes // dp,
             2: pbytes + 3 * pbytes // dp, 3: 4 * pbytes // dp}[zero]
    return state, pbytes // dp if zero else pbytes


def predict(layout, factory, batch, loss_fn, global_batch, measured):
    """(seconds, bytes per rank) predicted for `layout` (collective)."""
    grid = make_grid(tp=layout.tp, pp=layout.pp)
    torch.manual_seed(0)
    model = factory(grid)
    mods = list(model.children())
    rows = global_batch // grid.dp
    pbytes = _nbytes(model.parameters())
    dp = grid.dp
    if layout.pp == 1:
        prof = _profile(grid, mods, pbytes, rows, batch, loss_fn, measured)
        costs, acts = [cost(r) for r in prof], [r["activation_bytes"] for r in prof]
        work = sum(costs)
        compute = max(work, _host_bound(work, grid, measured))
        # what one step moves: stage 3 per module, stages 1/2 and DP the whole gradient
        units = [_nbytes(m.parameters()) for m in mods] if layout.zero == 3 else [pbytes]
        comm = _dp_seconds(units, layout.zero, grid)
        state, stepped = _state_bytes(pbytes, dp, layout.zero)
        return compute + comm + measured["opt"] * stepped, state + sum(acts)
    m, v, p = layout.micro_batches, layout.virtual_stages, layout.pp
    if p * v > len(mods):
        return None   # fewer modules than parts
    prof = _profile(grid, mods, pbytes, rows // m, batch, loss_fn, measured)
    costs = [cost(r) for r in prof]
    columns = ([r["forward_s"] for r in prof], [r["backward_s"] for r in prof],
               [_nbytes(x.parameters()) for x in mods], [r["activation_bytes"] for r in prof])
    parts, a = [], 0
    for k in cut(prof, p, v, m):   # the cut from_sequential makes
        parts.append([sum(x[a:a + k]) for x in columns])
        a += k
    # the schedule replayed with the parts' costs (transfers free): for 1F1B about M times
    # the slowest stage plus the others once ((M + p - 1) x slowest counted the light first
    # and last stages of PP 4 as slow ones: +22 to +40 % against the measured step)
    sched, _ = simulate(layout.schedule, p, m, v, forward=[f for f, _, _, _ in parts],
                        backward=[b for _, b, _, _ in parts])
    # the host's ranks hold every stage dp / (hosts) times: their mean work per rank
    mean_work = m * sum(costs) / p
    compute = max(sched, _host_bound(mean_work, grid, measured))
    stages = [[x for k, x in enumerate(parts) if k % p == s] for s in range(p)]
    biggest = max(sum(x[2] for x in st) for st in stages)   # a stage's parameter bytes
    act = max(sum(x[3] for x in st) for st in stages) * min(p, m)
    msgs = 2 * m * v * 2 * measured["p2p"]   # activations and gradients, both ends, each part
    comm = _dp_seconds([biggest], layout.zero, grid)   # the biggest stage's (ZeRO-1 at most)
    state, stepped = _state_bytes(biggest, dp, layout.zero)
    return compute + msgs + comm + measured["opt"] * stepped, state + act


def measure(layout, factory, batch, loss_fn, global_batch, steps, optimizer):
    """Seconds per step of `layout` (the slowest rank's median over `steps`; collective)."""
    grid = make_grid(tp=layout.tp, pp=layout.pp)
    torch.manual_seed(0)
    model = factory(grid)
    rows = global_batch // grid.dp
    pipe = None
    if layout.pp > 1:
        m = layout.micro_batches
        pipe = Pipeline.from_sequential(model, grid.pp_set, balance="profile",
                                        sample=batch(rows // m), loss_fn=loss_fn,
                                        micro_batches=m, replicas=grid.stage_set,
                                        schedule=layout.schedule,
                                        virtual_stages=layout.virtual_stages)
        model = pipe.stage
    opt = optimizer(model.parameters())
    if layout.zero:
        opt = ZeroOptimizer(opt, model=model, stage=layout.zero, process_set=grid.dp_set)
    elif grid.dp > 1:
        opt = DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   process_set=grid.dp_set,
                                   backward_passes_per_step=layout.micro_batches)
    times = []
    for s in range(steps + 1):
        x, y = batch(rows)
        t0 = time.perf_counter()
        opt.zero_grad()
        if pipe is not None:
            pipe.train_step(x if pipe.is_first else None, y if pipe.is_last else None, loss_fn)
        else:
            loss_fn(model(x), y).backward()
        opt.step()
        if s:
            times.append(time.perf_counter() - t0)
    return allreduce(torch.tensor([statistics.median(times)]), op=Max,
                     name="plan.measured").item()


def to_confirm(rows, confirm=None, margin=0.25):
    """The rows to run, fastest predicted first: of those that fit, the first `confirm`, or
    (confirm None) every one predicted within `margin` of the fastest prediction, at least
    three."""
    if confirm is not None and (not isinstance(confirm, int) or confirm < 0):
        raise ValueError("plan: confirm must be None or an int >= 0, got %r" % (confirm,))
    if not margin >= 0:
        raise ValueError("plan: margin must be a fraction >= 0, got %r" % (margin,))
    order = sorted((r for r in rows if r["fits"]), key=lambda r: r["predicted_s"])
    if confirm is not None:
        return order[:confirm]
    if not order:
        return []
    bound = order[0]["predicted_s"] * (1.0 + margin)
    return [r for i, r in enumerate(order) if i < 3 or r["predicted_s"] <= bound]


def plan(factory, batch, loss_fn, global_batch, memory_budget=None, confirm=None, steps=3,
         optimizer=None, layouts=None, out=sys.stdout, margin=0.25):
    """Predicts every candidate layout, runs those that fit `memory_budget` bytes per rank
    and are predicted within `margin` of the fastest (at least three; with `confirm`, the
    `confirm` fastest predicted), prints the table on rank 0 and returns its rows (dicts:
    layout, predicted_s, measured_s or None, memory_bytes, fits). Collective over the job.
    factory(grid) builds the model as an nn.Sequential for a ParallelGrid (TP layers over
    grid.tp_set); batch(rows) returns (inputs, targets) of `rows` rows; loss_fn(out, y)."""
    to_confirm([], confirm, margin)   # ValueError on a bad confirm or margin, before any work
    n = core.size()
    if optimizer is None:
        def optimizer(params):
            return torch.optim.AdamW(params, lr=1e-3)
    layouts = layouts or candidates(n, global_batch)
    measured = {"p2p": _mean(_p2p_latency(n), "p2p"),
                "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count(), "opt": _step_seconds_per_byte(factory, optimizer)}
    rows = []
    for lay in layouts:
        predicted = predict(lay, factory, batch, loss_fn, global_batch, measured)
        if predicted is None:
            continue
        t, mem = predicted
        mem = int(allreduce(torch.tensor([float(mem)]), op=Max, name="plan.mem").item())
        rows.append({"layout": str(lay), "obj": lay, "predicted_s": t, "memory_bytes": mem,
                     "fits": memory_budget is None or mem <= memory_budget,
                     "measured_s": None})
    for r in to_confirm(rows, confirm, margin):
        r["measured_s"] = measure(r["obj"], factory, batch, loss_fn, global_batch, steps,
                                  optimizer)
    if core.rank() == 0:
        out.write(table(rows, memory_budget))
        out.flush()
    for r in rows:
        del r["obj"]
    return rows


def table(rows, memory_budget=None):
    """The rows as a Markdown table, fastest predicted first; the pick is the fastest
    measured."""
    done = [r for r in rows if r["measured_s"] is not None]
    pick = min(done, key=lambda r: r["measured_s"]) if done else None
    lines = ["| layout | predicted s/step | measured s/step | memory per rank | |",
             "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["predicted_s"]):
        lines.append("| %s | %.3f | %s | %.1f MiB%s | %s |" % (
            r["layout"], r["predicted_s"],
            "%.3f" % r["measured_s"] if r["measured_s"] is not None else "-",
            r["memory_bytes"] / 2.0 ** 20, "" if r["fits"] else " (over budget)",
            "chosen" if r is pick else ""))
    return "\n".join(lines) + "\n"


def _load(spec):
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise SystemExit("hora.torch.plan: expected FILE.py:FUNCTION, got %r" % spec)
    mod_spec = importlib.util.spec_from_file_location("hora_plan_spec", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return getattr(mod, name)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m hora.torch.plan", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("spec", help="FILE.py:FUNCTION returning dict(factory=, batch=, loss_fn=)")
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--memory-budget-mb", type=float, default=None)
    p.add_argument("--confirm", type=int, default=None,
                   help="layouts run to confirm (default: those predicted within --margin "
                   "of the fastest, at least 3)")
    p.add_argument("--margin", type=float, default=0.25,
                   help="confirm the layouts predicted within this fraction of the fastest")
    p.add_argument("--all", action="store_true", help="run every layout that fits")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    load = _load(args.spec)
    from . import init, shutdown
    init()
    spec = load()
    budget = None if args.memory_budget_mb is None else int(args.memory_budget_mb * 2 ** 20)
    plan(spec["factory"], spec["batch"], spec["loss_fn"], args.global_batch, budget,
         confirm=10 ** 6 if args.all else args.confirm, steps=args.steps, margin=args.margin)
    shutdown()


if __name__ == "__main__":
    main()
