"""Every hora.torch collective against a reference computed here. Runs on each rank."""

import os
import sys

import torch

import hora.torch as hvd
import cases
from api_common import N, R, inputs
from cases import case, check, close, raises


@case
def topology():
    check(hvd.is_initialized())
    check(R() == int(os.environ["HORA_RANK"]), "rank")
    check(N() == int(os.environ["HORA_SIZE"]), "size")
    check(hvd.local_rank() == int(os.environ.get("HORA_LOCAL_RANK", R())), "local_rank")
    check(hvd.local_size() == int(os.environ.get("HORA_LOCAL_SIZE", N())), "local_size")
    check(hvd.cross_rank() == 0 and hvd.cross_size() == 1, "cross")
    check(hvd.is_homogeneous())
    check(isinstance(hvd.gloo_built(), bool) and isinstance(hvd.mpi_built(), bool))
    check(hvd.global_process_set.size() == N() and hvd.global_process_set.rank() == R())


@case
def allreduce_ops():
    xs = inputs()
    refs = {hvd.Sum: sum(xs), hvd.Average: sum(xs) / N(),
            hvd.Min: torch.stack(xs).min(0)[0], hvd.Max: torch.stack(xs).max(0)[0],
            hvd.Product: torch.stack(xs).prod(0)}
    for op, ref in refs.items():
        x = xs[R()].clone()
        y = hvd.allreduce(x, op=op)
        close(y, ref, msg="op %d" % op)
        close(x, xs[R()], msg="input modified")
    close(hvd.allreduce(xs[R()]), refs[hvd.Average], msg="default op")
    close(hvd.allreduce(xs[R()], average=True), refs[hvd.Average], msg="average=True")
    close(hvd.allreduce(xs[R()], average=False), refs[hvd.Sum], msg="average=False")
    raises(ValueError, hvd.allreduce, xs[R()], average=True, op=hvd.Sum)


@case
def allreduce_dtypes():
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64):
        xs = [torch.tensor([r + 1, 2, 3], dtype=dt) for r in range(N())]
        y = hvd.allreduce(xs[R()], op=hvd.Sum, name="dt.%s" % dt)
        check(y.dtype == dt, "dtype kept")
        close(y, sum(x.double() for x in xs), msg=str(dt))
        y = hvd.allreduce(xs[R()], op=hvd.Max, name="dtmax.%s" % dt)
        close(y, torch.stack([x.double() for x in xs]).max(0)[0], msg="max " + str(dt))
    b = torch.tensor([R() == 0, True, False])
    close(hvd.allreduce(b, op=hvd.Max), torch.tensor([True, True, False]), msg="bool max")
    close(hvd.allreduce(b, op=hvd.Min), torch.tensor([N() == 1, True, False]), msg="bool min")
    raises(TypeError, hvd.allreduce, torch.zeros(3, dtype=torch.complex64), contains="complex")
    raises(ValueError, hvd.allreduce, torch.zeros(3, dtype=torch.complex64))  # as Horovod


_NUMERIC = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
            torch.bfloat16,
            torch.float32, torch.float64)


def _reference(xs, op, dt):
    """op over the ranks' inputs, computed in float64 (every value here is a small integer, so
    exact in every dtype), then rounded as Hora documents: floats to nearest, integers toward
    zero unless the quotient is an integer."""
    st = torch.stack([x.double() for x in xs])
    if op == hvd.Sum:
        return st.sum(0)
    if op == hvd.Product:
        return st.prod(0)
    if op == hvd.Min:
        return st.min(0)[0]
    if op == hvd.Max:
        return st.max(0)[0]
    avg = st.sum(0) / N()
    return avg if dt.is_floating_point else torch.trunc(avg)


