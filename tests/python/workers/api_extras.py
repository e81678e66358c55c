"""hora.torch beyond the collectives, against references computed here: objects, fp16
compression, Adasum, parameter broadcast, the numpy API and the profiler's ranges. Imported by
api_worker.py, whose job runs these cases after its own."""

import functools

import torch

import hora.torch as hvd
from adasum_reference import adasum_reference
from api_common import N, R, inputs
from cases import case, check, close, raises


@case
def objects():
    obj = {"rank": R(), "payload": list(range(R() + 1))} if R() == N() - 1 else None
    got = hvd.broadcast_object(obj, root_rank=N() - 1)
    check(got == {"rank": N() - 1, "payload": list(range(N()))}, repr(got))
    check(hvd.broadcast_object("x" * 10000, 0) == "x" * 10000)
    gathered = hvd.allgather_object((R(), "r" * R()))
    check(gathered == [(s, "r" * s) for s in range(N())], repr(gathered))


@case
def fp16_compression():
    # 1 + 2^-12 is not a float16: compressed, every rank sends exactly 1.0 and the sum is N;
    # uncompressed it is N * (1 + 2^-12). So a compression that did nothing fails here.
    x = torch.full((16,), 1 + 2.0 ** -12) * (torch.arange(16) % 2 + 1)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16.c")
    check(y.dtype == torch.float32, "decompressed dtype %s" % y.dtype)
    want = (x.half().double() * N()).float()
    check(torch.equal(y, want), "compressed sum %s, want %s" % (y[:2].tolist(), want[:2].tolist()))
    plain = hvd.allreduce(x, op=hvd.Sum, name="fp16.none")
    check(not torch.equal(plain, want), "the uncompressed sum must keep the 2^-12")
    close(plain, x.double() * N(), atol=0, rtol=1e-7)
    # float64 goes through float16 too and comes back as float64
    y64 = hvd.allreduce(x.double(), op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16.d")
    check(y64.dtype == torch.float64 and torch.equal(y64, want.double()), str(y64[:2]))
    xs = inputs((16,))
    close(hvd.allreduce(xs[R()] / 7, op=hvd.Sum, compression=hvd.Compression.fp16),
          sum(xs) / 7, atol=1e-2, rtol=1e-3)
    x = torch.tensor([1, 2], dtype=torch.int32)
    c, ctx = hvd.Compression.fp16.compress(x)
    check(c.dtype == torch.int32 and ctx is None, "ints are not compressed")
    c, ctx = hvd.Compression.fp16.compress(torch.ones(2))
    check(c.dtype == torch.float16, "floats are compressed to float16")


@case
def adasum_allreduce():
    # Every dtype Horovod's test uses, against the reference tree (optimizer_worker's); a set
    # size that is not a power of 2 is refused on every rank, naming it.
    n, r = hvd.size(), hvd.rank()
    rows = [torch.rand(2, 2, generator=torch.Generator().manual_seed(50 + s),
                       dtype=torch.float64) for s in range(n)]
    if n & (n - 1):
        raises(ValueError, hvd.allreduce, rows[r], op=hvd.Adasum, contains="power-of-2")
        return
    want = adasum_reference([t.reshape(-1) for t in rows]).reshape(2, 2)
    for dtype, tol in ((torch.float16, 1e-2), (torch.float32, 1e-5), (torch.float64, 1e-12)):
        got = hvd.allreduce(rows[r].to(dtype), op=hvd.Adasum)
        check(got.dtype == dtype, "dtype %s" % got.dtype)
        close(got, want, atol=tol, rtol=tol, msg=str(dtype))
    x = rows[r].clone()
    hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Adasum))
    close(x, want, atol=1e-12, msg="in place")
    raises(ValueError, hvd.allreduce, torch.ones(2, dtype=torch.int32), op=hvd.Adasum,
           contains="floating-point")
    # Several tensors in one call, their transfers in flight together, in groups of at most
    # _GROUP_BYTES (lowered here so that the five tensors make three groups): each the
    # reference's, bit for bit the same as one call per tensor.
    from hora.torch import adasum as adasum_module
    tensors = [[torch.rand(k + 1, generator=torch.Generator().manual_seed(90 + 7 * s + k),
                           dtype=torch.float64) for k in range(5)] for s in range(n)]
    saved = adasum_module._GROUP_BYTES
    adasum_module._GROUP_BYTES = 24
    try:
        got = hvd.grouped_allreduce(tensors[r], op=hvd.Adasum)
    finally:
        adasum_module._GROUP_BYTES = saved
    for k in range(5):
        close(got[k], adasum_reference([tensors[s][k] for s in range(n)]), atol=1e-12,
              msg="grouped tensor %d" % k)
        check(torch.equal(got[k], hvd.allreduce(tensors[r][k], op=hvd.Adasum)),
              "grouped tensor %d differs from its own call" % k)


