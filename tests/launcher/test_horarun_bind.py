"""horarun --bind-to: real ranks report the CPUs they (and their threads) may run on."""

import json
import os

import pytest

from test_horarun import PY, horarun, rank_lines


BIND_PROBE = ("import os, threading, json\n"
              "seen = {}\n"
              "t = threading.Thread(target=lambda: seen.update(t=sorted(os.sched_getaffinity(0))))\n"
              "t.start(); t.join()\n"
              "print(json.dumps({'main': sorted(os.sched_getaffinity(0)), 'thread': seen['t']}))")


def bind_job(*options, np):
    rc, out, err, _ = horarun("-np", str(np), *options, PY, "-c", BIND_PROBE)
    assert rc == 0, err
    lines = rank_lines(out)
    assert sorted(lines) == list(range(np)), out
    return {rank: json.loads(lines[rank][0]) for rank in lines}


def test_bind_to_core_gives_each_rank_its_share_of_the_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    got = bind_job("--bind-to", "core", np=2)
    per = len(cpus) // 2
    for rank in (0, 1):
        assert got[rank]["main"] == cpus[rank * per:(rank + 1) * per], got
        assert got[rank]["thread"] == got[rank]["main"]  # threads inherit it
    # Default: nothing bound; more ranks than CPUs: nothing bound either.
    assert all(g["main"] == cpus for g in bind_job(np=2).values())
    over = bind_job("--bind-to", "core", np=len(cpus) + 1)
    assert all(g["main"] == cpus for g in over.values())


def test_bind_to_rejects_an_unknown_policy():
    rc, _, err, _ = horarun("-np", "1", "--bind-to", "socket", PY, "-c", "pass")
    assert rc == 2 and "--bind-to" in err and "socket" in err, err