@case
def allreduce_every_dtype_and_op():
    """Every dtype x every op, 4 elements (inline: reduced by the coordinator) and 20000
    elements (past HORA_INLINE_THRESHOLD: the data plane). Exact, an average included: it is
    the sum divided by N, correctly rounded (what `t / N` gives), at 3 ranks too."""
    ops = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
           "product": hvd.Product}
    problems = []
    for n in (4, 20000):
        base = torch.arange(n, dtype=torch.float64) % 4
        xs = [base + r + 1 for r in range(N())]     # products <= 4*5*6 = 120 fit int8
        xs[0][1 % n] = 0                              # a zero: min and product see it
        for dt in _NUMERIC:
            for opname, op in ops.items():
                y = hvd.allreduce(xs[R()].to(dt), op=op, name="all.%d.%s.%s" % (n, dt, opname))
                ref = _reference(xs, op, dt).to(dt)
                if y.dtype != dt:
                    problems.append("%s %s n=%d: dtype %s" % (dt, opname, n, y.dtype))
                elif not torch.equal(y, ref):
                    bad = (y != ref).nonzero()[:1].flatten().tolist()
                    problems.append("%s %s n=%d: at %s got %s want %s" % (
                        dt, opname, n, bad, y[bad].tolist(), ref[bad].tolist()))
        bools = [((torch.arange(n) + r) % 3 == 0) for r in range(N())]
        st = torch.stack(bools)
        for opname, op in ops.items():
            y = hvd.allreduce(bools[R()], op=op, name="all.%d.bool.%s" % (n, opname))
            want = st.any(0) if opname in ("sum", "average", "max") else st.all(0)
            if y.dtype != torch.bool or not torch.equal(y, want):
                problems.append("bool %s n=%d: %s != %s" % (opname, n, y[:4].tolist(),
                                                            want[:4].tolist()))
    check(not problems, "; ".join(problems[:10]))


@case
def allreduce_scale_factors():
    xs = inputs((5,))
    close(hvd.allreduce(xs[R()], op=hvd.Sum, prescale_factor=3.0), 3 * sum(xs))
    close(hvd.allreduce(xs[R()], op=hvd.Sum, postscale_factor=0.5), 0.5 * sum(xs))
    close(hvd.allreduce(xs[R()], op=hvd.Average, prescale_factor=2.0, postscale_factor=0.25),
          0.5 * sum(xs) / N())


@case
def allreduce_inplace_and_async():
    xs = inputs()
    x = xs[R()].clone()
    y = hvd.allreduce_(x, op=hvd.Sum)
    check(y is x, "allreduce_ returns its input")
    close(x, sum(xs))
    x = xs[R()].clone()
    h = hvd.allreduce_async_(x, op=hvd.Sum, name="inplace.async")
    out = hvd.synchronize(h)
    check(out is x)
    close(x, sum(xs))
    h = hvd.allreduce_async(xs[R()], op=hvd.Max)
    while not hvd.poll(h):
        pass
    close(hvd.synchronize(h), torch.stack(xs).max(0)[0])
    # non-contiguous: in place writes through the view, out of place leaves it alone
    base = xs[R()].clone()
    view = base.t()
    check(not view.is_contiguous())
    hvd.allreduce_(view, op=hvd.Sum)
    close(base, sum(xs))
    view = xs[R()].clone().t()
    close(hvd.allreduce(view, op=hvd.Sum), sum(xs).t())
    # zero elements
    close(hvd.allreduce(torch.zeros(0, 3)), torch.zeros(0, 3))


@case
def allreduce_autograd():
    for op in (hvd.Sum, hvd.Average):
        x = torch.ones(4, requires_grad=True)
        y = hvd.allreduce(x, op=op)
        w = torch.arange(4.0) + R()
        (y * w).sum().backward()
        ws = [torch.arange(4.0) + r for r in range(N())]
        ref = sum(ws) if op == hvd.Sum else sum(ws) / N()
        close(x.grad, ref, msg="grad op %d" % op)


