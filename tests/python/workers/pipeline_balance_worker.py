"""Pipeline.from_sequential(balance="profile") on a deliberately uneven model. Runs on each rank.

The model is two heavy modules (each applies its Linear HEAVY_REPS times) then light ones.
Every rank profiles, the ranks agree on one balance, the heavy modules land on different
stages, training with it equals the single-process run, and the step with the profiled
balance is timed against the even split in the same job (printed as a TIMING line, which the
pytest side collects; never asserted: the machine is shared)."""

import os
import statistics
import time

import torch
import torch.nn as nn

import hora.torch as hvd
from hora.torch.pipeline_balance import cost, even_times, in_flight, stage_memory
import cases
from cases import case, check, close, raises

D = int(os.environ.get("BALANCE_D", "256"))
HEAVY_REPS = int(os.environ.get("BALANCE_REPS", "12"))
M = 4            # micro-batches
MICRO = 16       # rows per micro-batch
STEPS = 2
TIMED_STEPS = int(os.environ.get("BALANCE_TIMED_STEPS", "3"))


class Heavy(nn.Module):
    """HEAVY_REPS x (Linear, tanh) with one weight: 1 module, HEAVY_REPS times the work."""

    def __init__(self, d, reps):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.reps = reps

    def forward(self, x):
        for _ in range(self.reps):
            x = torch.tanh(self.lin(x))
        return x


HEAVY = (0, 1)   # module indices of the heavy ones


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(Heavy(D, HEAVY_REPS), Heavy(D, HEAVY_REPS),
                         nn.Linear(D, D), nn.Tanh(), nn.Linear(D, D), nn.Tanh(),
                         nn.Linear(D, D), nn.Linear(D, 4))


def batch(step):
    g = torch.Generator().manual_seed(300 + step)
    return torch.randn(M * MICRO, D, generator=g), torch.randn(M * MICRO, 4, generator=g)


def mse(out, y):
    return ((out - y) ** 2).mean()


def init():
    hvd.init()
    torch.set_num_threads(1)


def step(pipe, opt, s):
    opt.zero_grad()
    x, y = batch(s)
    pipe.train_step(x if pipe.is_first else None, y if pipe.is_last else None, mse)
    opt.step()


def profiled(schedule="1f1b", **kwargs):
    x, _ = batch(0)
    return hvd.Pipeline.from_sequential(model(), balance="profile", sample=x[:MICRO],
                                        micro_batches=M, schedule=schedule, **kwargs)


def stage_of(balance, module):
    a = 0
    for s, k in enumerate(balance):
        if a <= module < a + k:
            return s
        a += k
    raise AssertionError("module %d beyond balance %s" % (module, balance))


@case
def profile_separates_the_heavy_modules_and_every_rank_agrees():
    pipe = profiled()
    b = pipe.balance
    check(sum(b) == 8 and len(b) == hvd.size() and min(b) >= 1, "balance %s" % b)
    check(stage_of(b, HEAVY[0]) != stage_of(b, HEAVY[1]),
          "balance %s keeps both heavy modules on one stage" % b)
    every = hvd.allgather(torch.tensor([b], dtype=torch.int64)).tolist()
    check(all(row == b for row in every), "ranks disagree: %s" % every)
    t = pipe.predicted_stage_s
    check(len(t) == hvd.size() and all(v > 0 for v in t), "predicted %s" % t)
    # the stage holding a heavy module is predicted the slowest
    heavy_stage = stage_of(b, HEAVY[0])
    check(max(t) == max(t[heavy_stage], t[stage_of(b, HEAVY[1])]), "predicted %s" % t)


class Slow(nn.Module):
    """A Linear whose forward first sleeps `ms` (slow on some ranks only)."""

    def __init__(self, ms):
        super().__init__()
        self.lin = nn.Linear(D, D)
        self.ms = ms

    def forward(self, x):
        time.sleep(self.ms / 1e3)
        return self.lin(x)


def _cuts_of(grid, slow):
    """cuts(**from_sequential's kwargs): the set of balances the job's pipelines chose for 4
    modules of which this rank times the `slow`-th as slow (collective)."""
    seq = nn.Sequential(*[Slow(20 if i == slow else 0) for i in range(4)])
    x = torch.randn(MICRO, D)

    def cuts(**kwargs):
        pipe = hvd.Pipeline.from_sequential(seq, grid.pp_set, balance="profile", sample=x,
                                            micro_batches=M, **kwargs)
        return {tuple(r) for r in hvd.allgather(torch.tensor([pipe.balance])).tolist()}
    return cuts


