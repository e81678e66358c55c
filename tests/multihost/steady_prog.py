"""A rank for tests/multihost/test_steady_hosts.py: small allreduces across hosts on the
steady path (the board over messages, docs/design.md "Steady state").

    steady_prog.py loop N            N named and N unnamed 4-byte hvd.allreduce calls, N named
                                     allgathers and N named broadcasts, every result checked;
                                     prints "STEADY fast=F slow=S entries=E"
    steady_prog.py kill N VICTIM     as loop, but rank VICTIM SIGKILLs itself at call N // 2;
                                     the others print "ERROR <message>" and exit 1
    steady_prog.py shape N VICTIM    as loop, but from call N // 2 on rank VICTIM's named
                                     tensor has 2 elements (a mismatch after the plan was
                                     cached); every rank prints "ERROR <message>", exits 1
    steady_prog.py fused N [VICTIM]  N steps of 6 allreduce_async_ calls at once, 4 of 16
                                     floats and 2 of 8,192 (the coordinator fuses what is ready
                                     together), every result checked; prints the counters; with
                                     VICTIM, that rank SIGKILLs itself at step N // 2 and the
                                     others print "ERROR <message>" and exit 1
"""

import os
import signal
import sys

import torch

import hora
import hora.torch as hvd


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    victim = int(sys.argv[3]) if len(sys.argv) > 3 else -1
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    want = float(size * (size + 1) // 2)
    if mode == "fused":
        try:
            return fused(n, rank, size, victim)
        except Exception as e:  # noqa: BLE001 - the test reads the message
            print("ERROR " + str(e).replace("\n", " "), flush=True)
            return 1
    try:
        for i in range(n):
            if mode == "kill" and i == n // 2 and rank == victim:
                os.kill(os.getpid(), signal.SIGKILL)
            mine = [rank + 1.0] * (2 if mode == "shape" and rank == victim and i >= n // 2 else 1)
            named = hvd.allreduce(torch.tensor(mine), name="small", op=hvd.Sum)
            unnamed = hvd.allreduce(torch.tensor([rank + 1.0, 2.0 * (rank + 1)]), op=hvd.Sum)
            if named.item() != want or unnamed.tolist() != [want, 2 * want]:
                print("WRONG at %d: %s %s" % (i, named.tolist(), unnamed.tolist()), flush=True)
                return 2
            if mode == "loop":  # the other kinds the steady path runs
                rows = hvd.allgather(torch.tensor([[rank, i]]), name="rows")
                root = hvd.broadcast(torch.tensor([rank * 10 + i]), root_rank=size - 1,
                                     name="from_last")
                if (rows.tolist() != [[r, i] for r in range(size)] or
                        root.item() != (size - 1) * 10 + i):
                    print("WRONG at %d: %s %s" % (i, rows.tolist(), root.tolist()), flush=True)
                    return 2
    except Exception as e:  # noqa: BLE001 - the test reads the message
        print("ERROR " + str(e).replace("\n", " "), flush=True)
        return 1
    s = hora.steady_stats()
    print("STEADY fast=%d slow=%d entries=%d" % (s["fast"], s["slow"], s["entries"]), flush=True)
    hvd.shutdown()
    return 0


def fused(n, rank, size, victim):
    counts = [16, 16, 16, 16, 8192, 8192]
    for i in range(n):
        if i == n // 2 and rank == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        # Integers: exact in any order of summation.
        ts = [torch.full((c,), float(rank + i + t)) for t, c in enumerate(counts)]
        handles = [hvd.allreduce_async_(t, name="fused.%d" % k, op=hvd.Sum)
                   for k, t in enumerate(ts)]
        for k, h in enumerate(handles):
            got = hvd.synchronize(h)
            want = float(sum(r + i + k for r in range(size)))
            if got.min().item() != want or got.max().item() != want:
                print("WRONG at %d: tensor %d %s, want %s" % (i, k, got[:2].tolist(), want),
                      flush=True)
                return 2
    s = hora.steady_stats()
    print("STEADY fast=%d slow=%d entries=%d" % (s["fast"], s["slow"], s["entries"]), flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
