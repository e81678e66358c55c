"""hora.torch process sets and point-to-point against references. Runs on each rank.

The job starts with hvd.init(process_sets=[EVEN, ODD]) as Horovod scripts do, then checks
every collective on those sets, two sets used from two threads at once, dynamic sets, and
send/recv in a ring."""

import threading

import torch

import hora.torch as hvd
import cases
from cases import case, check, close, raises

EVEN = None
ODD = None


def init():
    global EVEN, ODD
    import os
    n = int(os.environ["HORA_SIZE"])
    EVEN = hvd.ProcessSet(range(0, n, 2))
    ODD = hvd.ProcessSet(list(range(1, n, 2))[::-1])  # any order; Horovod sorts
    hvd.init(process_sets=[EVEN, ODD])


def mine():
    return EVEN if hvd.rank() % 2 == 0 else ODD


def value(r, shape=(5, 3), dtype=torch.float32):
    return (torch.arange(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape) % 5
            + r + 1).to(dtype)


@case
def sets_are_registered():
    check(hvd.global_process_set.process_set_id == 0)
    check(hvd.global_process_set.ranks == list(range(hvd.size())))
    check(EVEN.process_set_id is not None and EVEN.process_set_id > 0, str(EVEN))
    check(ODD.ranks == sorted(ODD.ranks), "ranks are sorted")
    ps = mine()
    check(ps.included() and ps.size() == len(ps.ranks), str(ps))
    check(ps.rank() == ps.ranks.index(hvd.rank()))
    other = ODD if ps is EVEN else EVEN
    if other.process_set_id is not None:
        check(not other.included() and other.rank() == -1)


@case
def init_again_finds_its_sets_and_refuses_clones():
    """As Horovod (its test_process_sets_static.py): a second hvd.init with sets of the same
    ranks gives them the registered ids; a clone of the global set or of an earlier entry is
    invalidated and init raises ValueError naming its entry, once the others are registered."""
    even, odd = hvd.ProcessSet(EVEN.ranks), hvd.ProcessSet(ODD.ranks[::-1])
    hvd.init(process_sets=[odd, even])
    check((even.process_set_id, odd.process_set_id) == (EVEN.process_set_id, ODD.process_set_id),
          "%s %s" % (even, odd))
    ids = hvd.mpi_ops._basics._get_process_set_ids_and_ranks()
    check(ids == {0: list(range(hvd.size())), EVEN.process_set_id: EVEN.ranks,
                  ODD.process_set_id: ODD.ranks}, str(ids))
    if hvd.size() > 1:
        clone = hvd.ProcessSet(range(hvd.size()))
        raises(ValueError, hvd.init, process_sets=[even, clone], contains="entry number 1")
        check(clone.process_set_id is None and even.process_set_id == EVEN.process_set_id)
        again = hvd.ProcessSet(EVEN.ranks)
        raises(ValueError, hvd.init, process_sets=[even, again], contains="entry number 1")
        check(again.process_set_id is None)
    ps = mine()
    check(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=ps)[0].item() == len(ps.ranks))


@case
def collectives_on_my_set():
    ps = mine()
    members = ps.ranks
    xs = {r: value(r) for r in members}
    me = hvd.rank()
    close(hvd.allreduce(xs[me], op=hvd.Sum, process_set=ps), sum(xs.values()), msg="sum")
    close(hvd.allreduce(xs[me], process_set=ps), sum(xs.values()) / len(members), msg="avg")
    close(hvd.allreduce(xs[me], op=hvd.Max, process_set=ps),
          torch.stack(list(xs.values())).max(0)[0], msg="max")
    outs = hvd.grouped_allreduce([xs[me], xs[me] * 2], op=hvd.Sum, process_set=ps)
    close(outs[1], 2 * sum(xs.values()), msg="grouped")
    # allgather: rank r contributes r % 3 + 1 rows
    rows = {r: value(r, (r % 3 + 1, 2)) for r in members}
    close(hvd.allgather(rows[me], process_set=ps), torch.cat([rows[r] for r in members]),
          msg="allgather")
    # broadcast: roots are global ranks, as in Horovod
    root = members[-1]
    close(hvd.broadcast(xs[me], root_rank=root, process_set=ps), xs[root], msg="broadcast")
    t = xs[me].clone()
    hvd.broadcast_(t, root_rank=members[0], process_set=ps)
    close(t, xs[members[0]], msg="broadcast_")
    raises(ValueError, hvd.broadcast, xs[me], 99, process_set=ps, contains="not a member")
    # alltoall: each member sends one row per member
    a2a = torch.stack([torch.full((3,), float(me * 100 + d)) for d in range(len(members))])
    got = hvd.alltoall(a2a, process_set=ps)
    want = torch.stack([torch.full((3,), float(s * 100 + ps.rank())) for s in members])
    close(got, want, msg="alltoall")
    # reducescatter over members: each keeps its share of dim 0
    rs = hvd.reducescatter(value(me, (2 * len(members), 2)), op=hvd.Sum, process_set=ps)
    full = sum(value(r, (2 * len(members), 2)) for r in members)
    close(rs, full[2 * ps.rank(): 2 * ps.rank() + 2], msg="reducescatter")
    hvd.barrier(process_set=ps)
    check(hvd.broadcast_object({"r": root}, root_rank=root, process_set=ps) == {"r": root})
    check(hvd.allgather_object(me, process_set=ps) == members, "allgather_object")


