"""torch.distributed on the "hora" backend (torch 2.x): every collective against a reference
computed here from what each rank contributes, sync and async, on the default group and on a
subset; DDP, ZeroRedundancyOptimizer and FSDP2 (fully_shard) on "hora" against the same on a
gloo group of the same job (parameters equal); Work timeouts; unsupported ops. Run through
horarun. (FSDP1 needs an accelerator in torch 2.x: a GPU test.)"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import cases
from cases import case, check, close, raises

R = N = None
GLOO = None
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]


def contribution(rank, shape, dtype, seed=0):
    """What `rank` puts in: small values, exact in every dtype and under every op."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(1, 4, shape, generator=g).to(dtype)


def everyone(shape, dtype, seed=0, ranks=None):
    return [contribution(r, shape, dtype, seed) for r in (ranks or range(N))]


REFERENCE = {
    dist.ReduceOp.SUM: lambda ts: torch.stack(ts).sum(0),
    dist.ReduceOp.PRODUCT: lambda ts: torch.stack(ts).prod(0),
    dist.ReduceOp.MIN: lambda ts: torch.stack(ts).min(0).values,
    dist.ReduceOp.MAX: lambda ts: torch.stack(ts).max(0).values,
}


@case
def all_reduce_every_op_and_dtype():
    for i, dtype in enumerate(DTYPES):
        for j, (op, ref) in enumerate(REFERENCE.items()):
            t = contribution(R, (3, 5), dtype, seed=10 * i + j)
            dist.all_reduce(t, op=op)
            close(t, ref(everyone((3, 5), dtype, seed=10 * i + j)), msg="%s %s" % (dtype, op))
            check(t.dtype == dtype)
    t = contribution(R, (7,), torch.float32, seed=99)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    close(t, torch.stack(everyone((7,), torch.float32, seed=99)).mean(0), msg="AVG")


