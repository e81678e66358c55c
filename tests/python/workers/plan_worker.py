"""hora.torch.plan on the example GPT (small), every rank: predictions for every layout of
the job, the best two confirmed by running them, a memory budget that rules layouts out."""

import io
import os
import sys

import torch

import hora.torch as hvd
from hora.torch import plan as planner
import cases
from cases import case, check

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "examples"))
import gpt_parallel  # noqa: E402

SPEC = {}


def init():
    hvd.init()
    torch.set_num_threads(1)
    SPEC.update(gpt_parallel.plan_spec(n_layer=2, n_embd=32, n_head=4, block_size=16))


@case
def every_layout_predicted_and_the_best_confirmed():
    out = io.StringIO()
    rows = planner.plan(SPEC["factory"], SPEC["batch"], SPEC["loss_fn"], global_batch=8,
                        confirm=2, steps=1, out=out)
    names = [r["layout"] for r in rows]
    modules = 2 + 2 * 2   # the example GPT at 2 layers: embedding, 2 x (attention, MLP), head
    want = [str(c) for c in planner.candidates(hvd.size(), 8)
            if c.pp * c.virtual_stages <= modules]
    check(names == want, "layouts %s, want %s" % (names, want))
    check(all(r["predicted_s"] > 0 and r["memory_bytes"] > 0 for r in rows), str(rows))
    confirmed = sorted(rows, key=lambda r: r["predicted_s"])[:2]
    check(all(r["measured_s"] and r["measured_s"] > 0 for r in confirmed), str(confirmed))
    check(sum(r["measured_s"] is not None for r in rows) == 2, str(rows))
    text = out.getvalue()
    if hvd.rank() == 0:
        check(text.count("chosen") == 1 and "| DP %d |" % hvd.size() in text, text)
        print("PLAN\n" + text.replace("\n", "\nPLAN "), flush=True)
    else:
        check(text == "", "only rank 0 prints: %r" % text)


@case
def memory_budget_rules_layouts_out():
    first = planner.plan(SPEC["factory"], SPEC["batch"], SPEC["loss_fn"], global_batch=8,
                         confirm=0, out=io.StringIO())
    mems = sorted(r["memory_bytes"] for r in first)
    budget = mems[len(mems) // 2]
    rows = planner.plan(SPEC["factory"], SPEC["batch"], SPEC["loss_fn"], global_batch=8,
                        memory_budget=budget, confirm=1, steps=1, out=io.StringIO())
    for r in rows:
        check(r["fits"] == (r["memory_bytes"] <= budget), str(r))
        check(r["measured_s"] is None or r["fits"], "ran a layout over budget: %s" % r)
    check(any(not r["fits"] for r in rows) and any(r["fits"] for r in rows), str(rows))


if __name__ == "__main__":
    cases.run_all(init, hvd.shutdown, only=sys.argv[1:] or None)