@case
def grouped_allreduce():
    a = inputs((3,))
    b = inputs((2, 2), torch.float64)
    outs = hvd.grouped_allreduce([a[R()], b[R()]], op=hvd.Sum)
    close(outs[0], sum(a))
    close(outs[1], sum(b))
    ta, tb = a[R()].clone(), b[R()].clone()
    res = hvd.grouped_allreduce_([ta, tb], op=hvd.Sum)
    check(res[0] is ta and res[1] is tb)
    close(ta, sum(a))
    h = hvd.grouped_allreduce_async([a[R()], b[R()]], name="grp")
    outs = hvd.synchronize(h)
    close(outs[0], sum(a) / N())
    ta = a[R()].clone()
    hvd.synchronize(hvd.grouped_allreduce_async_([ta]))
    close(ta, sum(a) / N())
    x = torch.ones(3, requires_grad=True)
    (o,) = hvd.grouped_allreduce([x], op=hvd.Sum)
    (o * (R() + 1)).sum().backward()
    close(x.grad, torch.full((3,), float(sum(r + 1 for r in range(N())))))


@case
def allgather():
    xs = [torch.full((r + 1, 2), float(r)) for r in range(N())]
    close(hvd.allgather(xs[R()]), torch.cat(xs))
    ints = [torch.arange(r + 2, dtype=torch.int64) * 10 + r for r in range(N())]
    close(hvd.synchronize(hvd.allgather_async(ints[R()], name="ag.int")), torch.cat(ints))
    y = hvd.allgather(torch.zeros(0, 2) if R() == 0 else torch.ones(1, 2))
    check(tuple(y.shape) == (N() - 1, 2), "empty rank")
    # equal first dimensions: the data plane writes straight into the tensor returned
    eq = [torch.arange(6, dtype=torch.float64).reshape(2, 3) + 10 * r for r in range(N())]
    close(hvd.allgather(eq[R()]), torch.cat(eq))
    g = hvd.grouped_allgather([eq[R()], xs[R()]])
    close(g[0], torch.cat(eq))
    close(g[1], torch.cat(xs))
    # autograd: Horovod averages the gradient over ranks, then takes this rank's rows
    x = torch.ones(R() + 1, 2, requires_grad=True)
    y = hvd.allgather(x)
    c = [torch.arange(y.numel(), dtype=torch.float32).reshape(y.shape) * (r + 1)
         for r in range(N())]
    (y * c[R()]).sum().backward()
    offset = sum(r + 1 for r in range(R()))
    close(x.grad, (sum(c) / N())[offset:offset + R() + 1])


@case
def broadcast():
    for root in range(N()):
        xs = inputs()
        x = xs[R()].clone()
        y = hvd.broadcast(x, root)
        close(y, xs[root])
        close(x, xs[R()], msg="input modified")
        y = hvd.broadcast_(x, root_rank=root, name="bc_.%d" % root)
        check(y is x)
        close(x, xs[root])
        x = xs[R()].clone()
        close(hvd.synchronize(hvd.broadcast_async(x, root)), xs[root])
        hvd.synchronize(hvd.broadcast_async_(x, root))
        close(x, xs[root])
        base = xs[R()].clone()
        hvd.broadcast_(base.t(), root)
        close(base, xs[root])
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64, torch.bool):
        x = torch.tensor([R(), 1, 0]).to(dt)
        close(hvd.broadcast(x, N() - 1), torch.tensor([N() - 1, 1, 0]).to(dt), msg=str(dt))
    close(hvd.broadcast(torch.tensor(float(R())), 0), torch.tensor(0.0), msg="scalar")
    x = torch.full((3,), float(R() + 1), requires_grad=True)
    (hvd.broadcast(x, 0) * (R() + 1)).sum().backward()
    mean_w = sum(r + 1 for r in range(N())) / N()
    close(x.grad, torch.full((3,), mean_w if R() == 0 else 0.0))


