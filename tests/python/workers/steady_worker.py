"""The steady path (docs/design.md "Steady state") through hora.torch, every rank of one host
(shm): a name allreduced (or, small, allgathered or broadcast) the same way a few times runs
without the coordinator (counted by hora.steady_stats), with the same bits as its first,
coordinator-planned runs; a changed
shape falls back; a mismatch after the steady state still names the ranks."""

import ctypes
import sys
import threading

import torch

import hora
import hora.torch as hvd
import cases
from cases import case, check, raises

WARM = 3   # SteadyOptions::warmup (runtime/steady_options.h)
RUNS = WARM + 4

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.int8, torch.uint8]
OPS = [("sum", hvd.Sum), ("average", hvd.Average), ("min", hvd.Min), ("max", hvd.Max),
       ("product", hvd.Product)]


def _input(dtype, n):
    v = (torch.arange(n, dtype=torch.float64) * 7 + hvd.rank() * 3) % 4 + 1  # 1..4
    if dtype.is_floating_point:
        v = v * 0.75 / 3
    elif dtype == torch.int8:
        v = v - 2
    return v.to(dtype)


def _bytes(t):
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _runs(name, make, **kwargs):
    """RUNS allreduces of the same input under one name: the results' bytes (the first WARM
    planned by the coordinator), and how many ran on the steady path."""
    sid = kwargs["process_set"].process_set_id if "process_set" in kwargs else 0
    before = hora.steady_stats(sid)["fast"]
    outs = [_bytes(hvd.allreduce(make(), name=name, **kwargs)) for _ in range(RUNS)]
    return outs, hora.steady_stats(sid)["fast"] - before


@case
def results_equal_the_coordinator_path_bit_for_bit():
    for dtype in DTYPES:
        for opname, op in OPS:
            if op == hvd.Average and not dtype.is_floating_point:
                continue
            for n in (1, 5000):  # coordinator-reduced inline, and on the data plane
                name = "bits.%s.%s.%d" % (str(dtype)[6:], opname, n)
                outs, fast = _runs(name, lambda: _input(dtype, n), op=op)
                for i, o in enumerate(outs[1:], 1):
                    check(o == outs[0], "%s: run %d differs from run 0" % (name, i))
                check(fast >= RUNS - WARM - 1, "%s: %d fast runs" % (name, fast))


@case
def prescale_postscale_equal_bit_for_bit():
    for dtype in (torch.float32, torch.float64, torch.float16):
        outs, fast = _runs("scaled.%s" % dtype, lambda: _input(dtype, 9), op=hvd.Average,
                           prescale_factor=0.5, postscale_factor=3.0)
        for o in outs[1:]:
            check(o == outs[0], "scaled %s differs" % dtype)
        check(fast >= RUNS - WARM - 1, "scaled %s: %d fast runs" % (dtype, fast))


@case
def process_set():
    if hvd.size() < 3:
        return  # [0, 1] is the global set
    ps = hvd.add_process_set([0, 2])
    if hvd.rank() in (0, 2):
        outs, fast = _runs("set.x", lambda: _input(torch.float32, 4), op=hvd.Sum,
                           process_set=ps)
        for o in outs:
            check(o == outs[0], "process set results differ")
        check(fast >= RUNS - WARM - 1, "process set: %d fast runs" % fast)
    hvd.remove_process_set(ps)


@case
def named_small_allgathers_and_broadcasts_run_fast():
    before = hora.steady_stats(0)["fast"]
    for i in range(RUNS):
        rows = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * hvd.rank() + i
        got = hvd.allgather(rows, name="gather.rows")
        want = torch.cat([torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r + i
                          for r in range(hvd.size())])
        check(torch.equal(got, want), "allgather %d: %s" % (i, got.tolist()))
        b = hvd.broadcast(torch.full((4,), float(hvd.rank() + i)), root_rank=1,
                          name="bcast.from1")
        check(b.tolist() == [1.0 + i] * 4, "broadcast %d: %s" % (i, b.tolist()))
    fast = hora.steady_stats(0)["fast"] - before
    check(fast >= 2 * (RUNS - WARM - 1), "%d fast runs of allgather and broadcast" % fast)


@case
def unnamed_blocking_calls_of_every_kind_take_the_steady_path():
    before = hora.steady_stats(0)["fast"]
    for i in range(RUNS):
        got = hvd.allgather(torch.tensor([[hvd.rank(), i]]))
        check(got.tolist() == [[r, i] for r in range(hvd.size())], "allgather %d" % i)
        b = hvd.broadcast(torch.tensor([hvd.rank() + i]), root_rank=0)
        check(b.item() == i, "broadcast %d" % i)
    for i in range(RUNS):
        got = hvd.reducescatter(torch.arange(2.0 * hvd.size()) + i, op=hvd.Sum)
        r = hvd.rank()
        check(got.tolist() == [hvd.size() * (2.0 * r + i), hvd.size() * (2.0 * r + 1 + i)],
              "reducescatter %d: %s" % (i, got.tolist()))
    for i in range(RUNS):
        sent = torch.arange(2.0 * hvd.size()) + 100 * hvd.rank() + i  # 2 rows to each rank
        got = hvd.alltoall(sent)
        r = hvd.rank()
        want = [100.0 * s + i + 2 * r + k for s in range(hvd.size()) for k in range(2)]
        check(got.tolist() == want, "alltoall %d: %s" % (i, got.tolist()))
    for i in range(RUNS):  # the in-place one shares the name: another loop
        t = torch.tensor([float(hvd.rank() + i)] * 3)
        hvd.broadcast_(t, root_rank=hvd.size() - 1)
        check(t.tolist() == [float(hvd.size() - 1 + i)] * 3, "broadcast_ %d" % i)
    fast = hora.steady_stats(0)["fast"] - before
    check(fast >= 5 * (RUNS - WARM - 1), "%d fast runs" % fast)


