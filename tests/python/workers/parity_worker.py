"""horovod.torch behaviours a script relies on, from Horovod's documented behaviour: names,
dtypes, error types, join, grouped and sparse collectives, DistributedOptimizer corner cases,
SyncBatchNorm. Every rank runs every case."""

import functools
import warnings

import torch

import hora.torch as hvd
import cases
from cases import case, check, close, raises


def R():
    return hvd.rank()


def N():
    return hvd.size()


def _healthy(tag):
    """Unnamed and named calls still match on every rank after an error."""
    y = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    close(y, torch.full((2,), float(N())), msg="healthy unnamed " + tag)
    g = hvd.allgather(torch.full((1,), float(R())))
    close(g, torch.arange(N()).double(), msg="healthy allgather " + tag)
    y = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="healthy." + tag)
    close(y, torch.full((2,), float(N())), msg="healthy named " + tag)


# Every public name of horovod.torch.mpi_ops (Horovod 0.28.1).
_MPI_OPS_NAMES = """init shutdown is_initialized start_timeline stop_timeline size local_size
    cross_size rank local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built
    gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built Average Sum
    Adasum Min Max Product is_homogeneous HorovodInternalError ProcessSet global_process_set
    add_process_set remove_process_set allreduce allreduce_async allreduce_ allreduce_async_
    grouped_allreduce grouped_allreduce_async grouped_allreduce_ grouped_allreduce_async_
    sparse_allreduce_async allgather allgather_async grouped_allgather grouped_allgather_async
    broadcast broadcast_async broadcast_ broadcast_async_ alltoall alltoall_async
    reducescatter reducescatter_async grouped_reducescatter grouped_reducescatter_async
    join barrier poll synchronize""".split()


@case
def horovod_names():
    import importlib
    mpi_ops = importlib.import_module("hora.torch.mpi_ops")
    missing = [n for n in _MPI_OPS_NAMES if not hasattr(mpi_ops, n)]
    check(not missing, "hora.torch.mpi_ops lacks %s" % missing)
    missing = [n for n in _MPI_OPS_NAMES + ["SyncBatchNorm", "DistributedOptimizer",
                                            "broadcast_parameters", "broadcast_object",
                                            "broadcast_optimizer_state", "allgather_object",
                                            "Compression"] if not hasattr(hvd, n)]
    check(not missing, "hora.torch lacks %s" % missing)
    for sub in ("functions", "optimizer", "compression", "sync_batch_norm"):
        importlib.import_module("hora.torch." + sub)


@case
def int16_every_collective():
    """int16 is native (HORA_INT16): values outside int8's range whose sums and products
    overflow int16 and wrap as torch's own int16 arithmetic does (the reference is torch's
    int16 add/mul, rank by rank)."""
    dt = torch.int16
    x = (torch.arange(6).reshape(3, 2) * 6000 + R()).to(dt)
    xs = [(torch.arange(6).reshape(3, 2) * 6000 + r).to(dt) for r in range(N())]
    y = hvd.allreduce(x, op=hvd.Sum)
    check(y.dtype == dt, "allreduce keeps int16")
    ref = functools.reduce(torch.add, xs)
    exact = sum(v.int() for v in xs)
    check(ref.dtype == dt and bool((exact > 32767).any()), "the sums overflow int16")
    check(torch.equal(y, ref), "sum %s != %s" % (y.tolist(), ref.tolist()))
    prod = functools.reduce(torch.mul, xs)
    got = hvd.allreduce(x, op=hvd.Product)
    check(torch.equal(got, prod), "product %s != %s" % (got.tolist(), prod.tolist()))
    check(torch.equal(hvd.allreduce(x, op=hvd.Max), torch.stack(xs).max(0)[0]), "max")
    check(torch.equal(hvd.allreduce(x, op=hvd.Min), torch.stack(xs).min(0)[0]), "min")
    z = x.clone()
    hvd.allreduce_(z, op=hvd.Sum)
    check(torch.equal(z, ref) and z.dtype == dt, "allreduce_ in place")
    g = hvd.allgather(x)
    check(g.dtype == dt and torch.equal(g, torch.cat(xs)), "allgather")
    b = hvd.broadcast(x, N() - 1)
    check(b.dtype == dt and torch.equal(b, xs[-1]), "broadcast")
    b = x.clone()
    hvd.broadcast_(b, 0)
    check(torch.equal(b, xs[0]), "broadcast_")
    a = torch.full((2 * N(), 1), R(), dtype=dt)
    out = hvd.alltoall(a)
    check(out.dtype == dt and torch.equal(out.flatten(), torch.arange(N()).repeat_interleave(2)
                                          .to(dt)), "alltoall %s" % out.flatten().tolist())
    rs = hvd.reducescatter(torch.ones(2 * N(), dtype=dt), op=hvd.Sum)
    check(rs.dtype == dt and torch.equal(rs, torch.full((2,), N(), dtype=dt)), "reducescatter")
    gs = hvd.grouped_allreduce([x, x], op=hvd.Sum)
    check(all(torch.equal(t, ref) for t in gs), "grouped_allreduce")


