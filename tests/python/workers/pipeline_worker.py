"""hora.torch.Pipeline against one process. Runs on each rank.

Every rank also trains the whole model on the whole batch alone (the reference) and checks
that its stage's parameters match after a few steps: GPipe and 1F1B with SGD and Adam over
the job's ranks (2 or 4 stages), fewer micro-batches than stages, PP 2 x DP (DP by
DistributedOptimizer and by ZeroOptimizer), and errors for bad use."""

import torch
import torch.nn as nn

import hora.torch as hvd
import cases
from cases import case, check, close, raises

STEPS = 3
M = 4          # micro-batches
ROWS = 8       # rows per data-parallel rank


def init():
    hvd.init()


def model(seed=0, extra=0):
    """7 modules (+ `extra` pairs of Linear(8, 8), Tanh before the head)."""
    torch.manual_seed(seed)
    mods = [nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh()]
    for _ in range(extra):
        mods += [nn.Linear(8, 8), nn.Tanh()]
    return nn.Sequential(*(mods + [nn.Linear(8, 3)]))


def batch(step, rows):
    g = torch.Generator().manual_seed(200 + step)
    return torch.randn(rows, 6, generator=g), torch.randn(rows, 3, generator=g)


def mse(out, y):
    return ((out - y) ** 2).mean()