@case
def alltoall():
    n, r = N(), R()
    x = torch.arange(2 * n, dtype=torch.float32) + 100 * r
    y = hvd.alltoall(x)
    check(isinstance(y, torch.Tensor), "no splits: a tensor")
    ref = torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * s
                     for s in range(n)])
    close(y, ref)
    # rank s sends s + d + 1 rows to rank d
    def rows(s, d):
        return s + d + 1
    splits = [rows(r, d) for d in range(n)]
    x = torch.cat([torch.full((rows(r, d), 2), float(10 * r + d)) for d in range(n)])
    y, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    check(received.dtype == torch.int32)
    close(received, torch.tensor([rows(s, r) for s in range(n)]))
    close(y, torch.cat([torch.full((rows(s, r), 2), float(10 * s + r)) for s in range(n)]))
    y2, rec2 = hvd.synchronize(hvd.alltoall_async(x, splits=splits, name="a2a"))
    close(y2, y)
    close(rec2, received)
    x = torch.ones(n * 2, 3, requires_grad=True)
    y = hvd.alltoall(x)
    (y * 2).sum().backward()
    close(x.grad, torch.full((n * 2, 3), 2.0))


@case
def reducescatter():
    n, r = N(), R()
    rows = 2 * n + 1
    xs = [torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + s for s in range(n)]
    counts = [rows // n + (1 if d < rows % n else 0) for d in range(n)]
    start = sum(counts[:r])
    total = sum(xs)
    close(hvd.reducescatter(xs[r], op=hvd.Sum), total[start:start + counts[r]])
    close(hvd.reducescatter(xs[r]), (total / n)[start:start + counts[r]], msg="average")
    close(hvd.synchronize(hvd.reducescatter_async(xs[r], name="rs", op=hvd.Sum)),
          total[start:start + counts[r]])
    g = hvd.grouped_reducescatter([xs[r], xs[r].double()], op=hvd.Sum)
    close(g[0], total[start:start + counts[r]])
    close(g[1], total.double()[start:start + counts[r]])
    # fewer rows than ranks: rank 0 keeps the only row, the others an empty part
    y = hvd.reducescatter(torch.full((1, 2), float(r + 1)), op=hvd.Sum)
    want = torch.full((1, 2), float(n * (n + 1) // 2)) if r == 0 else torch.zeros(0, 2)
    check(tuple(y.shape) == tuple(want.shape), "reducescatter of 1 row: shape %s" % (y.shape,))
    close(y, want)


def _shared_dir(tag):
    """A directory every rank of this job (one host) sees: named by the job's token."""
    import tempfile
    token = os.environ.get("HORA_JOB_TOKEN") or os.environ.get("HORA_COORDINATOR_ADDR", "job")
    d = os.path.join(tempfile.gettempdir(), "hora-test-%s-%s" % (tag, token.replace(":", "_")))
    os.makedirs(d, exist_ok=True)
    return d


@case
def barrier_waits_for_every_rank():
    """Each round one rank arrives late (it sleeps before announcing itself in a file); after
    the barrier every rank must see every announcement. A barrier that returned at once
    would let the early ranks look before the late one wrote."""
    import time
    d = _shared_dir("barrier")
    for late in range(N()):
        if R() == late:
            time.sleep(0.3)
        open(os.path.join(d, "round%d.rank%d" % (late, R())), "w").close()
        hvd.barrier()
        missing = [s for s in range(N())
                   if not os.path.exists(os.path.join(d, "round%d.rank%d" % (late, s)))]
        check(not missing, "round %d (rank %d late): after the barrier rank %d does not see "
              "ranks %s" % (late, late, R(), missing))
    hvd.barrier(process_set=hvd.global_process_set)
    if R() == 0:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


@case
def poll_and_join():
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="poll.me")
    while not hvd.poll(h):
        pass
    check(hvd.poll(h), "poll stays true")
    close(hvd.synchronize(h), torch.full((2,), float(N())))
    # uneven work: rank 0 reduces once more while the others have joined (they add zeros).
    # Its allreduce can only finish once every other rank has joined, so rank 0 joins last.
    if R() == 0:
        close(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.join"), torch.ones(3))
    last = hvd.join()
    check(last == 0, "join returned %r; rank 0 joined last" % (last,))


import api_extras  # noqa: E402,F401 - its cases run in this job, after these

if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown, only=sys.argv[1:])