@case
def grouped_allgather_variable_rows():
    ts = [torch.full((R() + 1, 3), float(R())), torch.full((2,), float(R()) * 10)]
    out = hvd.grouped_allgather(ts)
    check(len(out) == 2, "a list of two")
    close(out[0], torch.cat([torch.full((r + 1, 3), float(r)) for r in range(N())]))
    close(out[1], torch.cat([torch.full((2,), r * 10.0) for r in range(N())]))
    h = hvd.grouped_allgather_async(ts, name="gag")
    out2 = hvd.synchronize(h)
    close(out2[0], out[0], msg="async")
    # autograd, Horovod's convention: the gradient averaged over ranks, this rank's rows
    t = torch.full((R() + 1, 2), 1.0, requires_grad=True)
    g, = hvd.grouped_allgather([t])
    (g * torch.arange(g.shape[0]).view(-1, 1).double().float()).sum().backward()
    start = sum(r + 1 for r in range(R()))
    close(t.grad, torch.arange(start, start + R() + 1).view(-1, 1).float().expand(-1, 2),
          msg="grouped allgather grad")


@case
def grouped_reducescatter_values_and_grad():
    ts = [torch.full((2 * N(), 3), float(R() + 1)), torch.full((N(),), 2.0)]
    out = hvd.grouped_reducescatter(ts, op=hvd.Sum)
    total = float(sum(r + 1 for r in range(N())))
    close(out[0], torch.full((2, 3), total))
    close(out[1], torch.full((1,), 2.0 * N()))
    avg = hvd.synchronize(hvd.grouped_reducescatter_async(ts, op=hvd.Average))
    close(avg[0], torch.full((2, 3), total / N()), msg="average")
    # Horovod's gradient: Sum multiplies by the set size, Average does not
    for op, factor in ((hvd.Sum, N()), (hvd.Average, 1)):
        t = torch.ones(2 * N(), 2, requires_grad=True)
        s, = hvd.grouped_reducescatter([t], op=op)
        s.sum().backward()
        close(t.grad, torch.full((2 * N(), 2), float(factor)), msg="grad op %d" % op)
        t = torch.ones(2 * N(), 2, requires_grad=True)
        hvd.reducescatter(t, op=op).sum().backward()
        close(t.grad, torch.full((2 * N(), 2), float(factor)), msg="reducescatter grad")


@case
def sparse_allreduce_matches_dense():
    torch.manual_seed(R())
    for i, rows in enumerate((5, 17)):
        t = torch.rand(rows, 4)
        t[t < 0.7] = 0
        t = t.to_sparse()
        dense = hvd.allreduce(t.to_dense(), name="dense.%d" % i)
        got = hvd.sparse_allreduce_async(t, name="sp.%d" % i, op=hvd.Average)()
        check(got.is_sparse, "result is sparse")
        close(got.to_dense(), dense, msg="average")
        got = hvd.sparse_allreduce_async(t, name="sps.%d" % i, op=hvd.Sum)()
        close(got.to_dense(), hvd.allreduce(t.to_dense(), op=hvd.Sum), msg="sum")


