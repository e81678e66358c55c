"""hora.torch.ZeroOptimizer against one process. Runs on each rank.

Every rank also trains the same model on the whole global batch by itself (the reference)
and compares the parameters after a few steps: ZeRO 1, 2 and 3 with SGD (momentum, weight
decay) and Adam, on the global set and on a subset, with bf16 communication; checkpoints
gathered and per rank; memory per rank; bad use."""

import os

import torch
import torch.nn as nn

import hora.torch as hvd
import cases
from cases import case, check, close, raises

PAIR = None   # at 4 ranks: {0, 1} or {2, 3}, this rank's
STEPS = 3


def init():
    global PAIR
    n = int(os.environ["HORA_SIZE"])
    sets = [hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])] if n == 4 else []
    hvd.init(process_sets=sets)
    if sets:
        PAIR = sets[hvd.rank() // 2]


def model(seed=0):
    torch.manual_seed(seed)
    # odd sizes: chunks are padded; a LayerNorm and a bias-free layer as their own units
    return nn.Sequential(nn.Linear(6, 10), nn.LayerNorm(10), nn.Tanh(), nn.Linear(10, 7),
                         nn.ReLU(), nn.Linear(7, 3, bias=False))


def data(step, rows):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(rows, 6, generator=g), torch.randn(rows, 3, generator=g)


def make_opt(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)
    return torch.optim.Adam(params, lr=0.01)


def loss_of(m, x, y):
    return ((m(x) - y) ** 2).mean()


def reference(kind, steps, rows):
    m = model()
    opt = make_opt(kind, m.parameters())
    for s in range(steps):
        opt.zero_grad()
        x, y = data(s, rows)
        loss_of(m, x, y).backward()
        opt.step()
    return m, opt


def set_info(ps):
    ranks = ps.ranks if ps is not hvd.global_process_set else list(range(hvd.size()))
    return len(ranks), ranks.index(hvd.rank())


def train(stage, kind, ps=hvd.global_process_set, steps=STEPS, comm_dtype=None, m=None,
          zopt=None, start=0, **kw):
    n, r = set_info(ps)
    rows = 4 * n
    if m is None:
        m = model()
        zopt = hvd.ZeroOptimizer(make_opt(kind, m.parameters()), model=m, stage=stage,
                                 process_set=ps, comm_dtype=comm_dtype, **kw)
    for s in range(start, start + steps):
        zopt.zero_grad()
        x, y = data(s, rows)
        loss_of(m, x[r * 4:(r + 1) * 4], y[r * 4:(r + 1) * 4]).backward()
        zopt.step()
    return m, zopt


def compare(m, zopt, ref, atol=1e-5, what=""):
    with zopt.gathered():
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            close(p.detach(), q.detach(), atol=atol, rtol=1e-4, msg="%s %s" % (what, name))


def check_stage(stage, kind, ps=hvd.global_process_set, **kw):
    m, zopt = train(stage, kind, ps, **kw)
    ref, _ = reference(kind, STEPS, 4 * set_info(ps)[0])
    compare(m, zopt, ref, what="stage %d %s" % (stage, kind))


@case
def stage1_sgd():
    check_stage(1, "sgd")


@case
def stage1_adam():
    check_stage(1, "adam")


@case
def stage2_sgd():
    check_stage(2, "sgd")


@case
def stage2_adam():
    check_stage(2, "adam")


@case
def stage3_sgd():
    check_stage(3, "sgd")


@case
def stage3_adam():
    check_stage(3, "adam")


@case
def stage3_without_prefetch():
    check_stage(3, "adam", prefetch=False)


@case
def small_buckets():
    # a unit per parameter: many reducescatters in flight during backward
    check_stage(2, "adam", bucket_cap_mb=1e-6)


@case
def on_a_subset():
    if PAIR is None:
        return
    for stage in (1, 2, 3):
        check_stage(stage, "adam", PAIR)


@case
def bf16_communication():
    m, zopt = train(2, "sgd", comm_dtype=torch.bfloat16)
    ref, _ = reference("sgd", STEPS, 4 * hvd.size())
    compare(m, zopt, ref, atol=2e-2, what="bf16")
    m, zopt = train(1, "adam", comm_dtype=torch.float16)
    ref, _ = reference("adam", STEPS, 4 * hvd.size())
    compare(m, zopt, ref, atol=2e-2, what="fp16")


@case
def gradient_accumulation():
    # two backward passes per step, each on half the rows: the same as one pass
    n, r = hvd.size(), hvd.rank()
    for stage in (1, 2, 3):
        m = model()
        zopt = hvd.ZeroOptimizer(make_opt("sgd", m.parameters()), model=m, stage=stage)
        for s in range(STEPS):
            zopt.zero_grad()
            x, y = data(s, 4 * n)
            x, y = x[r * 4:(r + 1) * 4], y[r * 4:(r + 1) * 4]
            for h in (slice(0, 2), slice(2, 4)):
                (loss_of(m, x[h], y[h]) / 2).backward()
            zopt.step()
        ref, _ = reference("sgd", STEPS, 4 * n)
        compare(m, zopt, ref, what="accumulated stage %d" % stage)


@case
def gathered_state_dict_matches_plain_adam():
    ref, ref_opt = reference("adam", STEPS, 4 * hvd.size())
    for stage in (1, 2, 3):
        m, zopt = train(stage, "adam")
        sd = zopt.state_dict()            # gathered to rank 0
        if hvd.rank() != 0:
            check(sd is None, "only the root gets the gathered state")
            continue
        want = ref_opt.state_dict()
        check(sorted(sd["state"]) == sorted(want["state"]), "state keys %s" % sorted(sd["state"]))
        for i, s in want["state"].items():
            for k, v in s.items():
                close(sd["state"][i][k], v, atol=1e-5, msg="stage %d state %d %s" % (stage, i, k))
        check(sd["param_groups"][0]["params"] == want["param_groups"][0]["params"])
        check(sd["param_groups"][0]["lr"] == want["param_groups"][0]["lr"])


@case
def checkpoint_round_trips():
    # train 2 steps, save, rebuild, load, train 2 more == 4 uninterrupted steps
    n = hvd.size()
    ref, _ = reference("adam", 4, 4 * n)
    for stage in (1, 2, 3):
        for gather in (True, False):
            m, zopt = train(stage, "adam", steps=2)
            sd = zopt.state_dict(gather=gather, root=None)
            with zopt.gathered():
                params = {k: v.clone() for k, v in m.state_dict().items()}
            m2 = model(seed=7)
            m2.load_state_dict(params)
            z2 = hvd.ZeroOptimizer(make_opt("adam", m2.parameters()), model=m2, stage=stage)
            z2.load_state_dict(sd)
            train(stage, "adam", m=m2, zopt=z2, steps=2, start=2)
            compare(m2, z2, ref, what="stage %d gather=%s" % (stage, gather))


@case
def memory_falls_as_one_over_n():
    n = hvd.size()
    big = lambda: nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))  # noqa: E731
    total = sum(p.numel() for p in big().parameters()) * 4
    got = {}
    for stage in (1, 2, 3):
        torch.manual_seed(0)
        m = big()
        zopt = hvd.ZeroOptimizer(torch.optim.Adam(m.parameters()), model=m, stage=stage)
        m(torch.randn(2, 64)).sum().backward()
        zopt.step()
        got[stage] = zopt.step_memory
        after = zopt.memory_bytes()
        check(after["gradients"] == 0, "stage %d keeps %d gradient bytes after step()"
              % (stage, after["gradients"]))
    slack = 4 * n * 4   # padding: fewer than n elements per unit
    for stage in (1, 2, 3):
        mem = got[stage]
        check(abs(mem["optimizer_state"] - 2 * total / n) <= 2 * slack,
              "stage %d: Adam state %d bytes, want 2 x %d / %d" % (stage, mem["optimizer_state"],
                                                                  total, n))
    # stage 1 keeps whole gradients, 2 and 3 only their chunk; 3 keeps only its parameters
    check(got[1]["gradients"] >= total, "stage 1 gradients %d" % got[1]["gradients"])
    for stage in (2, 3):
        check(abs(got[stage]["gradients"] - total / n) <= slack,
              "stage %d: gradients %d bytes, want %d / %d" % (stage, got[stage]["gradients"],
                                                            total, n))
    check(got[1]["parameters"] >= total and got[2]["parameters"] >= total)
    check(abs(got[3]["parameters"] - total / n) <= slack,
          "stage 3: parameters %d bytes, want %d / %d" % (got[3]["parameters"], total, n))