@case
def all_reduce_async_work_and_future():
    ts = [contribution(R, (1000,), torch.float32, seed=s) for s in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for s, (w, f, t) in enumerate(zip(works, futs, ts)):
        check(w.wait() is True)
        check(w.is_completed() and w.is_success())
        got = f.wait()
        check(isinstance(got, list) and got[0] is t, "the future holds the output tensors")
        close(t, torch.stack(everyone((1000,), torch.float32, seed=s)).sum(0))


@case
def futures_complete_without_wait():
    # DDP's reducer waits on the future only: the completer must finish the Work by itself.
    ts = [contribution(R, (100,), torch.float32, seed=20 + s) for s in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    chained = works[-1].get_future().then(lambda f: f.value()[0].sum().item())
    for s, w in enumerate(works):
        got = w.get_future().wait()
        check(got[0] is ts[s], "the future holds the output tensor")
        close(ts[s], torch.stack(everyone((100,), torch.float32, seed=20 + s)).sum(0))
    check(abs(chained.wait() - float(ts[-1].sum())) < 1e-3, "then() runs on the result")
    # A future asked for after wait() finished the Work is settled at once.
    t = contribution(R, (5,), torch.float32, seed=30)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    check(w.get_future().done() and w.get_future().wait()[0] is t)


@case
def all_reduce_non_contiguous_and_empty():
    base = contribution(R, (4, 6), torch.float64, seed=5)
    view = base.t()  # not contiguous
    dist.all_reduce(view)
    close(base, torch.stack(everyone((4, 6), torch.float64, seed=5)).sum(0))
    e = torch.zeros(0)
    dist.all_reduce(e)
    check(e.numel() == 0)


@case
def all_reduce_coalesced():
    ts = [contribution(R, (k + 1,), torch.float32, seed=20 + k) for k in range(5)]
    dist.all_reduce_coalesced(ts)
    for k, t in enumerate(ts):
        close(t, torch.stack(everyone((k + 1,), torch.float32, seed=20 + k)).sum(0))


@case
def broadcast_from_every_root():
    for root in range(N):
        t = contribution(R, (9,), torch.int64, seed=30 + root)
        dist.broadcast(t, src=root)
        close(t, contribution(root, (9,), torch.int64, seed=30 + root))


@case
def all_gather_and_into_tensor():
    outs = [torch.zeros(2, 3) for _ in range(N)]
    dist.all_gather(outs, contribution(R, (2, 3), torch.float32, seed=40))
    for r, o in enumerate(outs):
        close(o, contribution(r, (2, 3), torch.float32, seed=40))
    out = torch.zeros(N * 4, dtype=torch.int32)
    dist.all_gather_into_tensor(out, contribution(R, (4,), torch.int32, seed=41))
    close(out, torch.cat(everyone((4,), torch.int32, seed=41)))
    objs = [None] * N
    dist.all_gather_object(objs, {"rank": R, "name": "r%d" % R})
    check(objs == [{"rank": r, "name": "r%d" % r} for r in range(N)], objs)


@case
def repeated_calls_run_on_the_steady_path():
    # A loop of the same calls (five kinds), three in flight at once (async), each signature
    # used more than the 8 names it takes: results right every time, and once learned they
    # run without the coordinator. (Allreduces in flight together are fused by the
    # coordinator, and fused buckets are not learned: one at a time here.)
    import hora
    before = hora.steady_stats(0)["fast"]
    for i in range(40):
        a = contribution(R, (6,), torch.float32, seed=60 + i)
        w = dist.all_reduce(a, async_op=True)
        g = torch.zeros(N * 4, dtype=torch.float64)
        wg = dist.all_gather_into_tensor(g, contribution(R, (4,), torch.float64, seed=70 + i),
                                         async_op=True)
        b = contribution(R, (5,), torch.int64, seed=80 + i)
        dist.broadcast(b, src=N - 1)
        w.wait()
        wg.wait()
        m = contribution(R, (2, 2), torch.float32, seed=90 + i)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        rs = torch.zeros(3)
        dist.reduce_scatter_tensor(rs, contribution(R, (N * 3,), torch.float32, seed=95 + i))
        whole = torch.stack(everyone((N * 3,), torch.float32, seed=95 + i)).sum(0)
        close(rs, whole[R * 3:R * 3 + 3])
        x = torch.zeros(N * 2)
        dist.all_to_all_single(x, contribution(R, (N * 2,), torch.float32, seed=97 + i))
        sent = everyone((N * 2,), torch.float32, seed=97 + i)
        close(x, torch.cat([t[R * 2:R * 2 + 2] for t in sent]))
        close(a, torch.stack(everyone((6,), torch.float32, seed=60 + i)).sum(0))
        close(g, torch.cat(everyone((4,), torch.float64, seed=70 + i)))
        close(b, contribution(N - 1, (5,), torch.int64, seed=80 + i))
        close(m, torch.stack(everyone((2, 2), torch.float32, seed=90 + i)).amax(0))
    fast = hora.steady_stats(0)["fast"] - before
    # Each name (8 per signature) is learned after 3 plans: from step 24 on, all 6 calls.
    check(fast >= 6 * (40 - 8 * 3 - 2), "%d of 240 calls ran on the steady path" % fast)


@case
def reduce_scatter_sum_and_max():
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        parts = [contribution(R, (3,), torch.float32, seed=50 + d) for d in range(N)]
        out = torch.zeros(3)
        dist.reduce_scatter(out, parts, op=op)
        close(out, REFERENCE[op]([contribution(r, (3,), torch.float32, seed=50 + R)
                                  for r in range(N)]), msg=str(op))
        whole = contribution(R, (N * 2,), torch.float64, seed=60)
        out = torch.zeros(2, dtype=torch.float64)
        dist.reduce_scatter_tensor(out, whole, op=op)
        close(out, REFERENCE[op](everyone((N * 2,), torch.float64, seed=60))[2 * R:2 * R + 2])


@case
def all_to_all_even_and_uneven():
    inp = torch.arange(N * 2, dtype=torch.float32) + 100 * R
    out = torch.zeros(N * 2)
    dist.all_to_all_single(out, inp)
    close(out, torch.cat([torch.arange(2 * R, 2 * R + 2, dtype=torch.float32) + 100 * s
                          for s in range(N)]))
    # rank s sends s+d+1 elements to rank d
    send = [torch.full((R + d + 1,), float(10 * R + d)) for d in range(N)]
    recv = [torch.zeros(s + R + 1) for s in range(N)]
    dist.all_to_all(recv, send)
    for s, t in enumerate(recv):
        close(t, torch.full((s + R + 1,), float(10 * s + R)))
    in_splits = [R + d + 1 for d in range(N)]
    out_splits = [s + R + 1 for s in range(N)]
    out = torch.zeros(sum(out_splits))
    dist.all_to_all_single(out, torch.cat(send), out_splits, in_splits)
    close(out, torch.cat(recv))
    # An output of another shape (filled in place), a non-contiguous one (copied into), one
    # of the wrong size (an error naming both sizes; the job goes on).
    grid = torch.zeros(N, 2)
    dist.all_to_all_single(grid, inp)
    close(grid.reshape(-1), torch.cat([torch.arange(2 * R, 2 * R + 2, dtype=torch.float32) +
                                       100 * s for s in range(N)]))
    strided = torch.zeros(2, N).t()
    dist.all_to_all_single(strided, inp)
    close(strided, grid)
    try:
        dist.all_to_all_single(torch.zeros(N * 2 + 1), inp)
        check(False, "an output of the wrong size must fail")
    except RuntimeError as e:
        check("into an output of %d" % (N * 2 + 1) in str(e), str(e))


@case
def barrier_gather_scatter_reduce():
    dist.barrier()
    root = N - 1
    got = [torch.zeros(3) for _ in range(N)] if R == root else None
    dist.gather(contribution(R, (3,), torch.float32, seed=70), got, dst=root)
    if R == root:
        for r, g in enumerate(got):
            close(g, contribution(r, (3,), torch.float32, seed=70))
    out = torch.zeros(4)
    parts = [torch.full((4,), float(d)) for d in range(N)] if R == 0 else None
    dist.scatter(out, parts, src=0)
    close(out, torch.full((4,), float(R)))
    t = contribution(R, (5,), torch.float32, seed=71)
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    if R == 0:
        close(t, torch.stack(everyone((5,), torch.float32, seed=71)).sum(0))


@case
def send_recv_ring_and_batch():
    nxt, prv = (R + 1) % N, (R - 1) % N
    if R % 2 == 0:
        dist.send(torch.full((6,), float(R)), dst=nxt)
        got = torch.zeros(6)
        dist.recv(got, src=prv)
    else:
        got = torch.zeros(6)
        dist.recv(got, src=prv)
        dist.send(torch.full((6,), float(R)), dst=nxt)
    close(got, torch.full((6,), float(prv)))
    inbox = torch.zeros(3, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, torch.full((3,), R, dtype=torch.int64), nxt),
           dist.P2POp(dist.irecv, inbox, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    close(inbox, torch.full((3,), prv, dtype=torch.int64))


@case
def send_recv_views_futures_and_a_size_mismatch():
    if N < 2:
        return
    nxt, prv = (R + 1) % N, (R - 1) % N
    # Views that are not contiguous: sent from a copy, received into one and copied back.
    base = torch.zeros(4, 2)
    got = base[:, 1]
    sent = torch.arange(8, dtype=torch.float32).view(4, 2)[:, 0] + R
    r = dist.irecv(got, src=prv)
    s = dist.isend(sent, dst=nxt)
    future = r.get_future()
    check(s.wait() is True)
    future.wait()
    close(got, torch.arange(0, 8, 2, dtype=torch.float32) + prv)
    close(base[:, 0], torch.zeros(4))
    check(r.is_completed() and r.is_success() and s.is_success())
    # A recv of another size than the send: both sides fail, naming both sizes.
    if R == 0:
        e = raises(dist.DistBackendError, dist.send, torch.zeros(3), 1)
    elif R == 1:
        e = raises(dist.DistBackendError, dist.recv, torch.zeros(5), 0)
    if R < 2:
        check("12" in str(e) and "20" in str(e), str(e))
        check(("send to group rank 1" if R == 0 else "recv from group rank 0") in str(e), str(e))


@case
def wait_timeout_then_completion():
    if N < 2:
        return
    # Rank 1 sends only after rank 0's first wait timed out (told through a barrier).
    if R == 0:
        got = torch.zeros(2)
        w = dist.irecv(got, src=1)
        e = raises(dist.DistBackendError, w.wait, datetime.timedelta(milliseconds=300),
                   contains="did not complete within")
        check("recv from group rank 1" in str(e), str(e))
        check(not w.is_completed())
        dist.barrier()
        w.wait()
        close(got, torch.full((2,), 7.0))
    else:
        dist.barrier()
        if R == 1:
            dist.send(torch.full((2,), 7.0), dst=0)


@case
def subgroup_collectives():
    members = [0, N - 1] if N > 2 else [0, 1]
    g = dist.new_group(members)
    odd = dist.new_group([r for r in range(N) if r % 2 == 1])
    if R in members:
        t = contribution(R, (4,), torch.float32, seed=80)
        dist.all_reduce(t, group=g)
        close(t, torch.stack(everyone((4,), torch.float32, seed=80, ranks=members)).sum(0))
        b = torch.full((2,), float(R))
        dist.broadcast(b, src=members[-1], group=g)  # a global rank, as torch takes it
        close(b, torch.full((2,), float(members[-1])))
        outs = [torch.zeros(1) for _ in members]
        dist.all_gather(outs, torch.full((1,), float(R)), group=g)
        close(torch.cat(outs), torch.tensor([float(m) for m in members]))
        check(dist.get_rank(g) == members.index(R))
    else:
        check(dist.get_rank(g) == -1)
    if R % 2 == 1:
        t = torch.ones(3)
        dist.all_reduce(t, group=odd)
        close(t, torch.full((3,), float(len([r for r in range(N) if r % 2 == 1]))))


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batches(steps):
    g = torch.Generator().manual_seed(500 + R)  # each rank its own data
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g))
            for _ in range(steps)]