@case
def error_types():
    # a name in flight twice on this rank: ValueError at once; the first one completes.
    # Rank 0 goes first (the others wait at the barrier), so its "twice" is in flight.
    if R() == 0:
        h = hvd.allreduce_async(torch.ones(2), name="twice")
        raises(ValueError, hvd.allreduce_async, torch.ones(2), name="twice")
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(torch.ones(2), name="twice")
    close(hvd.synchronize(h), torch.ones(2))
    # the same bad argument on every rank: ValueError, before anything is submitted
    raises(ValueError, hvd.alltoall, torch.ones(N() + 1))
    raises(ValueError, hvd.alltoall, torch.ones(N() - 1 if N() > 1 else 2),
           torch.ones(N(), dtype=torch.int32))
    raises(ValueError, hvd.alltoall, torch.ones(N()), torch.ones(N(), dtype=torch.float32))
    raises(ValueError, hvd.reducescatter, torch.tensor(1.0))
    raises(ValueError, hvd.grouped_reducescatter, [torch.zeros(3, 1), torch.tensor(1.0)])
    raises(RuntimeError, hvd.reducescatter, torch.ones(N()), op=hvd.Adasum)
    raises(ValueError, hvd.allgather, torch.tensor(1.0))
    raises(ValueError, hvd.broadcast, torch.ones(2), "0")
    _healthy("local")
    # ranks that disagree: the runtime fails the call on every rank with a
    # HorovodInternalError (a RuntimeError), as Horovod's synchronize() does
    shape = (3,) if R() == 0 else (4,)
    e = raises(RuntimeError, hvd.allreduce, torch.ones(shape))
    check(isinstance(e, hvd.HorovodInternalError), type(e).__name__)
    e = raises(RuntimeError, hvd.allgather, torch.ones(2, 1 + (R() % 2)))
    check(isinstance(e, hvd.HorovodInternalError), type(e).__name__)
    raises(RuntimeError, hvd.broadcast, torch.ones(2), R())
    dt = torch.int32 if R() % 2 == 0 else torch.float32
    raises(RuntimeError, hvd.reducescatter, torch.ones(2 * N(), dtype=dt))
    raises(RuntimeError, hvd.alltoall, torch.ones(N(), dtype=dt))
    _healthy("mismatch")


@case
def join_semantics():
    for first in range(N()):
        if R() == first:
            ret = hvd.join()
        else:
            x = torch.full((3,), 6.0)
            # joined ranks give zeros; Average divides by the whole set's size
            close(hvd.allreduce(x, name="join.ar"), x * (N() - 1) / N(), msg="allreduce")
            raises(RuntimeError, hvd.allgather, torch.ones(2))
            raises(RuntimeError, hvd.broadcast, torch.ones(2), R(), name="join.bc")
            ret = hvd.join()
        if N() > 1:
            check(ret != first, "join returned the first rank to join (%d)" % first)
        rets = hvd.allgather_object(ret)
        check(rets == [ret] * N(), "join returned %s" % rets)
        _healthy("join.%d" % first)  # unnamed calls match again after the join


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def _same_on_every_rank(model, what):
    for name, p in model.state_dict().items():
        close(hvd.allreduce(p, op=hvd.Max, name="%s.max.%s" % (what, name)),
              hvd.allreduce(p, op=hvd.Min, name="%s.min.%s" % (what, name)), msg=what + name)


@case
def optimizer_without_named_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD([{"params": model[0].parameters()},
                           {"params": model[1].parameters()}], lr=0.1)
    opt = hvd.DistributedOptimizer(opt)
    names = opt._parameter_names
    check(len(names) == 4 and len(set(names.values())) == 4, "one name per parameter")
    every = hvd.allgather_object(sorted(names.values()))
    check(all(n == every[0] for n in every), "names differ across ranks: %s" % every)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(R() + 10)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    _same_on_every_rank(model, "nonamed")


