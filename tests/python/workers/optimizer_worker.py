"""DistributedOptimizer and the broadcast helpers against single-process references.

Each rank trains on its shard; the reference is computed in this same process by
simulating every rank's shard (the averaged gradient of N shards = the full-batch gradient
when shards have equal size)."""

import contextlib
import copy
import os
import sys
import warnings

import torch

import hora.torch as hvd
import cases
from adasum_reference import adasum_reference
from cases import case, check, close, raises

PER_RANK = 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        self.b = torch.nn.Linear(8, 3)
        self.extra = torch.nn.Linear(6, 3)  # used only when use_extra

    def forward(self, x, use_extra=True):
        out = self.b(torch.tanh(self.a(x)))
        if use_extra:
            out = out + self.extra(x)
        return out


def data(step, micro, rank):
    g = torch.Generator().manual_seed(1000 * step + 100 * micro + rank)
    return torch.randn(PER_RANK, 6, generator=g), torch.randn(PER_RANK, 3, generator=g)


def loss_fn(model, x, y, use_extra=True):
    return torch.nn.functional.mse_loss(model(x, use_extra), y)


def compare(make_opt, steps=4, bpps=1, op=hvd.Average, uses_extra=lambda r: True,
            atol=1e-5, set_to_none=False, **dist_kwargs):
    torch.manual_seed(7)
    model = Net()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=bpps, op=op, **dist_kwargs)
    ref_opt = make_opt(ref.parameters())
    n, r = hvd.size(), hvd.rank()
    for step in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        for k in range(bpps):
            x, y = data(step, k, r)
            loss_fn(model, x, y, uses_extra(r)).backward()
        opt.step()
        ref_opt.zero_grad()
        for k in range(bpps):
            for s in range(n):
                x, y = data(step, k, s)
                scale = 1.0 / n if op == hvd.Average else 1.0
                (loss_fn(ref, x, y, uses_extra(s)) * scale).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p.detach(), q.detach(), atol=atol, rtol=atol, msg=name)
    return model, opt


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


@case
def sgd_matches_full_batch():
    compare(sgd)


@case
def adam_matches_full_batch():
    compare(adam, atol=2e-5)


@case
def backward_passes_per_step_2():
    compare(sgd, bpps=2)


@case
def op_sum():
    compare(lambda p: torch.optim.SGD(p, lr=0.02), op=hvd.Sum)


@case
def gradient_predivide_factor():
    compare(sgd, gradient_predivide_factor=2.0)


@case
def fp16_compression():
    compare(sgd, compression=hvd.Compression.fp16, atol=2e-3)


@case
def groups():
    compare(sgd, groups=2)
    torch.manual_seed(0)
    compare(sgd, groups=3, num_groups=0)


@case
def unused_parameters():
    # rank 0 never uses `extra`: its hooks never fire there, synchronize still submits zeros
    compare(sgd, uses_extra=lambda r: r != 0)


@case
def no_named_parameters():
    torch.manual_seed(3)
    model = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = data(0, 0, hvd.rank())
    loss_fn(model, x, y).backward()
    opt.step()
    every = hvd.allgather(model.a.weight.detach().reshape(1, -1))
    close(every[0], every[-1])


@case
def adasum_combines_the_ranks_changes():
    # Adam on each rank's own shard; the parameters' changes are combined by Adasum (Horovod's
    # _DistributedAdasumOptimizer). The reference replays every rank's local step here.
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(7)
    model = Net()
    start = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(adam(model.parameters()),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    x, y = data(0, 0, r)
    loss_fn(model, x, y).backward()
    if n & (n - 1):
        raises(ValueError, opt.step, contains="power-of-2")
        return
    opt.step()
    deltas = []
    for s in range(n):
        local = copy.deepcopy(start)
        local_opt = adam(local.parameters())
        xs, ys = data(0, 0, s)
        loss_fn(local, xs, ys).backward()
        local_opt.step()
        deltas.append([(q.detach() - p0.detach()).reshape(-1)
                       for q, p0 in zip(local.parameters(), start.parameters())])
    for i, (p, p0) in enumerate(zip(model.parameters(), start.parameters())):
        want = p0.detach().double().reshape(-1) + adasum_reference([d[i] for d in deltas])
        close(p.detach().reshape(-1), want, atol=1e-6, msg="parameter %d" % i)


@case
def name_errors():
    model = Net()
    named = list(model.named_parameters())
    raises(ValueError, hvd.DistributedOptimizer, sgd(model.parameters()),
           named_parameters=[("same", p) for _, p in named], contains="unique")
    raises(ValueError, hvd.DistributedOptimizer, sgd(model.parameters()),
           named_parameters=named[:2], contains="not named")
    raises(ValueError, hvd.DistributedOptimizer, sgd(model.parameters()),
           op=hvd.Sum, gradient_predivide_factor=2.0)


@case
def zero_grad_in_flight():
    model = Net()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters())
    x, y = data(0, 0, hvd.rank())
    loss_fn(model, x, y).backward()
    raises(AssertionError, opt.zero_grad, contains="zero_grad() was called after")
    opt.step()
    opt.zero_grad()
    loss_fn(model, x, y).backward()
    e = raises(Exception, lambda: loss_fn(model, x, y).backward(),
               contains="backward_passes_per_step")
    opt.synchronize()
    opt.zero_grad()