@case
def argument_errors():
    x = torch.ones(2)
    raises(ValueError, hvd.allreduce, x, process_set=hvd.ProcessSet([0]),
           contains="not registered")
    raises(TypeError, hvd.broadcast, torch.zeros(2, dtype=torch.complex64), 0)
    raises(NotImplementedError, hvd.init, comm=[0])
    raises(ValueError, hvd.allgather, torch.tensor(1.0), contains="dimension")


@case
def broadcast_parameters():
    torch.manual_seed(1234 + R())
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    flat = torch.cat([t.double().reshape(-1) for t in model.state_dict().values()])
    every = hvd.allgather(flat.unsqueeze(0))
    for s in range(N()):
        close(every[s], every[0], msg="state_dict differs on rank %d" % s)
    torch.manual_seed(99 + R())
    model2 = torch.nn.Linear(2, 2)
    hvd.broadcast_parameters(list(model2.named_parameters()), root_rank=N() - 1)
    every = hvd.allgather(model2.weight.detach().reshape(1, -1))
    close(every[0], every[-1])
    hvd.broadcast_parameters([model2.bias], root_rank=0)
    every = hvd.allgather(model2.bias.detach().reshape(1, -1))
    close(every[0], every[-1])


@case
def leaf_parameters_in_place():
    # in-place ops on non-contiguous views of a leaf that requires grad copy back under no_grad
    w = torch.nn.Parameter(torch.full((3, 4), float(R())))
    hvd.broadcast_(w.t(), N() - 1)
    close(w.detach(), torch.full((3, 4), float(N() - 1)))
    hvd.allreduce_(w.t(), op=hvd.Sum)
    close(w.detach(), torch.full((3, 4), float(N() * (N() - 1))))


@case
def numpy_api():
    import numpy as np
    import hora
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + R()
    ref = sum(np.arange(6, dtype=np.float32).reshape(2, 3) + s for s in range(N()))
    np.testing.assert_allclose(hora.allreduce(x, op=hora.Sum), ref)
    np.testing.assert_allclose(hora.allreduce_async(x).wait(), ref / N(), rtol=1e-6)
    np.testing.assert_allclose(hora.broadcast(x, 0), np.arange(6).reshape(2, 3))
    g = hora.allgather(np.full((R() + 1,), R(), dtype=np.int64))
    check(g.tolist() == [s for s in range(N()) for _ in range(s + 1)], str(g))
    out, splits = hora.alltoall(np.arange(N(), dtype=np.int32) + 10 * R())
    check(out.tolist() == [10 * s + R() for s in range(N())] and splits.tolist() == [1] * N())
    # int16 and uint16 are native: sums and products wrap as numpy's own arithmetic does
    for dt in (np.int16, np.uint16):
        xs = [(np.arange(6, dtype=np.int64) * 12001 + s).astype(dt) for s in range(N())]
        for op, fold in ((hora.Sum, np.add), (hora.Product, np.multiply),
                         (hora.Min, np.minimum), (hora.Max, np.maximum)):
            want = functools.reduce(fold, xs)
            got = hora.allreduce(xs[R()], op=op)
            check(got.dtype == dt and np.array_equal(got, want),
                  "%s op %d: %s != %s" % (np.dtype(dt), op, got.tolist(), want.tolist()))
        g = hora.allgather(xs[R()])
        check(g.dtype == dt and np.array_equal(g, np.concatenate(xs)), "allgather %s" % dt)
    check(functools.reduce(np.add, [np.array([30000], np.int16)] * 2)[0] == -5536)
    hora.barrier()


@case
def profiler_ranges():
    """Hora's ops show in torch.profiler under their own names."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        hvd.allreduce(torch.ones(4), name="prof.ar")
        hvd.synchronize(hvd.allgather_async(torch.ones(2, 2)))
        hvd.broadcast(torch.ones(3), root_rank=0)
    names = {e.key for e in prof.key_averages()}
    for want in ("hora.allreduce", "hora.allgather_async", "hora.synchronize", "hora.broadcast"):
        check(want in names, "%s not in the profile: %s" % (want, sorted(n for n in names
                                                                     if "hora" in n)))