@case
def broadcast_optimizer_state_without_state():
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1,
                                                    weight_decay=0.5),
                                   named_parameters=model.named_parameters())
    before = [p.detach().clone() for p in model.parameters()]
    check(len(opt.state_dict()["state"]) == 0, "no state yet")
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    check(len(opt.state_dict()["state"]) == len(before), "state created")
    for b, p in zip(before, model.parameters()):
        close(p, b, msg="parameters unchanged by the state creation")
        check(p.grad is not None and not p.grad.any(), "zero gradients, as Horovod leaves")


@case
def synchronize_then_step_warns_once():
    model = torch.nn.Linear(1, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    torch.nn.functional.mse_loss(model(torch.zeros(1, 1)), torch.ones(1, 1)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        opt.step()
    msgs = [str(w.message) for w in ws]
    check(len(msgs) == 1 and "optimizer.step() called without optimizer.skip_synchronize()"
          in msgs[0], "warnings: %s" % msgs)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(torch.zeros(1, 1)), torch.ones(1, 1)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
    check(not ws, "no warning inside skip_synchronize: %s" % [str(w.message) for w in ws])


@case
def sparse_gradients_through_optimizer():
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        inp = torch.tensor([[1, 2, 4, 5]]) if R() == 0 else torch.tensor([[1, 3, R() % 10]])
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        emb(inp).sum().backward()
        local = emb.weight.grad.to_dense().clone()
        expected = hvd.allreduce(local, name="sparse.ref.%d" % sparse_as_dense)
        opt.synchronize()
        check(emb.weight.grad.is_sparse, "the gradient stays sparse (SparseAdam needs it)")
        close(emb.weight.grad.to_dense(), expected, msg="sparse_as_dense=%s" % sparse_as_dense)
        with opt.skip_synchronize():
            opt.step()
        _same_on_every_rank(emb, "sparse%d" % sparse_as_dense)


@case
def optimizer_on_a_set_this_rank_is_not_in():
    if N() < 2:
        return
    ps = hvd.add_process_set([0])
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), process_set=ps)
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(R())
    model(torch.randn(3, 4)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()  # rank 0: a set of one; the others: the local step, no communication
    for b, g, p in zip(before, grads, model.parameters()):
        close(p, b - 0.5 * g, msg="plain local SGD step")
    hvd.remove_process_set(ps)


@case
def sync_batch_norm_matches_batch_norm_on_the_global_batch():
    torch.manual_seed(0)
    full = torch.randn(2 * N(), 4, 3) * 3 + 1
    mine = full[2 * R():2 * R() + 2].clone().requires_grad_()
    ref_in = full.clone().requires_grad_()
    sbn, bn = hvd.SyncBatchNorm(4), torch.nn.BatchNorm1d(4)
    out, ref = sbn(mine), bn(ref_in)
    close(out, ref[2 * R():2 * R() + 2], atol=1e-4, msg="output")
    close(sbn.running_mean, bn.running_mean, atol=1e-5, msg="running_mean")
    close(sbn.running_var, bn.running_var, atol=1e-4, msg="running_var")
    w = torch.randn(2 * N(), 4, 3)
    (out * w[2 * R():2 * R() + 2]).sum().backward()
    (ref * w).sum().backward()
    close(mine.grad, ref_in.grad[2 * R():2 * R() + 2], atol=1e-4, msg="input grad")
    close(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), bn.weight.grad, atol=1e-4, msg="w grad")
    close(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), bn.bias.grad, atol=1e-4, msg="b grad")
    sbn.eval()
    close(sbn(mine.detach()), torch.nn.functional.batch_norm(
        mine.detach(), sbn.running_mean, sbn.running_var, sbn.weight, sbn.bias, False),
        msg="eval uses the running statistics")


if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown)
