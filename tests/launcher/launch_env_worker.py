"""One rank of a Hora job started by a launcher other than horarun (mpirun, srun, torchrun, or
their variables set by hand). hora.torch reads the launcher's variables itself; this worker
checks what it reports against EXPECT_* (set by the test, computed there), runs an allreduce
and an allgather against references computed here from every rank's known input, and prints

    RESULT rank=R size=N local=LR/LS cross=CR/CS allreduce=ok allgather=ok

or, when hora.init fails, `INIT_ERROR <message>` and exits 3. With FAIL_ATTEMPT=K, rank 1
exits with code 1 after its collectives when TORCHELASTIC_RESTART_COUNT is K (a torchrun
restart test).
"""

import os
import sys

import torch

import hora.torch as hvd


def expect(name, got):
    want = os.environ.get("EXPECT_" + name)
    if want is not None and int(want) != got:
        raise AssertionError("%s: Hora reports %d, the test expects %s" % (name, got, want))


def main():
    try:
        hvd.init()
    except Exception as e:  # the message is what the test checks
        print("INIT_ERROR %s" % e, flush=True)
        return 3
    r, n = hvd.rank(), hvd.size()
    for name, got in (("RANK", r), ("SIZE", n), ("LOCAL_RANK", hvd.local_rank()),
                      ("LOCAL_SIZE", hvd.local_size()), ("CROSS_RANK", hvd.cross_rank()),
                      ("CROSS_SIZE", hvd.cross_size())):
        expect(name, got)
    x = torch.arange(5, dtype=torch.float64) * (r + 1) + r
    summed = hvd.allreduce(x, op=hvd.Sum, name="launch_env.sum")
    want = sum(torch.arange(5, dtype=torch.float64) * (k + 1) + k for k in range(n))
    if not torch.equal(summed, want):
        raise AssertionError("allreduce %s != %s" % (summed.tolist(), want.tolist()))
    gathered = hvd.allgather(torch.full((r + 1, 2), float(r)), name="launch_env.gather")
    want_g = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
    if not torch.equal(gathered, want_g):
        raise AssertionError("allgather %s != %s" % (gathered.tolist(), want_g.tolist()))
    print("RESULT rank=%d size=%d local=%d/%d cross=%d/%d allreduce=ok allgather=ok"
          % (r, n, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()), flush=True)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if r == 1 and attempt is not None and attempt == os.environ.get("FAIL_ATTEMPT"):
        print("FAILING attempt %s" % attempt, flush=True)
        os._exit(1)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
