"""The steady path across hosts (docs/design.md "Steady state", the board over messages), on
the network-namespace kit (see kit.py): cached small allreduces, allgathers and broadcasts
run without rank 0 on 2 hosts
at 1 and 2 ranks per host (counted by hora.steady_stats on every rank, every result checked),
a fused bucket's tensors learned and run fused again without rank 0, a training job on 4 hosts
x 2 ranks whose second half sends nothing to rank 0 (with DistributedOptimizer's buckets and
per parameter), a rank SIGKILLed in the middle of steady calls (alone or fused) named by
every survivor within the failure bounds,
and a shape that changes after the plan was cached reported on every rank naming the ranks.
Without the kit or root every test is skipped and says why."""

import os
import re
import time

import pytest

from kit import HERE, ROOT, PY, find
from test_multihost import check_clean, horarun, hostlist, kit, rank_lines, ssh_args  # noqa: F401

PROG = os.path.join(HERE, "steady_prog.py")
CALLS = 300


def env():
    return {"HORA_LIBRARY": find("bindings/c/libhora.so"),
            "PYTHONPATH": os.path.join(ROOT, "bindings", "python")}


@pytest.mark.parametrize("per_host", [1, 2])
def test_small_collectives_run_without_rank_0_across_hosts(kit, per_host):
    np = 2 * per_host
    rc, out, err = horarun(kit, ["-np", str(np), "-H", hostlist(kit, 2, per_host)] +
                           ssh_args(kit) + ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", PY, PROG,
                                            "loop", str(CALLS)], env=env())
    assert rc == 0, out[-3000:] + err[-3000:]
    lines = rank_lines(out)
    for r in range(np):
        stats = [re.match(r"STEADY fast=(\d+) slow=(\d+) entries=(\d+)", l) for l in lines.get(r, [])]
        stats = [m for m in stats if m]
        assert stats, "rank %d printed no counters: %s" % (r, out[-3000:])
        fast, slow, entries = (int(x) for x in stats[0].groups())
        # The four names (two allreduces, an allgather, a broadcast) are cached after 3 plans
        # each; nearly every later call runs fast.
        assert entries == 4, stats[0].group(0)
        assert fast >= 4 * (CALLS - 10), stats[0].group(0)
    check_clean(kit)


def test_a_fused_buckets_tensors_run_without_rank_0_across_hosts(kit):
    # 2 hosts x 2 ranks, 6 async allreduces per step that the coordinator fuses: all six are
    # learned and run on the steady path, the small ones agreed on without their data and run
    # fused with the others of their group (docs/design.md "Learning", "Groups").
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2, 2)] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", PY, PROG, "fused", "60"],
                           env=env())
    assert rc == 0, out[-3000:] + err[-3000:]
    lines = rank_lines(out)
    for r in range(4):
        stats = [m for m in (re.match(r"STEADY fast=(\d+) slow=(\d+) entries=(\d+)", l)
                             for l in lines.get(r, [])) if m]
        assert stats, "rank %d printed no counters: %s" % (r, out[-3000:])
        fast, slow, entries = (int(x) for x in stats[0].groups())
        # A tensor planned fused and alone by turns takes longer to learn (3 plans in a row
        # alike): most are learned within 20 steps.
        assert entries == 6, stats[0].group(0)
        assert fast >= 6 * (60 - 20), stats[0].group(0)
    check_clean(kit)


def every_survivor_names(victim, ranks, out, err):
    """Every rank but the victim printed "ERROR ..." first naming the victim's rank."""
    lines = rank_lines(out)
    for r in (r for r in range(ranks) if r != victim):
        errors = [l for l in lines.get(r, []) if l.startswith("ERROR ")]
        assert errors, "rank %d did not fail: %s" % (r, out[-3000:] + err[-3000:])
        assert re.search(r"rank %d\b" % victim, errors[0]), errors[0]
        print("rank %d: %s" % (r, errors[0][:300]))


@pytest.mark.parametrize("victim", [1, 2])
def test_a_rank_killed_during_fused_steady_steps_is_named_by_every_survivor(kit, victim):
    # Rank 1 shares rank 0's host (member 0 orders the groups); rank 2 leads the other host.
    start = time.monotonic()
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2, 2), "--keep-going"] +
                           ssh_args(kit) + ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", PY, PROG,
                                            "fused", "60", str(victim)], env=env())
    took = time.monotonic() - start
    assert rc != 0, out[-3000:]
    every_survivor_names(victim, 4, out, err)
    assert took < 120, took  # docs/failure-model.md's bound plus start and stop: a hang guard
    check_clean(kit)


