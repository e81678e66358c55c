"""One rank of a hora.torch job run from the installed wheel by //tests/package:wheel_test
(`VENV/bin/horarun -np N VENV/bin/python wheel_job.py OUT_DIR`, from outside the repository).

Prints `CASE <name> PASS` or `CASE <name> FAIL <why>` per check, and writes OUT_DIR/rank<R>.json
(where hora and libhora.so were loaded from, torch's version, the trained parameters) for the
test to compare across ranks. References are computed here from every rank's known input,
never by another Hora collective.
"""

import copy
import json
import os
import sys

import torch

import hora
import hora._lib
import hora.torch as hvd


def case(name, ok, why=""):
    print("CASE %s %s%s" % (name, "PASS" if ok else "FAIL", "" if ok else " " + why), flush=True)


def collectives(r, n):
    x = torch.arange(10, dtype=torch.float32) * (r + 1)
    total = torch.arange(10, dtype=torch.float32) * sum(k + 1 for k in range(n))
    s = hvd.allreduce(x, op=hvd.Sum, name="sum")
    case("allreduce_sum", torch.equal(s, total), str(s))
    a = hvd.allreduce(x.double(), op=hvd.Average, name="avg")
    case("allreduce_average_f64", torch.allclose(a, total.double() / n), str(a))
    i = hvd.allreduce(torch.full((7,), r + 1, dtype=torch.int32), op=hvd.Max, name="max")
    case("allreduce_max_i32", torch.equal(i, torch.full((7,), n, dtype=torch.int32)), str(i))
    g = hvd.allgather(torch.full((r + 1, 3), float(r)), name="gather")  # uneven first dims
    want = torch.cat([torch.full((k + 1, 3), float(k)) for k in range(n)])
    case("allgather_uneven", torch.equal(g, want), str(g))
    root = n - 1
    b = hvd.broadcast(torch.full((5,), float(r)), root_rank=root, name="bcast")
    case("broadcast", torch.equal(b, torch.full((5,), float(root))), str(b))


def training(r, n, steps=5, per_rank=4):
    """DistributedOptimizer on rank r's shard; the reference is plain SGD on the mean of every
    shard's loss (what averaging the gradients computes), from rank 0's initial weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    reference = copy.deepcopy(model)
    initial = torch.cat([p.detach().flatten() for p in model.parameters()])
    if r != 0:  # broadcast_parameters must undo this
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(r))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.2)
    gen = torch.Generator().manual_seed(1234)
    xs = torch.randn(n * per_rank, 6, generator=gen)
    ys = torch.randn(n * per_rank, 1, generator=gen)
    mse = torch.nn.functional.mse_loss
    for _ in range(steps):
        lo, hi = r * per_rank, (r + 1) * per_rank
        opt.zero_grad()
        mse(model(xs[lo:hi]), ys[lo:hi]).backward()
        opt.step()
        ref_opt.zero_grad()
        sum(mse(reference(xs[k * per_rank:(k + 1) * per_rank]), ys[k * per_rank:(k + 1) * per_rank])
            for k in range(n)).div(n).backward()
        ref_opt.step()
    got = torch.cat([p.detach().flatten() for p in model.parameters()])
    want = torch.cat([p.detach().flatten() for p in reference.parameters()])
    case("optimizer_matches_reference", torch.allclose(got, want, atol=1e-5),
         "max diff %g" % (got - want).abs().max().item())
    case("optimizer_trained", not torch.allclose(got, initial), "parameters did not change")
    return got.tolist()


def main():
    out_dir = sys.argv[1]
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    collectives(r, n)
    params = training(r, n)
    with open(os.path.join(out_dir, "rank%d.json" % r), "w") as f:
        json.dump({"hora_file": hora.__file__, "library": hora._lib.lib_path(),
                   "torch": torch.__version__, "size": n, "params": params}, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
