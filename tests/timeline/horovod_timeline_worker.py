"""The timeline as Horovod's users start it (its test/parallel/test_timeline.py): the
HOROVOD_ variables set before init, one named allreduce, then rank 0 reads the file at the
path given, still open, and looks for Horovod's event names. Waits for them up to 10 s (the
writer flushes within 50 ms; no time is asserted). Prints PASS on each rank."""

import os
import sys
import time

import torch

import hora.torch as hvd
from hora.common.util import env

WANTED = ("allreduce.test_allreduce", "NEGOTIATE_ALLREDUCE", "ALLREDUCE", "CYCLE_START")


def read_until_found(path):
    deadline = time.monotonic() + 10
    while True:
        text = open(path).read() if os.path.exists(path) else ""
        missing = [w for w in WANTED if w not in text]
        if not missing or time.monotonic() > deadline:
            return missing, text
        time.sleep(0.05)


def main():
    path = sys.argv[1]
    with env(HOROVOD_TIMELINE=path, HOROVOD_TIMELINE_MARK_CYCLES="1"):
        hvd.init()
        out = hvd.allreduce(torch.tensor([1, 2, 3], dtype=torch.float32), name="test_allreduce")
        assert out.tolist() == [1.0, 2.0, 3.0], out
        if hvd.rank() == 0:
            missing, text = read_until_found(path)
            assert not missing, (missing, text[-3000:])
        hvd.shutdown()
    assert "HOROVOD_TIMELINE" not in os.environ  # env() restored it
    print("PASS")


if __name__ == "__main__":
    main()
