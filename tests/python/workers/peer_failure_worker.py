"""The last rank dies in the middle of the job; the others get HoraPeerFailureError
(Horovod's HorovodInternalError) from their next collective, within a bounded time."""

import os
import sys
import time

import torch

import hora.torch as hvd

hvd.init()
hvd.allreduce(torch.ones(4), name="warmup")
if hvd.rank() == hvd.size() - 1:
    print("DYING", flush=True)
    os._exit(0)  # exit 0: the launcher must not stop the survivors for us
start = time.time()
try:
    for i in range(1000):
        hvd.allreduce(torch.ones(4), name="step.%d" % i)
    print("CASE peer_failure FAIL no error", flush=True)
    sys.exit(1)
except hvd.HorovodInternalError as e:
    took = time.time() - start
    ok = isinstance(e, hvd.HoraError) and e.message
    print("CASE peer_failure %s %.1fs: %s" % ("PASS" if ok else "FAIL", took,
                                              str(e).replace("\n", " ")), flush=True)
try:
    hvd.shutdown()
except hvd.HoraError as e:
    print("shutdown after failure: %s" % e, flush=True)
print("CASE shutdown_returns PASS", flush=True)