@case
def pipelines_of_a_grid_cut_alike_with_replicas():
    """PP 2 x DP 2: the two pipelines time different modules as slow and cut differently;
    with replicas=grid.dp_set every rank takes the first pipeline's profile and all cut alike
    (else the DP optimizer over a stage's copies sees different parameters)."""
    if hvd.size() != 4:
        return
    grid = hvd.make_grid(pp=2)
    cuts = _cuts_of(grid, slow=0 if grid.dp_rank == 0 else 3)
    apart = cuts()
    check(len(apart) == 2, "the premise: each pipeline cuts its own way, got %s" % apart)
    alike = cuts(replicas=grid.dp_set)
    check(len(alike) == 1, "the pipelines cut differently with replicas: %s" % alike)
    check(cuts(replicas=grid.stage_set) == alike, "stage_set is dp_set without TP")


@case
def tp_peers_cut_alike_with_the_stage_set():
    """TP 2 x PP 2: a stage's TP peers are in different pipelines (pp sets); each times a
    different module as slow, so alone they cut differently and would wait for each other's
    TP collectives for good; with replicas=grid.stage_set they cut alike."""
    if hvd.size() != 4:
        return
    grid = hvd.make_grid(tp=2, pp=2)
    check(sorted(hvd.allgather(torch.tensor([[hvd.rank()]]), process_set=grid.stage_set)
                 .flatten().tolist()) == ([0, 1] if grid.pp_rank == 0 else [2, 3]),
          "the stage set of rank %d" % hvd.rank())
    cuts = _cuts_of(grid, slow=0 if grid.tp_rank == 0 else 3)
    apart = cuts()
    check(len(apart) == 2, "the premise: each pipeline cuts its own way, got %s" % apart)
    alike = cuts(replicas=grid.stage_set)
    check(len(alike) == 1, "TP peers cut differently with the stage set: %s" % alike)


@case
def profile_training_equals_one_process():
    for schedule in ("1f1b", "gpipe"):
        pipe = profiled(schedule)
        opt = torch.optim.SGD(pipe.stage.parameters(), lr=0.05)
        for s in range(STEPS):
            step(pipe, opt, s)
        ref = model()
        ropt = torch.optim.SGD(ref.parameters(), lr=0.05)
        for s in range(STEPS):
            ropt.zero_grad()
            x, y = batch(s)
            mse(ref(x), y).backward()
            ropt.step()
        want = list(hvd.split_sequential(ref, hvd.size(), pipe.balance)[pipe.stage_index]
                    .parameters())
        got = list(pipe.stage.parameters())
        check(len(got) == len(want), "%d parameters, want %d" % (len(got), len(want)))
        for p, q in zip(got, want):
            close(p.detach(), q.detach(), atol=2e-5, rtol=1e-4, msg=schedule)


@case
def profile_leaves_the_model_untouched():
    m = model()
    before = [p.detach().clone() for p in m.parameters()]
    rng = torch.get_rng_state()
    pipe = hvd.Pipeline.from_sequential(m, balance="profile", sample=batch(0)[0][:MICRO],
                                        micro_batches=M)
    check(all(p.grad is None for p in pipe.stage.parameters()), "profiling left gradients")
    check(torch.equal(rng, torch.get_rng_state()), "profiling moved the RNG")
    for p, q in zip(m.parameters(), before):
        check(torch.equal(p.detach(), q), "profiling changed a parameter")


@case
def memory_limit_constrains_the_split():
    free = profiled()
    rows, S = free.profile, hvd.size()

    def stage_bytes(balance):
        out, a = [], 0
        for s, k in enumerate(balance):
            out.append(stage_memory(rows[a:a + k], in_flight("1f1b", s, S, M)))
            a += k
        return out

    # a limit of half the heaviest stage's bytes of the free split moves the cut (or fails
    # clearly when nothing fits); 1 byte fits nothing
    limit = max(stage_bytes(free.balance)) // 2
    try:
        capped = profiled(memory_limit=limit)
        check(max(stage_bytes(capped.balance)) <= limit,
              "balance %s exceeds %d bytes: %s" % (capped.balance, limit,
                                                   stage_bytes(capped.balance)))
        check(capped.balance != free.balance, "the limit did not move the cut")
    except ValueError as e:
        check("within memory_limit=%d bytes" % limit in str(e), str(e))
    raises(ValueError, profiled, memory_limit=1, contains="within memory_limit=1 bytes")
    raises(ValueError, hvd.Pipeline.from_sequential, model(), balance="profile",
           contains="needs sample=")
    raises(ValueError, hvd.Pipeline.from_sequential, model(), balance="fastest",
           contains="balance must be")
    raises(ValueError, hvd.Pipeline.from_sequential, model(), sample=batch(0)[0],
           contains="go with balance='profile'")