@case
def changed_shape_falls_back_and_mismatch_names_ranks():
    for _ in range(RUNS):
        y = hvd.allreduce(torch.ones(4), name="w", op=hvd.Sum)
    s0 = hora.steady_stats(0)
    check(y.tolist() == [float(hvd.size())] * 4, "warm result")
    y = hvd.allreduce(torch.ones(5), name="w", op=hvd.Sum)
    s1 = hora.steady_stats(0)
    check(y.tolist() == [float(hvd.size())] * 5, "changed shape result")
    check(s1["slow"] > s0["slow"] and s1["fast"] == s0["fast"], "did not fall back: %r" % s1)
    for _ in range(RUNS):
        hvd.allreduce(torch.ones(5), name="w", op=hvd.Sum)
    check(hora.steady_stats(0)["fast"] > s1["fast"], "not relearned")
    n = 6 if hvd.rank() == hvd.size() - 1 else 5
    e = raises(hora.HoraMismatchError, hvd.allreduce, torch.ones(n), name="w", op=hvd.Sum)
    last = hvd.size() - 1
    others = ",".join(str(r) for r in range(last))
    want = "[5] on rank%s %s; [6] on rank %d" % ("s" if last > 1 else "", others, last)
    check(want in e.message, "message %r does not contain %r" % (e.message, want))


@case
def unnamed_blocking_calls_take_the_steady_path():
    # Blocking calls without a name share one name (hora/torch/unnamed.py), so a loop of them is
    # learned like a named one; async ones keep their numbered names and mix in freely.
    size = hvd.size()
    before = hora.steady_stats(0)["fast"]
    for i in range(RUNS):
        y = hvd.allreduce(torch.ones(3), op=hvd.Sum)
        check(y.tolist() == [float(size)] * 3, "run %d: %r" % (i, y.tolist()))
    fast = hora.steady_stats(0)["fast"] - before
    check(fast >= RUNS - WARM - 1, "unnamed: %d fast runs" % fast)
    for i in range(RUNS):  # with numbered async calls in flight
        h = hvd.allreduce_async(torch.full((2,), float(hvd.rank() + i)), op=hvd.Sum)
        y = hvd.allreduce(torch.ones(3), op=hvd.Sum)
        check(y.tolist() == [float(size)] * 3, "mixed run %d: %r" % (i, y.tolist()))
        z = hvd.synchronize(h)
        want = float(sum(range(size)) + size * i)
        check(z.tolist() == [want] * 2, "async run %d: %r" % (i, z.tolist()))
    t = torch.full((4,), 2.0)
    for _ in range(RUNS):
        hvd.allreduce_(t, op=hvd.Max)
    check(t.tolist() == [2.0] * 4, "in place: %r" % t.tolist())
    for n in (1, 7, 1, 300):  # changing shapes under the one name
        y = hvd.allreduce(torch.ones(n, dtype=torch.float64), op=hvd.Sum)
        check(y.tolist() == [float(size)] * n, "shape %d: %r" % (n, y.tolist()))


@case
def unnamed_blocking_mismatch_then_reuse():
    for _ in range(RUNS):
        hvd.allreduce(torch.ones(4), op=hvd.Sum)
    n = 6 if hvd.rank() == hvd.size() - 1 else 5
    e = raises(hora.HoraMismatchError, hvd.allreduce, torch.ones(n), op=hvd.Sum)
    check("noname.sync" in e.message, "message %r does not name the call" % e.message)
    y = hvd.allreduce(torch.ones(4), op=hvd.Sum)  # the name is usable again
    check(y.tolist() == [float(hvd.size())] * 4, "after the mismatch: %r" % y.tolist())


@case
def unnamed_blocking_refusal_moves_every_rank_on():
    before = hora.core.sync_name("allreduce")
    bad = hvd.rank() == hvd.size() - 1
    t = torch.ones(2, dtype=torch.complex64 if bad else torch.float32)
    raises(ValueError, hvd.allreduce, t, op=hvd.Sum)  # refused by the last rank, on every rank
    after = hora.core.sync_name("allreduce")
    check(after != before, "the name did not move on: %r" % after)
    names = hvd.allgather_object(after)
    check(len(set(names)) == 1, "ranks disagree on the next name: %r" % names)
    for _ in range(RUNS):  # the refusal may still wait at the coordinator: a fresh name
        y = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    check(y.tolist() == [float(hvd.size())] * 2, "after the refusal: %r" % y.tolist())


@case
def unnamed_blocking_calls_from_two_threads():
    errors, results = [], []

    def work():
        try:
            for _ in range(20):
                results.append(hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist())
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    check(not errors, "errors: %r" % errors)
    check(results == [[float(hvd.size())] * 2] * 40, "results: %r" % results[:3])


if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown, only=sys.argv[1:])