@case
def optimizer_on_a_set():
    """DistributedOptimizer and broadcast_parameters with process_set=: members end with
    identical parameters trained on different data, averaged over the members only."""
    ps = mine()
    torch.manual_seed(1000 + hvd.rank())  # different initial weights per rank
    model = torch.nn.Linear(4, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=ps.ranks[0], process_set=ps)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=ps)
    hvd.broadcast_optimizer_state(opt, root_rank=ps.ranks[0], process_set=ps)
    x = torch.full((8, 4), float(hvd.rank() + 1))
    for _ in range(3):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather_object(flat.tolist(), process_set=ps)
    check(all(g == gathered[0] for g in gathered), "members' parameters differ")


@case
def two_sets_from_two_threads():
    if hvd.size() < 3:
        return
    a = hvd.add_process_set([0, 1])
    b = hvd.add_process_set(hvd.ProcessSet([1, 2]))
    errors = []

    def work(ps):
        try:
            for i in range(20):
                x = torch.full((100,), float(hvd.rank() + i))
                y = hvd.allreduce(x, op=hvd.Sum, name="same.name", process_set=ps)
                want = sum(r + i for r in ps.ranks)
                if y[0].item() != want:
                    errors.append("%s: %s != %s" % (ps, y[0].item(), want))
        except Exception as e:  # reported below
            errors.append("%s: %r" % (ps, e))

    threads = [threading.Thread(target=work, args=(ps,)) for ps in (a, b) if ps.included()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(hvd.remove_process_set(a) and hvd.remove_process_set(b))
    check(a.process_set_id is None and b.process_set_id is None)
    check(not errors, "; ".join(errors))


@case
def dynamic_sets_and_errors():
    # EVEN and ODD are done with; removing them frees their ranks for the sets below.
    check(hvd.remove_process_set(EVEN) and hvd.remove_process_set(ODD))
    check(not hvd.remove_process_set(EVEN), "removed twice")
    for i in range(20):
        ps = hvd.add_process_set([0] if i % 2 else list(range(hvd.size()))[-1:])
        if ps.included():
            check(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=ps)[0].item() == 1)
        check(hvd.remove_process_set(ps))
    check(not hvd.remove_process_set(hvd.global_process_set), "removed the global set")
    if hvd.size() > 1:
        raises(ValueError, hvd.add_process_set, list(range(hvd.size())), contains="duplicate")
    raises(ValueError, hvd.allreduce, torch.ones(1), process_set=hvd.ProcessSet([0]),
           contains="not registered")
    if hvd.size() > 1:
        ps = hvd.add_process_set([0])
        if hvd.rank() != 0:
            raises(hvd.HoraError, hvd.allreduce, torch.ones(1), process_set=ps,
                   contains="not a member of process set %d" % ps.process_set_id)
        hvd.remove_process_set(ps)


@case
def send_recv_ring():
    n, me = hvd.size(), hvd.rank()
    if n < 2:
        return
    nxt, prv = (me + 1) % n, (me + n - 1) % n
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool,
                  torch.float16, torch.bfloat16):
        out = (torch.arange(1000) % 2 if dtype == torch.bool else torch.arange(1000) + me).to(dtype)
        got = torch.zeros(1000, dtype=dtype)
        r = hvd.irecv(got, src=prv, tag=5)
        s = hvd.isend(out, dst=nxt, tag=5)
        hvd.synchronize(s)
        hvd.synchronize(r)
        want = (torch.arange(1000) % 2 if dtype == torch.bool else torch.arange(1000) + prv).to(dtype)
        check(torch.equal(got, want), "from %d as %s" % (prv, dtype))
    # blocking send/recv: even ranks send first, odd ones receive first; a non-contiguous
    # output receives through a contiguous copy
    msg = torch.full((7, 3), float(me))
    buf = torch.empty(7, 3)
    for what, into in (("blocking ring", buf), ("non-contiguous output", torch.zeros(3, 7).t())):
        if me % 2 == 0:
            hvd.send(msg, nxt)
            hvd.recv(into, prv)
        else:
            hvd.recv(into, prv)
            hvd.send(msg, nxt)
        check(torch.equal(into, torch.full((7, 3), float(prv))), what)
    raises(hvd.HoraError, hvd.send, msg, me, contains="peer")
    raises(TypeError, hvd.send, [1.0], nxt, contains="torch.Tensor")
    raises(TypeError, hvd.recv, buf, True, contains="int rank")


if __name__ == "__main__":
    cases.run_all(init, hvd.shutdown)