def light_model(seed=0):
    """Eight alike Linear modules: an even split by count is the best cut without a loss."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Linear(D, D) for _ in range(7)], nn.Linear(D, 4))


def heavy_loss(out, y):
    """An mse after 1.5 x HEAVY_REPS products by a D x D matrix: the loss alone costs
    several of light_model's modules."""
    h = out.repeat(1, D // 4)
    w = torch.eye(D) * 0.5
    for _ in range(3 * HEAVY_REPS // 2):
        h = torch.tanh(h @ w)
    return mse(h[:, :4], y)


@case
def profile_counts_the_loss_on_the_last_stage():
    x, y = batch(0)
    without = hvd.Pipeline.from_sequential(light_model(), balance="profile", sample=x[:MICRO],
                                           micro_batches=M)
    withl = hvd.Pipeline.from_sequential(light_model(), balance="profile",
                                         sample=(x[:MICRO], y[:MICRO]), loss_fn=heavy_loss,
                                         micro_batches=M)
    rows = withl.profile
    check(rows[-1]["loss_s"] > 0 and all(r["loss_s"] == 0 for r in rows[:-1]),
          "loss_s per module: %s" % [r["loss_s"] for r in rows])
    check(withl.balance[-1] < without.balance[-1],
          "the heavy loss did not move modules off the last stage: %s with it, %s without"
          % (withl.balance, without.balance))
    every = hvd.allgather(torch.tensor([withl.balance], dtype=torch.int64)).tolist()
    check(all(row == withl.balance for row in every), "ranks disagree: %s" % every)
    # the predicted last stage carries the loss
    check(withl.predicted_stage_s[-1] >= rows[-1]["loss_s"], "predicted %s" %
          withl.predicted_stage_s)
    raises(ValueError, hvd.Pipeline.from_sequential, light_model(), balance="profile",
           sample=x[:MICRO], loss_fn=heavy_loss, contains="needs sample=(inputs, targets)")
    raises(ValueError, hvd.Pipeline.from_sequential, light_model(), loss_fn=heavy_loss,
           contains="go with balance='profile'")


def timed_steps(pipe, n):
    opt = torch.optim.SGD(pipe.stage.parameters(), lr=0.0)
    step(pipe, opt, 0)     # warm-up
    out = []
    for s in range(n):
        t0 = time.perf_counter()
        step(pipe, opt, s)
        out.append(time.perf_counter() - t0)
    return out


@case
def profile_step_against_even_split():
    prof = profiled()
    even = hvd.Pipeline.from_sequential(model(), micro_batches=M)
    te, tp = [], []
    for _ in range(TIMED_STEPS):     # alternate, so that the machine's load hits both alike
        te += timed_steps(even, 1)
        tp += timed_steps(prof, 1)
    # the step of the job is its slowest rank's
    e = hvd.allreduce(torch.tensor([statistics.median(te)]), op=hvd.Max).item()
    p = hvd.allreduce(torch.tensor([statistics.median(tp)]), op=hvd.Max).item()
    costs = [cost(r) for r in prof.profile]
    predicted = max(prof.predicted_stage_s) / max(even_times(costs, hvd.size()))
    if hvd.rank() == 0:
        print("TIMING np=%d even %s %.1f ms profile %s %.1f ms ratio %.2f predicted %.2f"
              % (hvd.size(), even.balance, 1e3 * e, prof.balance, 1e3 * p, p / e, predicted),
              flush=True)
    check(predicted < 1.0, "the profile predicts no gain over the even split: %.2f" % predicted)


if __name__ == "__main__":
    import sys
    cases.run_all(init, hvd.shutdown, only=sys.argv[1:] or None)