# 3 ranks on each of 2 hosts, every call through the coordinator (steady path off): ranks 4
# and 5 reach it through rank 3's host relay, and every result is right.
def test_calls_through_a_host_relay_across_hosts(kit):
    rc, out, err = horarun(kit, ["-np", "6", "-H", hostlist(kit, 2, 3)] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", "-x", "HORA_HOST_RELAY",
                            "-x", "HORA_STEADY", "-x", "HORA_LOG_LEVEL", PY, PROG, "loop",
                            str(CALLS // 3)],
                           env=dict(env(), HORA_HOST_RELAY="on", HORA_STEADY="off",
                                    HORA_LOG_LEVEL="info"))
    assert rc == 0, out[-3000:] + err[-3000:]
    both = out + err
    for r in (3, 4, 5):
        assert "rank %d: the control plane goes through the host relay of rank 3" % r in both, \
            both[-3000:]
    for r in (0, 1, 2):
        assert "rank %d: the control plane goes through" % r not in both
    check_clean(kit)


# per_tensor: DistributedOptimizer's per-parameter allreduces (HORA_BUCKET_CAP_MB=0,
# Horovod's way): the coordinator fuses the small ones, which then run fused on the steady
# path too (design.md "Groups").
@pytest.mark.parametrize("steady,per_tensor", [("auto", False), ("auto", True), ("off", False)])
def test_steady_training_steps_send_nothing_to_rank_0(kit, steady, per_tensor):
    # examples/gpt_char_lm.py counts the messages every rank sent to the coordinator during the
    # second half of its steps (hora.control_stats, summed over the ranks). With the steady
    # path none; without it (the check that the count sees them) at least one per step.
    steps = 40
    extra = dict(HORA_STEADY=steady, HORA_BUCKET_CAP_MB="0" if per_tensor else "64")
    rc, out, err = horarun(kit, ["-np", "8", "-H", hostlist(kit, 4, 2)] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", "-x", "HORA_STEADY",
                            "-x", "HORA_BUCKET_CAP_MB", PY,
                            os.path.join(ROOT, "examples", "gpt_char_lm.py"),
                            "--steps", str(steps), "--log-every", "5", "--n-layer", "1",
                            "--n-embd", "32", "--batch-size", "4", "--sample-chars", "10",
                            "--threads", "1"], env=dict(env(), **extra))
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "PASS: every rank holds identical parameters" in out, out[-3000:]
    m = re.search(r"steps (\d+)-(\d+): (\d+) messages to rank 0's coordinator", out)
    assert m, out[-3000:]
    print(m.group(0))
    sent = int(m.group(3))
    if steady == "auto":
        assert sent == 0, m.group(0)
    else:
        assert sent >= 8 * (steps // 2), m.group(0)
    check_clean(kit)


# Two ranks per host: the steady board goes through each host's leader (its lowest rank,
# design.md "Two levels"). Rank 3 is a member of the second host, rank 2 its leader, whose
# death cuts rank 3 off from everyone. With HORA_HOST_RELAY=on and the steady path off,
# every call asks the coordinator, and rank 3's way there is rank 2's host relay
# (coordinator/host_relay.h).
@pytest.mark.parametrize("victim,relay", [(3, "auto"), (2, "auto"), (3, "on"), (2, "on")])
def test_a_rank_killed_during_steady_calls_is_named_by_every_survivor(kit, victim, relay):
    start = time.monotonic()
    extra = dict(HORA_HOST_RELAY=relay, HORA_STEADY="off" if relay == "on" else "auto")
    # --keep-going: without it horarun stops the survivors as soon as the victim dies,
    # before they print the error this test reads.
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2, 2), "--keep-going"] +
                           ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", "-x", "HORA_HOST_RELAY",
                            "-x", "HORA_STEADY", PY, PROG, "kill", str(CALLS), str(victim)],
                           env=dict(env(), **extra))
    took = time.monotonic() - start
    assert rc != 0, out[-3000:]
    every_survivor_names(victim, 4, out, err)
    # docs/failure-model.md: a dead rank is named within the heartbeat timeout (30 s) plus
    # the job's start and stop; a hang guard only, not a measurement.
    assert took < 120, took
    check_clean(kit)


def test_a_shape_change_after_the_plan_was_cached_is_named_on_every_rank(kit):
    # From call 150 on, rank 3 (second host) submits 'small' with 2 elements instead of 1:
    # the cached plan no longer fits, and the coordinator names the field and the ranks.
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2, 2)] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", PY, PROG, "shape",
                            str(CALLS), "3"], env=env())
    assert rc != 0, out[-3000:]
    lines = rank_lines(out)
    for r in range(4):
        errors = [l for l in lines.get(r, []) if l.startswith("ERROR ")]
        assert errors, "rank %d did not fail: %s" % (r, out[-3000:] + err[-3000:])
        assert re.search(r"'allreduce.small': shape differs across ranks: \[1\] on ranks 0,1,2; "
                         r"\[2\] on rank 3", errors[0]), errors[0]
    check_clean(kit)