def make_opt(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def reference(kind, rows, steps=STEPS, extra=0):
    m = model(extra=extra)
    opt = make_opt(kind, m.parameters())
    for s in range(steps):
        opt.zero_grad()
        x, y = batch(s, rows)
        mse(m(x), y).backward()
        opt.step()
    return m


def stage_params_match(pipe, ref, stages, what, chunks=1):
    """The stage holds modules [a, b) of the reference (split_sequential's even split), or
    with chunks its parts s, S+s, ... of the split into S * chunks."""
    parts = hvd.split_sequential(ref, stages * chunks)
    want = [p for part in parts[pipe.stage_index::stages] for p in part.parameters()]
    got = list(pipe.stage.parameters())
    check(len(got) == len(want), "%s: %d parameters, want %d" % (what, len(got), len(want)))
    for p, q in zip(got, want):
        close(p.detach(), q.detach(), atol=2e-5, rtol=1e-4, msg=what)


def train(kind, schedule, pp_set=hvd.global_process_set, dp_set=None, dp=1, dp_rank=0,
          micro=M, wrapper=None, steps=STEPS, chunks=1, extra=0):
    pipe = hvd.Pipeline.from_sequential(model(extra=extra), pp_set, micro_batches=micro,
                                        schedule=schedule, virtual_stages=chunks)
    opt = make_opt(kind, pipe.stage.parameters())
    if wrapper == "dp":
        opt = hvd.DistributedOptimizer(opt, named_parameters=pipe.stage.named_parameters(),
                                       process_set=dp_set, backward_passes_per_step=micro)
    elif wrapper == "zero":
        opt = hvd.ZeroOptimizer(opt, stage=1, process_set=dp_set)
    losses = []
    for s in range(steps):
        opt.zero_grad()
        x, y = batch(s, ROWS * dp)
        rows = slice(ROWS * dp_rank, ROWS * (dp_rank + 1))
        loss = pipe.train_step(x[rows] if pipe.is_first else None,
                               y[rows] if pipe.is_last else None, mse)
        losses.append(loss)
        opt.step()
    return pipe, losses


def check_pp(kind, schedule, micro=M, chunks=1, extra=0):
    pipe, losses = train(kind, schedule, micro=micro, chunks=chunks, extra=extra)
    stage_params_match(pipe, reference(kind, ROWS, extra=extra), hvd.size(),
                       "%s %s M=%d v=%d stage %d" % (kind, schedule, micro, chunks,
                                                     pipe.stage_index), chunks)
    if pipe.is_last:
        m = model(extra=extra)
        x, y = batch(0, ROWS)
        close(losses[0], mse(m(x), y), atol=1e-5, msg="first loss")
    else:
        check(all(l is None for l in losses), "loss only on the last stage")


@case
def gpipe_sgd():
    check_pp("sgd", "gpipe")


@case
def gpipe_adam():
    check_pp("adam", "gpipe")


@case
def one_f_one_b_sgd():
    check_pp("sgd", "1f1b")


@case
def one_f_one_b_adam():
    check_pp("adam", "1f1b")


@case
def fewer_micro_batches_than_stages():
    check_pp("adam", "1f1b", micro=1)
    check_pp("sgd", "gpipe", micro=2)


@case
def interleaved_sgd_and_adam():
    # v = 2 chunks per stage: 2S parts of a model long enough for them (4 ranks: 8 parts)
    check_pp("sgd", "interleaved", chunks=2, extra=2)
    check_pp("adam", "interleaved", chunks=2, extra=2, micro=2 * hvd.size())


@case
def interleaved_three_chunks_with_s_micro_batches():
    check_pp("sgd", "interleaved", micro=hvd.size(), chunks=3, extra=9)


@case
def interleaved_bad_use():
    raises(ValueError, hvd.Pipeline.from_sequential, model(extra=2), micro_batches=3,
           schedule="interleaved", virtual_stages=2, contains="multiple of the")
    raises(ValueError, hvd.Pipeline.from_sequential, model(extra=2), micro_batches=4,
           virtual_stages=2, contains="only it, takes several chunks")
    raises(ValueError, hvd.Pipeline.from_sequential, model(extra=2), micro_batches=4,
           schedule="interleaved", contains="only it, takes several chunks")
    raises(ValueError, hvd.Pipeline.from_sequential, model(extra=2), micro_batches=4,
           schedule="interleaved", virtual_stages=2, balance=[1] * hvd.size(),
           contains="2 chunks each")


@case
def interleaved_bubble_theory():
    pipe, _ = train("sgd", "interleaved", chunks=2, extra=2, steps=1)
    s = hvd.size()
    close(pipe.stats["ideal_bubble"], (s - 1.0) / (2 * M + s - 1), msg="ideal bubble")


@case
def header_once_per_step_and_link():
    """After a step's first micro-batch the activations go bare: one header per link and
    step, then M activations (counted at the sender, over 2 steps)."""
    import hora.torch.pipeline as pl
    sent, real = [], pl.isend

    def counting(tensor, dst, tag, process_set):
        sent.append(tag)
        return real(tensor, dst, tag, process_set)

    pl.isend = counting
    try:
        pipe, _ = train("sgd", "1f1b", steps=2)
    finally:
        pl.isend = real
    link = pipe.stage_index + 1
    headers = sent.count(pl.TAG_HEADER + 3 * link)
    acts = sent.count(pl.TAG_ACTIVATION + 3 * link)
    want = (0, 0) if pipe.is_last else (2, 2 * M)
    check((headers, acts) == want, "stage %d sent %d headers and %d activations, want %s"
          % (pipe.stage_index, headers, acts, want))


@case
def bubble_is_measured():
    pipe, _ = train("sgd", "1f1b", steps=1)
    st = pipe.stats
    check(set(st) >= {"step_s", "compute_s", "wait_s", "bubble", "ideal_bubble", "tasks",
                      "sends_s"}, str(st))
    check(0.0 <= st["bubble"] <= 1.0, str(st))
    s = hvd.size()
    close(st["ideal_bubble"], (s - 1.0) / (M + s - 1), msg="ideal bubble")
    # one row per task, in the schedule's order; their waits and the sends make wait_s
    from hora.torch.pipeline_schedule import tasks
    check([t[:3] for t in st["tasks"]] == tasks("1f1b", pipe.stage_index, s, M),
          str(st["tasks"]))
    close(sum(t[4] for t in st["tasks"]) + st["sends_s"], st["wait_s"], atol=1e-9,
          msg="waits")
    close(sum(t[5] for t in st["tasks"]), st["compute_s"], atol=1e-9, msg="compute")
    check(all(t[4] >= 0 and t[5] > 0 for t in st["tasks"]), str(st["tasks"]))


@case
def receives_are_posted_a_task_ahead():
    """Every receive but a step's first on a link (its shape comes with the header) is
    posted before the task that needs it starts, so it is matched while this stage
    computes; the n-th receive of a tag is consumed by the n-th task receiving it."""
    import hora.torch.pipeline as pl
    from hora.torch.pipeline_schedule import tasks
    pipe, _ = train("sgd", "1f1b", steps=1)
    posted, real = [], pl.irecv

    def counting(tensor, src, tag, process_set):
        posted.append((tag, len(pipe._tasks)))   # the step's tasks done when posted
        return real(tensor, src, tag, process_set)

    x, y = batch(0, ROWS)
    pl.irecv = counting
    try:
        pipe.train_step(x if pipe.is_first else None, y if pipe.is_last else None, mse)
    finally:
        pl.irecv = real
    n, st = hvd.size(), pipe.stage_index
    order = tasks("1f1b", st, n, M)
    users = {pl.TAG_ACTIVATION + 3 * st: [j for j, t in enumerate(order) if t[0] == "F"],
             pl.TAG_GRADIENT + 3 * (st + 1): [j for j, t in enumerate(order) if t[0] == "B"]}
    got = {tag: [done for t, done in posted if t == tag] for tag in users}
    if not pipe.is_first:
        acts = got[pl.TAG_ACTIVATION + 3 * st]
        check(len(acts) == M, "stage %d posted %d activation receives" % (st, len(acts)))
        late = [(n_, done, j) for n_, (done, j) in enumerate(zip(acts, users[
            pl.TAG_ACTIVATION + 3 * st])) if n_ > 0 and done >= j]
        check(not late, "stage %d: activation receives posted when their task began: %s"
              % (st, late))
    if not pipe.is_last:
        grads = got[pl.TAG_GRADIENT + 3 * (st + 1)]
        check(len(grads) == M, "stage %d posted %d gradient receives" % (st, len(grads)))
        late = [(done, j) for done, j in zip(grads, users[pl.TAG_GRADIENT + 3 * (st + 1)])
                if done >= j]
        check(not late, "stage %d: gradient receives posted when their task began: %s"
              % (st, late))


GRID = {}


def pp2_grid():
    if "g" not in GRID:
        GRID["g"] = hvd.make_grid(pp=2)
    return GRID["g"]


def check_pp_dp(kind, schedule, wrapper):
    g = pp2_grid()
    pipe, _ = train(kind, schedule, pp_set=g.pp_set, dp_set=g.dp_set, dp=g.dp,
                    dp_rank=g.dp_rank, wrapper=wrapper)
    check(pipe.stage_index == g.pp_rank, "stage %d, grid %r" % (pipe.stage_index, g))
    stage_params_match(pipe, reference(kind, ROWS * g.dp), 2,
                       "pp2 x dp%d %s %s %s" % (g.dp, kind, schedule, wrapper))


@case
def pp2_x_dp_distributed_optimizer():
    check_pp_dp("adam", "1f1b", "dp")
    check_pp_dp("sgd", "gpipe", "dp")


@case
def pp2_x_dp_zero():
    check_pp_dp("adam", "1f1b", "zero")


@case
def stage_count_must_match_the_set():
    n = hvd.size()
    raises(ValueError, hvd.Pipeline, nn.Linear(2, 2), num_stages=n + 1,
           contains="%d stages, but the process set" % (n + 1))
    raises(ValueError, hvd.Pipeline.from_sequential, model(), balance=[7],
           contains="gives 1 stages, but the process set")
    raises(ValueError, hvd.Pipeline, nn.Linear(2, 2), schedule="zigzag", contains="schedule")
    raises(ValueError, hvd.split_sequential, model(), 2, balance=[3, 3],
           contains="add up to the 7 modules")


@case
def batch_not_divisible_is_an_error():
    pipe = hvd.Pipeline.from_sequential(model(), micro_batches=3)
    x, y = batch(0, ROWS)
    # every stage checks the batch it was given before sending anything
    if pipe.is_first:
        raises(ValueError, pipe.train_step, x, None, mse, contains="not divisible into 3")
    elif pipe.is_last:
        raises(ValueError, pipe.train_step, None, y, mse, contains="not divisible into 3")


@case
def mismatched_layout_is_an_error():
    e = raises(ValueError, hvd.Pipeline.from_sequential, model(),
               micro_batches=2 + hvd.rank(), contains="layout differs")
    check("stage 0: 2 micro-batches" in str(e) and "stage 1: 3 micro-batches" in str(e), str(e))


if __name__ == "__main__":
    import sys
    cases.run_all(init, hvd.shutdown, only=sys.argv[1:] or None)
