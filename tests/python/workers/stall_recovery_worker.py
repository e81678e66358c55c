"""A rank that leaves the others waiting (as one that fails an assertion between collectives
does in Horovod's test suite: it goes on to tearDown's barrier while the others wait in the
test's next collective): the stall timeout (HORA_STALL_TIMEOUT_SECONDS, set by the test) must
end every rank's wait with an error naming the stalled tensors, and hvd.init() afterwards
(the next test's) must start a new job in which every collective works again, even though
no rank called shutdown (tearDown's barrier raised before it)."""

import os
import time

import torch

import hora.torch as hvd

TIMEOUT = float(os.environ["HORA_STALL_TIMEOUT_SECONDS"])
BOUND = 4 * TIMEOUT + 10  # faultlib.hang_bound

for round_ in range(3):
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    y = hvd.allreduce(torch.full((4,), float(r + round_)), op=hvd.Sum, name="ok.%d" % round_)
    assert y[0].item() == sum(range(n)) + n * round_, (round_, y)
    odd = round_ % n  # the rank that "failed its assertion"
    start = time.monotonic()
    try:
        if r == odd:
            hvd.barrier()  # tearDown's
        else:
            hvd.allgather_object(r)  # the test's next collective
        raise AssertionError("round %d: the stalled call returned" % round_)
    except hvd.HorovodInternalError as e:
        took = time.monotonic() - start
        text = str(e)
        assert "stall timeout" in text and "hora.barrier" in text and \
            "allgather_object" in text, text
        print("DETECTION stall round %d rank %d: %.1f s (timeout %.0f s, bound %.0f s)"
              % (round_, r, took, TIMEOUT, BOUND), flush=True)
        assert took < BOUND, "the stall ended after %.1f s, past the bound %.0f s" % (took, BOUND)
    assert hvd.is_initialized()  # no shutdown: the next init must replace the failed job
hvd.init()
x = hvd.allgather(torch.full((r + 1,), float(r)))
assert x.tolist() == [float(s) for s in range(n) for _ in range(s + 1)], x
hvd.shutdown()
print("CASE stall_recovery PASS", flush=True)
