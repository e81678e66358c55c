"""One allreduce per step, the last rank sleeping 40 ms before each (one process per rank
under horarun --timeline-filename). With HORA_STEADY=on the steps after the first few run on
the steady path, whose buckets count apart from the coordinator's: prints
`STEADY fast=N` (hora.steady_stats) so the test knows which path ran, and the late rank
`SLEPT us=N`, the time its sleeps really took (what the report's wait is checked against)."""

import time

import torch

import hora
import hora.torch as hvd

STEPS = 12


def main():
    hvd.init()
    last = hvd.size() - 1
    slept = 0.0
    for _ in range(STEPS):
        if hvd.rank() == last:
            start = time.monotonic()
            time.sleep(0.04)
            slept += time.monotonic() - start
        hvd.allreduce(torch.ones(4), op=hvd.Sum, name="g")
    print("STEADY fast=%d" % hora.steady_stats()["fast"], flush=True)
    if hvd.rank() == last:
        print("SLEPT us=%d" % (slept * 1e6), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
