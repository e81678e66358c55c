"""A rank SIGKILLed inside a pipeline step, a ZeRO allgather or reducescatter, or a
tensor-parallel collective: the survivors' error.

Usage: parallel_fault_worker.py pipeline|zero3|zero1|zero2|tp. pipeline: the stage holding the
Killer module (rank 1 of 2, rank 2 of 4) kills itself in the second step; zero3: the last
rank kills itself in the second forward, between two allgathers; zero1, zero2: the last rank
kills itself in the backward of step KILL_STEP (after the steady path took the collectives
over), stage 2 between two units' reducescatters (one unit per parameter), stage 1 before
step()'s; tp: the last rank kills itself in its second forward between a
ColumnParallelLinear and the RowParallelLinear whose allreduce the others enter. The victim
prints `KILLING t=<time>` first; every other rank prints `SURVIVOR <exception type>:
<message>` and `SURVIVOR_AT t=<time>`, and exits 0 (run under horarun --keep-going)."""

import os
import shutil
import signal
import sys
import tempfile
import time

import torch
import torch.nn as nn

import hora.torch as hvd


KILL_STEP = 5


def die():
    print("KILLING t=%.3f" % time.time(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class Killer(nn.Module):
    """Identity that SIGKILLs this process on its n-th call on the victim rank."""

    def __init__(self, victim, n):
        super().__init__()
        self.victim, self.n, self.calls = victim, n, 0

    def forward(self, x):
        self.calls += 1
        if self.victim in (None, hvd.rank()) and self.calls == self.n:
            die()
        return KillInBackward.apply(x, self) if self.backward_too else x

    backward_too = False


class KillInBackward(torch.autograd.Function):
    """Identity whose backward SIGKILLs the victim on the Killer's n-th backward."""

    @staticmethod
    def forward(ctx, x, killer):
        ctx.killer = killer
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        k = ctx.killer
        k.backward_calls = getattr(k, "backward_calls", 0) + 1
        if k.victim == hvd.rank() and k.backward_calls == k.n_backward:
            die()
        return g, None


def zero_in_backward(stage, victim):
    killer = Killer(victim, 0)
    killer.backward_too, killer.n_backward = True, KILL_STEP
    model = nn.Sequential(nn.Linear(4, 8), killer, nn.Linear(8, 2))
    opt = hvd.ZeroOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                            stage=stage, bucket_cap_mb=1e-6)
    for step in range(1, KILL_STEP + 2):
        if step == KILL_STEP:   # what ran without the coordinator so far (printed only)
            import hora
            print("STEADY %s" % hora.steady_stats(), flush=True)
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        opt.step()


def tensor_parallel(victim):
    model = nn.Sequential(hvd.ColumnParallelLinear(4, 8, gather_output=False), Killer(victim, 2),
                          hvd.RowParallelLinear(8, 4, input_is_parallel=True))
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()


def main():
    mode = sys.argv[1]
    hvd.init()
    # pipeline: the Killer (module 2 of 4) is on stage 1 of 2, or 2 of 4
    victim = (1 if hvd.size() == 2 else 2) if mode == "pipeline" else hvd.size() - 1
    torch.manual_seed(0)
    try:
        if mode == "pipeline":
            seq = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), Killer(None, 5), nn.Linear(4, 2))
            pipe = hvd.Pipeline.from_sequential(seq, micro_batches=4, balance=[2, 2]
                                                if hvd.size() == 2 else None)
            for _ in range(3):
                pipe.train_step(torch.randn(8, 4) if pipe.is_first else None,
                                torch.randn(8, 2) if pipe.is_last else None,
                                lambda o, y: ((o - y) ** 2).mean())
        elif mode in ("zero1", "zero2"):
            zero_in_backward(int(mode[-1]), victim)
        elif mode == "tp":
            tensor_parallel(victim)
        else:
            model = nn.Sequential(nn.Linear(4, 8), Killer(victim, 2), nn.Linear(8, 2))
            opt = hvd.ZeroOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                    stage=3)
            for _ in range(3):
                opt.zero_grad()
                model(torch.randn(8, 4)).sum().backward()
                opt.step()
        print("SURVIVOR no error", flush=True)
        sys.exit(1)
    except hvd.HoraError as e:
        print("SURVIVOR %s: %s" % (type(e).__name__, str(e).replace("\n", " | ")), flush=True)
        print("SURVIVOR_AT t=%.3f" % time.time(), flush=True)
        leave(victim)
        os._exit(0)


def leave(victim):
    """Rank 0 holds the coordinator: it leaves only once every other survivor has its
    verdict (a file each), else they could see the coordinator go instead of the rank."""
    folder = os.path.join(tempfile.gettempdir(), "parallel_fault-" + os.environ.get(
        "HORA_JOB_TOKEN", str(os.getppid())))
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, str(hvd.rank())), "w").close()
    if hvd.rank() != 0:
        return
    others = [r for r in range(1, hvd.size()) if r != victim]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(folder, str(r))) for r in others):
        time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