@case
def skip_synchronize_with_clipping():
    torch.manual_seed(5)
    model = Net()
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                   named_parameters=model.named_parameters())
    ref_opt = sgd(ref.parameters())
    x, y = data(0, 0, hvd.rank())
    loss_fn(model, x, y).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
    check(not caught, "no warning inside skip_synchronize: %s" % [str(w.message) for w in caught])
    for s in range(hvd.size()):
        xs, ys = data(0, 0, s)
        (loss_fn(ref, xs, ys) / hvd.size()).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.detach(), q.detach())


def _state_digest(opt):
    out = [sorted((k, v) for k, v in g.items() if k != "params" and not torch.is_tensor(v))
           for g in opt.param_groups]
    for p in [p for g in opt.param_groups for p in g["params"]]:
        st = opt.state.get(p, {})
        out.append(sorted((k, float(v.double().sum()) if torch.is_tensor(v) else v)
                          for k, v in st.items()))
    return repr(out)


@case
def broadcast_optimizer_state_existing():
    torch.manual_seed(11 + hvd.rank())
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1),
                           betas=(0.8 + 0.01 * hvd.rank(), 0.99))
    for i in range(hvd.rank() + 1):
        opt.zero_grad()
        loss_fn(model, *data(i, 0, hvd.rank())).backward()
        opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    digests = hvd.allgather_object(_state_digest(opt))
    check(all(d == digests[0] for d in digests), "state differs: %s" % digests)
    check(opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.8, 0.99))


@case
def broadcast_optimizer_state_fresh():
    torch.manual_seed(21 + hvd.rank())
    model = Net()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1), momentum=0.9,
                        weight_decay=0.1), named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for p, q in zip(model.parameters(), before):
        close(p.detach(), q, msg="parameters changed by state init")
    # As Horovod leaves them: a parameter that had no gradient keeps the zeros of the dummy step.
    check(all(p.grad is not None and not p.grad.any() for p in model.parameters()),
          "zero gradients after the state was created")
    check(opt.param_groups[0]["lr"] == 0.1, "lr from root")
    for step in range(2):
        opt.zero_grad()
        loss_fn(model, *data(step, 0, hvd.rank())).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    for s in range(hvd.size()):
        close(every[s], every[0], msg="rank %d" % s)
    digests = hvd.allgather_object(_state_digest(opt))
    check(all(d == digests[0] for d in digests), "state differs")


@case
def broadcast_optimizer_state_adam_fresh():
    model = Net()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(),
                                                    lr=0.001 * (hvd.rank() + 1)))
    hvd.broadcast_optimizer_state(opt, root_rank=hvd.size() - 1)
    check(abs(opt.param_groups[0]["lr"] - 0.001 * hvd.size()) < 1e-12)
    check(len(opt.state) == len(list(model.parameters())), "state created")


@contextlib.contextmanager
def bucket_cap(mb):
    """HORA_BUCKET_CAP_MB while DistributedOptimizers are made (it is read there)."""
    old = os.environ.get("HORA_BUCKET_CAP_MB")
    os.environ["HORA_BUCKET_CAP_MB"] = str(mb)
    try:
        yield
    finally:
        if old is None:
            del os.environ["HORA_BUCKET_CAP_MB"]
        else:
            os.environ["HORA_BUCKET_CAP_MB"] = old


TINY_MB = 0.0001  # 104 bytes: Net's 6 parameters land in 4 buckets


def n_buckets(opt):
    return len(opt._reducer.buckets) if opt._reducer is not None else 0


