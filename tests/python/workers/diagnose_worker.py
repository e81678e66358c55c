"""Jobs for the diagnosis tests (tests/python/test_diagnose.py).

    diagnose_worker.py python   rank 1 sleeps in stuck_in_data_loader() (Python) while the
                                others wait in allreduce 'grad.7'
    diagnose_worker.py c        rank 1 is wedged in a C call that holds the GIL (libc sleep
                                through ctypes.PyDLL) in wedged_in_c() while the others wait
    diagnose_worker.py kill     rank 1 dies (SIGKILL) a second after the others began to wait
    diagnose_worker.py healthy  every rank runs allreduces for a while (a diagnosis is asked
                                from outside meanwhile) and checks every result

Every rank first runs allreduce 'warmup'. A rank whose allreduce fails prints
`FAILED rank=R t=<seconds since its wait began> <message>` and exits 1; a healthy run ends
with `DONE rank=R steps=N` after checking each step's sum."""

import ctypes
import os
import signal
import sys
import time

import numpy as np

import hora

mode = sys.argv[1]
hora.init()
r, n = hora.rank(), hora.size()
hora.allreduce(np.ones(1, np.float32), op=hora.Sum, name="warmup")
print("READY rank=%d pid=%d" % (r, os.getpid()), flush=True)


def stuck_in_data_loader():
    time.sleep(120)


def wedged_in_c():
    ctypes.PyDLL(None).sleep(120)  # PyDLL keeps the GIL during the call


def wait_for_grad():
    start = time.monotonic()
    try:
        hora.allreduce(np.ones(1, np.float32), op=hora.Sum, name="grad.7")
    except hora.HoraError as e:
        print("FAILED rank=%d t=%.1f %s" % (r, time.monotonic() - start,
                                            str(e).replace("\n", " | ")), flush=True)
        sys.exit(1)
    print("UNEXPECTED rank=%d: grad.7 completed" % r, flush=True)


def main():
    if mode in ("python", "c", "kill"):
        if r == 1 and mode == "kill":
            time.sleep(1)
            os.kill(os.getpid(), signal.SIGKILL)
        if r == 1:
            stuck_in_data_loader() if mode == "python" else wedged_in_c()
        else:
            wait_for_grad()
        return
    assert mode == "healthy", mode
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    for step in range(steps):
        x = np.full(1000, float(r + step), np.float32)
        y = hora.allreduce(x, op=hora.Sum, name="step")
        want = sum(float(q + step) for q in range(n))
        assert np.all(y == want), (step, y[:3], want)
        time.sleep(0.02)
    print("DONE rank=%d steps=%d" % (r, steps), flush=True)


main()
