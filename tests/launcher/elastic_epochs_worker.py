"""An elastic training job written the way Horovod's own elastic scripts are, for
test_elastic_scenarios.py: DistributedOptimizer under hvd.elastic.run with a TorchState, a
commit after every batch, and after each epoch rank 0 appends one JSON line to --log (epoch,
its first rank in the job, size, how many times train() began, host, and the rank horarun
gave it at launch). --exit
"EPOCH:START_RANK,..." makes the workers that started as those ranks raise at the first batch
of EPOCH. --await-hosts makes rank 0 wait after the epochs listed for horarun's notice of a
host change through Horovod's `state._host_messages.empty()`."""

import argparse
import json
import os
import time

import torch

import hora.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--log", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batches", type=int, default=5)
p.add_argument("--exit", default="")
p.add_argument("--batch-sleep", type=float, default=0.0, help="seconds after each batch")
p.add_argument("--await-hosts", default="", help="epochs after which a host change comes")
args = p.parse_args()

exit_epoch, exit_ranks = -1, set()
if args.exit:
    epoch, ranks = args.exit.split(":")
    exit_epoch, exit_ranks = int(epoch), {int(r) for r in ranks.split(",")}
await_after = {int(e) for e in args.await_hosts.split(",") if e}

launch_rank = int(os.environ["HOROVOD_RANK"])  # horarun's expectation when it started us
hvd.init()
start_rank = int(os.environ["HOROVOD_RANK"])  # set again by hvd.init, from the generation
host = os.environ["HOROVOD_HOSTNAME"]
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
data, target = torch.randn(8, 4), torch.randn(8, 2)


@hvd.elastic.run
def train(state):
    state.rendezvous += 1
    while state.epoch < args.epochs:
        while state.batch < args.batches:
            if state.epoch == exit_epoch and state.batch == 0 and start_rank in exit_ranks:
                raise RuntimeError("exit as scheduled: start rank %d, epoch %d" % (
                    start_rank, state.epoch))
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(data), target).backward()
            optimizer.step()
            state.batch += 1
            state.commit()
            time.sleep(args.batch_sleep)
        if hvd.rank() == 0:
            with open(args.log, "a") as f:
                f.write(json.dumps({"epoch": state.epoch, "start_rank": start_rank,
                                    "size": hvd.size(), "rendezvous": state.rendezvous,
                                    "host": host, "launch_rank": launch_rank}) + "\n")
            if state.epoch in await_after:
                state._last_updated_timestamp = 0
                deadline = time.monotonic() + 60
                while state._host_messages.empty():
                    if time.monotonic() > deadline:
                        raise TimeoutError("no host change from horarun within 60 s")
                    time.sleep(0.1)
        state.epoch += 1
        state.batch = 0
        state.commit()


state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0, rendezvous=0)
train(state)