def _train_ddp(group, hook=None, accumulate=1):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(_model(1 + R), process_group=group)  # DDP broadcasts rank 0's parameters
    if hook is not None:
        model.register_comm_hook(group, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = _batches(4 * accumulate)
    for i, (x, y) in enumerate(batches):
        last = (i + 1) % accumulate == 0
        ctx = model.no_sync() if not last else _nullcontext()
        with ctx:
            torch.nn.functional.mse_loss(model(x), y).backward()
        if last:
            opt.step()
            opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


class _nullcontext(object):
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _same_everywhere(params):
    for p in params:
        mine = p.clone()
        dist.broadcast(p, src=0, group=GLOO)
        close(mine, p, msg="parameters differ across ranks")


@case
def ddp_matches_ddp_on_gloo():
    hora_params = _train_ddp(None)
    gloo_params = _train_ddp(GLOO)
    for a, b in zip(hora_params, gloo_params):
        close(a, b, atol=1e-6, msg="DDP on hora vs gloo")
    _same_everywhere(hora_params)


@case
def ddp_no_sync_and_comm_hook():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    a = _train_ddp(None, accumulate=2)
    b = _train_ddp(GLOO, accumulate=2)
    for x, y in zip(a, b):
        close(x, y, atol=1e-6, msg="no_sync accumulation")
    c = _train_ddp(None, hook=default_hooks.fp16_compress_hook)
    d = _train_ddp(GLOO, hook=default_hooks.fp16_compress_hook)
    for x, y in zip(c, d):
        close(x, y, atol=1e-3, msg="fp16 compress hook")


@case
def zero_redundancy_optimizer_matches_gloo():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def train(group):
        model = _model(3)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                      process_group=group, lr=0.01)
        for x, y in _batches(3):
            torch.nn.functional.mse_loss(model(x), y).backward()
            for p in model.parameters():  # average the gradients over the same group
                dist.all_reduce(p.grad, group=group)
                p.grad /= N
            opt.step()
            opt.zero_grad()
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(train(None), train(GLOO)):
        close(a, b, atol=1e-6, msg="ZeroRedundancyOptimizer on hora vs gloo")


@case
def fsdp2_fully_shard_matches_gloo():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def train(group):
        model = _model(4)
        mesh = DeviceMesh.from_group(group or dist.group.WORLD, "cpu")
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for x, y in _batches(3):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        return [p.full_tensor().detach().clone() for p in model.parameters()]

    for a, b in zip(train(None), train(GLOO)):
        close(a, b, atol=1e-6, msg="FSDP2 on hora vs gloo")


@case
def unsupported_op_is_named():
    e = raises(ValueError, dist.all_reduce, torch.ones(2, dtype=torch.int32),
               op=dist.ReduceOp.BAND, contains="does not support")
    check("BAND" in str(e), str(e))
    dist.barrier()  # nothing was left pending by the refused call


def init():
    global R, N, GLOO
    import hora.torch.distributed  # noqa: F401 - registers "hora"
    dist.init_process_group("hora", timeout=datetime.timedelta(seconds=60))
    check(dist.get_backend() == "hora", dist.get_backend())
    R, N = dist.get_rank(), dist.get_world_size()
    GLOO = dist.new_group(backend="gloo")


def shutdown():
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cases.run_all(init, shutdown, only=sys.argv[1:] or None)
