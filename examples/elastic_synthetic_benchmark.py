"""Elastic synthetic benchmark: a small convolutional classifier trained on random images
with hvd.elastic, so that the job keeps training when hosts come and go. Run it under
horarun's elastic mode, e.g.

  horarun -np 4 --min-np 2 --host-discovery-script ./hosts.sh /usr/bin/python3 \\
      examples/elastic_synthetic_benchmark.py --iterations 10

Each iteration of --batches-per-iter steps is timed (images/s of the whole job at its size
then); the state (model, optimizer, iteration, batch) is committed after every
--batches-per-commit steps, so a lost host costs at most that many steps. The learning rate
follows the job's size (a reset callback). Rank 0 prints `iter I: N img/s on S ranks` and at
the end the mean, and every rank checks that its parameters equal rank 0's (`PASS`).
"""

import argparse
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--batch-size", type=int, default=16, help="images per rank and step")
p.add_argument("--image-size", type=int, default=32)
p.add_argument("--batches-per-iter", type=int, default=10)
p.add_argument("--batches-per-commit", type=int, default=2)
p.add_argument("--iterations", type=int, default=10)
p.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by hvd.size()")
args = p.parse_args()

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
    torch.nn.Flatten(), torch.nn.Linear(32 * 16, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr),
                                     named_parameters=model.named_parameters())
data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.randint(0, 10, (args.batch_size,))


def rescale_lr():
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()


@hvd.elastic.run
def train(state):
    rates = []
    while state.iteration < args.iterations:
        start = time.perf_counter()
        while state.batch < args.batches_per_iter:
            optimizer.zero_grad()
            F.cross_entropy(model(data), target).backward()
            optimizer.step()
            state.batch += 1
            if state.batch % args.batches_per_commit == 0:
                state.commit()
        rate = args.batch_size * args.batches_per_iter * hvd.size() / (
            time.perf_counter() - start)
        if hvd.rank() == 0:
            print("iter %d: %.1f img/s on %d ranks" % (state.iteration, rate, hvd.size()),
                  flush=True)
        rates.append(rate)
        state.iteration += 1
        state.batch = 0
        state.commit()
    return rates


rescale_lr()
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, iteration=0, batch=0)
state.register_reset_callbacks([rescale_lr])
rates = train(state)
if hvd.rank() == 0 and rates:
    print("mean %.1f img/s over the last %d iteration(s)" % (sum(rates) / len(rates),
                                                               len(rates)), flush=True)
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
same = torch.equal(hvd.broadcast(flat, root_rank=0, name="check"), flat)
print("rank %d of %d: parameters equal rank 0's: %s" % (hvd.rank(), hvd.size(),
                                                        "PASS" if same else "FAIL"), flush=True)
hvd.shutdown()
