"""A hora.torch training loop under HORA_AUTOTUNE=1 (set by the test through horarun).

Every step checks the averaged gradients against their known value, so the results stay
correct while the coordinator moves between trials. At the end every rank prints the settings
it was told (`AUTOTUNE_STATE {json}`); the test compares them across ranks and with the CSV.
"""

import json
import sys

import torch

import hora.torch as hvd
import cases
from cases import case, check, close

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
SIZES = [1, 7, 64, 300, 1000, 5, 2048, 33, 4096, 16]  # elements of each parameter


@case
def training_under_autotune():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in SIZES]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.0),
                                   named_parameters=[("p%d" % i, p) for i, p in enumerate(params)])
    seen = []
    for step in range(STEPS):
        opt.zero_grad()
        # d loss / d p = (rank + 1) * (step + 1) * w: the average over ranks is known.
        loss = sum(((hvd.rank() + 1) * (step + 1) * torch.arange(p.numel(), dtype=torch.float32)
                    * p).sum() for p in params)
        loss.backward()
        opt.step()
        mean = (hvd.size() + 1) / 2.0 * (step + 1)
        for p in params:
            close(p.grad, mean * torch.arange(p.numel(), dtype=torch.float32), rtol=1e-6,
                  msg="step %d averaged gradient" % step)
        state = hvd.autotune_state()
        if not seen or seen[-1] != (state["fusion_threshold_bytes"], state["cycle_time_ms"]):
            seen.append((state["fusion_threshold_bytes"], state["cycle_time_ms"]))
    # One more collective, so the coordinator's last word has certainly arrived.
    hvd.allreduce(torch.ones(1), name="autotune.final")
    state = hvd.autotune_state()
    check(state["done"], "autotune not done after %d steps: %r" % (STEPS, state))
    state["settings_seen"] = len(seen)
    print("AUTOTUNE_STATE " + json.dumps(state, sort_keys=True), flush=True)


if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown)