@case
def bucket_path_is_default():
    _, opt = compare(sgd, steps=1)
    check(n_buckets(opt) == 1, "one bucket by default, got %d" % n_buckets(opt))
    _, opt = compare(sgd, steps=1, compression=hvd.Compression.fp16, atol=2e-3)
    check(opt._reducer is None, "fp16 compression takes the per-tensor path")
    _, opt = compare(sgd, steps=1, groups=2)
    check(opt._reducer is None, "explicit groups take the per-tensor path")
    with bucket_cap(0):
        _, opt = compare(sgd, steps=1)
    check(opt._reducer is None, "HORA_BUCKET_CAP_MB=0 takes the per-tensor path")
    with bucket_cap("lots"):
        raises(ValueError, hvd.DistributedOptimizer, sgd(Net().parameters()),
               contains="HORA_BUCKET_CAP_MB")


@case
def per_tensor_path():
    with bucket_cap(0):
        compare(sgd)
        compare(sgd, bpps=2)
        compare(sgd, uses_extra=lambda r: r != 0)
        compare(sgd, set_to_none=True)
        compare(lambda p: torch.optim.SGD(p, lr=0.02), op=hvd.Sum)


@case
def buckets_several():
    with bucket_cap(TINY_MB):
        model, opt = compare(sgd)
        check(n_buckets(opt) >= 4, "expected several buckets, got %d" % n_buckets(opt))
        # reverse registration order: the last parameter opens bucket 0
        last = list(model.parameters())[-1]
        check(opt._reducer.buckets[0].params[0] is last, "bucket 0 starts with the last param")
        for p in model.parameters():
            view = opt._reducer.view_of[p]
            check(p.grad.data_ptr() == view.data_ptr(), "p.grad is its bucket slot")
        compare(adam, atol=2e-5)
        compare(lambda p: torch.optim.SGD(p, lr=0.02), op=hvd.Sum)
        compare(sgd, gradient_predivide_factor=2.0)


@case
def buckets_unused_parameters():
    with bucket_cap(TINY_MB):
        compare(sgd, uses_extra=lambda r: r != 0)
    compare(sgd, uses_extra=lambda r: r == hvd.size() - 1)
    # no rank uses `extra`: it still gets a (zero) gradient, as in Horovod
    with bucket_cap(TINY_MB):
        model, opt = compare(sgd, steps=2, uses_extra=lambda r: False)
    for p in model.extra.parameters():
        check(p.grad is not None and float(p.grad.abs().sum()) == 0.0, "zero grad for unused")


@case
def buckets_backward_passes_per_step_2():
    with bucket_cap(TINY_MB):
        compare(sgd, bpps=2)
        compare(sgd, bpps=2, set_to_none=True, uses_extra=lambda r: r != 0)
    compare(sgd, bpps=3, steps=3)


@case
def buckets_set_to_none():
    compare(sgd, set_to_none=True)
    with bucket_cap(TINY_MB):
        model, opt = compare(adam, set_to_none=True, atol=2e-5)
    for p in model.parameters():
        check(p.grad.data_ptr() == opt._reducer.view_of[p].data_ptr(), "re-pointed to slot")


@case
def buckets_full_batch_equals_shards():
    # plain SGD: one process on the whole batch == N ranks on 1/N of it each
    n, r = hvd.size(), hvd.rank()
    g = torch.Generator().manual_seed(99)
    x, y = torch.randn(n * PER_RANK, 6, generator=g), torch.randn(n * PER_RANK, 3, generator=g)
    torch.manual_seed(17)
    model = Net()
    ref = copy.deepcopy(model)
    with bucket_cap(TINY_MB):
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
    check(n_buckets(opt) >= 4, "bucket path with several buckets")
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss_fn(model, x[r * PER_RANK:(r + 1) * PER_RANK], y[r * PER_RANK:(r + 1) * PER_RANK]
                ).backward()
        opt.step()
        ref_opt.zero_grad()
        loss_fn(ref, x, y).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p.detach(), q.detach(), msg=name)


@case
def buckets_zero_grad_in_flight():
    with bucket_cap(TINY_MB):
        model = Net()
        opt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                       named_parameters=model.named_parameters())
    x, y = data(0, 0, hvd.rank())
    loss_fn(model, x, y).backward()
    raises(AssertionError, opt.zero_grad, contains="zero_grad() was called after")
    opt.step()
    opt.zero_grad()
    loss_fn(model, x, y).backward()
    raises(Exception, lambda: loss_fn(model, x, y).backward(),
           contains="backward_passes_per_step")
    opt.synchronize()
    opt.zero_grad()


if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown, only=sys.argv[1:])
