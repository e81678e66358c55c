"""A rank that runs fewer steps than the others (uneven data) and leaves: the others' wait for
a tensor it never submitted must end at once, on every waiting rank, with an error that names
it as shut down, the tensor, and hvd.join(); not at the stall timeout (600 s, the default).

    early_exit_worker.py exit    the last rank returns after 2 steps (exit code 0)
    early_exit_worker.py raise   the last rank raises after 2 steps (horarun --keep-going)

Every other rank runs 3 steps and prints `EARLY_EXIT rank R: <seconds> <error>` when the third
raises, then exits 0; the test checks the lines."""

import sys
import time

import torch

import hora.torch as hvd

mode = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
last = r == n - 1
for step in range(2 if last else 3):
    start = time.monotonic()
    try:
        y = hvd.allreduce(torch.full((4,), float(r)), op=hvd.Sum, name="g")
    except hvd.HorovodInternalError as e:
        print("EARLY_EXIT rank %d: %.1f %s" % (r, time.monotonic() - start,
                                               str(e).replace("\n", " | ")), flush=True)
        sys.exit(0)
    assert y[0].item() == n * (n - 1) / 2, y
    if last:
        time.sleep(0.5)  # the others are already waiting in step 3 when this rank leaves
if last:
    if mode == "raise":
        raise RuntimeError("rank %d: out of data (the test's exception)" % r)
    sys.exit(0)  # hvd.shutdown() runs at exit
print("EARLY_EXIT rank %d: the third allreduce returned" % r, flush=True)
sys.exit(1)
