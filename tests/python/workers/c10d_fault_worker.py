"""Failures under torch.distributed on "hora" (torch 2.x), one scenario per job:
  peer_failure: the last rank dies mid-training (DDP); every survivor's wait raises
                DistBackendError naming that rank.
  stall:        rank 0 alone issues an all_reduce (the others a barrier); with a short stall
                timeout every rank raises, and the report names the call's kind and number.
Prints CASE lines (workers/cases.py) for the harness."""

import os
import sys
import time

import torch
import torch.distributed as dist

import hora.torch.distributed  # noqa: F401 - registers "hora"

scenario, done_dir = sys.argv[1], sys.argv[2]
dist.init_process_group("hora")
r, n = dist.get_rank(), dist.get_world_size()


def report(name, ok, why):
    print("CASE %s %s %s" % (name, "PASS" if ok else "FAIL", why.replace("\n", " ")), flush=True)
    open(os.path.join(done_dir, "rank%d" % r), "w").close()


def leave(survivors):
    """Rank 0 hosts the coordinator: it stays until every survivor has its error (else they
    would see the coordinator vanish instead of the error it sent them)."""
    if r == 0:
        deadline = time.monotonic() + 60
        while (time.monotonic() < deadline and
               len(os.listdir(done_dir)) < len(survivors)):
            time.sleep(0.05)
    os._exit(0)  # the job is broken: no shutdown handshake


if scenario == "peer_failure":
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    model(torch.randn(4, 64)).sum().backward()  # a full step on every rank first
    if r == n - 1:
        print("DYING pid=%d" % os.getpid(), flush=True)
        os._exit(0)
    start = time.monotonic()
    try:
        for step in range(10000):
            work = dist.all_reduce(torch.ones(1000), async_op=True)
            work.wait()
        report("peer_failure", False, "no error after 10000 steps")
    except dist.DistBackendError as e:
        text = str(e)
        ok = "rank %d" % (n - 1) in text and "hora:" in text
        report("peer_failure", ok, "after %.1f s: %s" % (time.monotonic() - start, text))
elif scenario == "stall":
    try:
        if r == 0:
            dist.all_reduce(torch.ones(3))
        else:
            dist.barrier()
        report("stall", False, "the one-sided call completed")
    except dist.DistBackendError as e:
        text = str(e)
        ok = "stall" in text and ("c10d.0.allreduce." in text or
                                  "c10d.0.barrier.noname.1" in text)
        report("stall", ok, text)
else:
    sys.exit("unknown scenario " + scenario)
leave(range(n - 1) if scenario == "peer_failure" else range(n))