@case
def mismatched_layout_is_an_error():
    torch.manual_seed(0)
    width = 5 + hvd.rank()   # every rank a different model
    m = nn.Linear(width, 3)
    e = raises(ValueError, hvd.ZeroOptimizer, torch.optim.SGD(m.parameters(), lr=0.1),
               stage=1, contains="layout differs")
    check("rank 0" in str(e) and "rank 1" in str(e), str(e))


@case
def bad_use_is_an_error():
    m = model()
    raises(ValueError, hvd.ZeroOptimizer, torch.optim.SGD(m.parameters(), lr=0.1), stage=4,
           contains="stage must be 1, 2 or 3")
    raises(ValueError, hvd.ZeroOptimizer, torch.optim.SGD(m.parameters(), lr=0.1), stage=3,
           contains="needs model=")
    raises(TypeError, hvd.ZeroOptimizer, m, contains="torch.optim.Optimizer")
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, 6)).sum().backward()
    opt.step()
    raises(ValueError, hvd.ZeroOptimizer, opt, contains="before its first step")
    raises(ValueError, hvd.ZeroOptimizer, torch.optim.SGD(m.parameters(), lr=0.1),
           comm_dtype=torch.int8, contains="comm_dtype")


class TiedLM(nn.Module):
    """The input embedding and the output head share one weight (as GPT ties them); the
    head keeps its own bias, so its forward gathers two units."""

    def __init__(self, direct=False):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(11, 6)
        self.ln = nn.LayerNorm(6)
        self.proj = nn.Linear(6, 6)
        self.head = nn.Linear(6, 11)
        self.head.weight = self.emb.weight
        self.direct = direct

    def forward(self, idx):
        h = torch.tanh(self.proj(self.ln(self.emb(idx))))
        if self.direct:   # the tied weight read outside its modules' forward
            return torch.nn.functional.linear(h, self.emb.weight)
        return self.head(h)


