"""hvd.start_timeline / hvd.stop_timeline at run time, from hora.torch (one process per rank
under horarun): steps before the start are not in the file, steps between are, a second
start while on is refused. argv[1]: the timeline's base path."""

import sys

import torch

import hora.torch as hvd


def step(tag, n):
    handles = [hvd.allreduce_async(torch.ones(1000 + i), name="%s%d" % (tag, i))
               for i in range(n)]
    for h in handles:
        hvd.synchronize(h)


def main():
    hvd.init()
    step("before.", 2)
    hvd.start_timeline(sys.argv[1])
    try:
        hvd.start_timeline(sys.argv[1])
        raise SystemExit("a second start_timeline was not refused")
    except hvd.HoraPreconditionError:
        pass
    for _ in range(3):
        step("during.", 3)
    hvd.stop_timeline()
    hvd.stop_timeline()  # nothing on: fine
    step("after.", 2)
    hvd.shutdown()
    print("ok")


if __name__ == "__main__":
    main()
