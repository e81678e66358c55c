"""Shutdown and init again, many times, as Horovod's test suite does between tests: every
incarnation must join the new coordinator (not rank 0's previous one, still draining) and
reduce correctly."""

import os

import torch

import hora.torch as hvd

ROUNDS = 12

for i in range(ROUNDS):
    hvd.init()
    x = hvd.allreduce(torch.full((3,), float(hvd.rank() + 1 + i)), op=hvd.Sum)
    want = sum(r + 1 + i for r in range(hvd.size()))
    assert x[0].item() == want, (i, x, want)
    if i % 3 == 0:  # and sometimes with a process set
        ps = hvd.add_process_set([0])
        if ps.included():
            assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=ps).item() == 1
        hvd.remove_process_set(ps)
    hvd.shutdown()
print("CASE reinit PASS", flush=True)
