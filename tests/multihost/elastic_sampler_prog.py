"""An ElasticSampler across a membership change (tests/multihost/test_elastic_hosts.py).

The dataset is the indices 0..N-1; every rank trains on batches of B of its share and prints,
when its commit saves a batch, `COMMITTED epoch e worker w samples i,j` (at the save: a commit
whose host-update check then fails, because a peer died, has still committed the batch). Worker 0 (rank 0 of the first
generation) SIGKILLs itself before its batch --kill-batch of epoch 0, so the survivors go on
from the last commit with the rest of the epoch re-partitioned over fewer ranks: the committed
samples of each epoch, over every worker, are then each index exactly once."""

import argparse
import os
import signal

import torch

import hora.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--samples", type=int, default=48)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--kill-batch", type=int, default=2)
args = p.parse_args()
WORKER = os.environ.get("HORARUN_WORKER", "?")

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(1, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(args.samples)), shuffle=True, seed=7)
saving = []  # the batch the next save commits


class ReportingState(hvd.elastic.TorchState):
    def save(self):
        super().save()
        if saving:
            print("COMMITTED epoch %d worker %s samples %s" % (
                self.epoch, WORKER, ",".join(map(str, saving))), flush=True)
            del saving[:]


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        mine = list(iter(state.sampler))
        for i in range(0, len(mine), args.batch):
            if WORKER == "0" and state.epoch == 0 and i // args.batch == args.kill_batch:
                os.kill(os.getpid(), signal.SIGKILL)
            batch = mine[i:i + args.batch]
            x = torch.tensor(batch, dtype=torch.float32).unsqueeze(1)
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            state.sampler.record_batch(i // args.batch, args.batch)
            saving[:] = batch
            state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(ReportingState(model=model, optimizer=opt, sampler=sampler, epoch=0))
print("DONE worker %s size %d" % (WORKER, hvd.size()), flush=True)
hvd.shutdown()