def tied_data(step, rows):
    g = torch.Generator().manual_seed(200 + step)
    return torch.randint(0, 11, (rows, 5), generator=g), torch.randint(0, 11, (rows, 5),
                                                                       generator=g)


def tied_loss(m, x, y):
    return nn.functional.cross_entropy(m(x).reshape(-1, 11), y.reshape(-1))


def tied_train(m, opt, steps, rank, halves=1):
    rows = 4 * hvd.size()
    for s in range(steps):
        opt.zero_grad()
        x, y = tied_data(s, rows)
        if rank is not None:
            x, y = x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]
        for h in range(halves):
            part = slice(h * len(x) // halves, (h + 1) * len(x) // halves)
            (tied_loss(m, x[part], y[part]) / halves).backward()
        opt.step()


@case
def tied_weights():
    # every stage (stage 3: one unit for the tied weight, gathered by emb and by head), SGD
    # and Adam, with and without prefetch, one or two backward passes per step: the
    # parameters after 3 steps equal one process's over the whole batch
    for kind in ("sgd", "adam"):
        ref = TiedLM()
        tied_train(ref, make_opt(kind, ref.parameters()), STEPS, None)
        for stage, prefetch, halves in ((1, True, 1), (2, True, 1), (3, True, 1),
                                        (3, False, 1), (3, True, 2)):
            m = TiedLM()
            zopt = hvd.ZeroOptimizer(make_opt(kind, m.parameters()), model=m, stage=stage,
                                     prefetch=prefetch)
            tied_train(m, zopt, STEPS, hvd.rank(), halves)
            check(m.head.weight is m.emb.weight, "the weight is still tied")
            compare(m, zopt, ref, what="tied stage %d %s prefetch=%s halves=%d" % (
                stage, kind, prefetch, halves))
            if stage == 3:   # the tied weight, ln, proj, head.bias
                check(len(zopt._units) == 4, "%d units" % len(zopt._units))


@case
def tied_weight_read_outside_its_modules_names_it():
    # stage 3 cannot gather a weight its owners' forward does not run for: every rank gets
    # an error naming it (not freed memory, not a hang); state_dict() outside gathered() too
    m = TiedLM(direct=True)
    zopt = hvd.ZeroOptimizer(make_opt("sgd", m.parameters()), model=m, stage=3)
    x, _ = tied_data(0, 4)
    e = raises(RuntimeError, m, x, contains="'emb.weight' (also 'head.weight')")
    check("gathered()" in str(e) and "'emb', 'head'" in str(e), str(e))
    raises(RuntimeError, m.state_dict, contains="'emb.weight'")
    with zopt.gathered():
        check(m(x).shape == (4, 5, 11), "inside gathered() the direct read works")
        check(sorted(m.state_dict()) == sorted(TiedLM().state_dict()), "state_dict keys")


@case
def lr_scheduler_drives_the_wrapped_optimizer():
    m = model()
    zopt = hvd.ZeroOptimizer(make_opt("sgd", m.parameters()), stage=2)
    sched = torch.optim.lr_scheduler.StepLR(zopt, step_size=1, gamma=0.5)
    train(2, "sgd", m=m, zopt=zopt, steps=1)
    sched.step()
    check(zopt.optimizer.param_groups[0]["lr"] == 0.05, str(zopt.optimizer.param_groups[0]))


if __name__ == "__main__":
    import sys
    cases.run_all(init, hvd.shutdown, only=sys.argv[1:] or None)
