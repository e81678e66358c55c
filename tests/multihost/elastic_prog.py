"""A training worker for horarun's elastic mode (tests/multihost/test_elastic_hosts.py).

A small linear model trained with hvd.DistributedOptimizer on data fixed by (epoch, batch),
TorchState(model, optimizer, epoch, batch) committed after every batch. Prints, per finished
epoch, `EPOCH e size s digest d` (d: sha256 of the parameters' bytes) and at the end
`DONE worker W rank r size s digest d`; KILLED_AT t before a kill, RECOVERED_AT t after the
first committed step of each later generation (for tests/multihost/bench_elastic.py). Faults, on the worker that HORARUN_WORKER names:
  --fail-worker W --fail-epoch E --fail-how kill|raise   at the start of epoch E
  --fail-all CODE          every worker exits with CODE at the start of epoch --fail-epoch
  --grow-file F --grow-line L --grow-to N   worker 0 appends L to F at the start of epoch 1;
                           after that epoch every rank commits every 0.2 s until the size is
                           N (HostsUpdatedInterrupt), 120 s at most
  --shrink-file F --shrink-line L   worker 0 replaces F's hosts with L at the start of epoch 1
"""

import argparse
import hashlib
import os
import signal
import sys
import time

import torch

import hora.torch as hvd
from hora import elastic_client

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batches", type=int, default=4)
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument("--fail-worker", default=None)
p.add_argument("--fail-epoch", type=int, default=1)
p.add_argument("--fail-how", default="kill")
p.add_argument("--fail-all", type=int, default=None)
p.add_argument("--grow-file", default=None)
p.add_argument("--grow-line", default="")
p.add_argument("--grow-to", type=int, default=0)
p.add_argument("--shrink-file", default=None)
p.add_argument("--shrink-line", default="")
args = p.parse_args()
WORKER = os.environ.get("HORARUN_WORKER", "?")

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named_parameters=model.named_parameters())


def digest():
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def say(text):
    print(text, flush=True)


def fault(epoch):
    if args.fail_all is not None and epoch == args.fail_epoch:
        say("worker %s: failing with code %d" % (WORKER, args.fail_all))
        sys.stdout.flush()
        os._exit(args.fail_all)
    if WORKER == args.fail_worker and epoch == args.fail_epoch:
        say("worker %s: %s at the start of epoch %d" % (WORKER, args.fail_how, epoch))
        if args.fail_how == "kill":
            say("KILLED_AT %.6f" % time.time())
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("worker %s gives up" % WORKER)


@hvd.elastic.run
def train(state):
    recovering = elastic_client.generation() > 0
    say("worker %s: generation as rank %d of %d from epoch %d batch %d digest %s"
        % (WORKER, hvd.rank(), hvd.size(), state.epoch, state.batch, digest()))
    while state.epoch < args.epochs:
        if state.batch == 0:
            fault(state.epoch)
            if args.grow_file and WORKER == "0" and state.epoch == 1 and \
                    not os.path.exists(args.grow_file + ".done"):
                with open(args.grow_file, "a") as f:
                    f.write(args.grow_line + "\n")
                open(args.grow_file + ".done", "w").close()
            if args.shrink_file and WORKER == "0" and state.epoch == 1 and \
                    not os.path.exists(args.shrink_file + ".done"):
                with open(args.shrink_file + ".new", "w") as f:
                    f.write(args.shrink_line + "\n")
                os.rename(args.shrink_file + ".new", args.shrink_file)  # never half written
                open(args.shrink_file + ".done", "w").close()
        while state.batch < args.batches:
            g = torch.Generator().manual_seed(1000 * state.epoch + state.batch)
            x = torch.randn(8, 16, generator=g)
            y = torch.randn(8, 4, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            time.sleep(args.step_sleep)
            state.batch += 1
            state.commit()
            if recovering:  # the first committed step of a later generation
                say("RECOVERED_AT %.6f generation %d" % (time.time(), elastic_client.generation()))
                recovering = False
        say("EPOCH %d size %d digest %s" % (state.epoch, hvd.size(), digest()))
        state.epoch += 1
        state.batch = 0
        state.commit()
        if args.grow_to and state.epoch == 2:
            deadline = time.monotonic() + 120
            while hvd.size() < args.grow_to and time.monotonic() < deadline:
                time.sleep(0.2)
                state.commit()


state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=0, batch=0)
train(state)
say("DONE worker %s rank %d size %d digest %s" % (WORKER, hvd.rank(), hvd.size(), digest()))
hvd.shutdown()
