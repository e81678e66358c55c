"""Horovod's elastic scenarios (its test/integration/elastic_common.py) with horarun and
hora.torch on one machine, `localhost` and `127.0.0.1` standing for two hosts of 2 slots, run
with horovodrun's spelling of the flags (--min-num-proc, --max-num-proc). The job is
elastic_epochs_worker.py; the discovery script prints hosts by how many epochs the log holds,
as Horovod's tests do. Each scenario checks what rank 0 logged after each epoch: its first rank
in the job, the size, and how many times train() began."""

import json
import os
import stat

from test_horarun import horarun
from test_launch_env import base_env

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "elastic_epochs_worker.py")
PYTHON = "/usr/bin/python3"
TIMEOUT = 300  # a hung job fails the test; no time is asserted


def discovery(tmp_path, log, schedule):
    """A script printing schedule[k] once the log holds k lines (the last entry after)."""
    lines = ["#!/bin/sh", "n=$(cat %s 2>/dev/null | wc -l)" % log, "case $n in"]
    for k, hosts in enumerate(schedule[:-1]):
        lines.append("  %d) printf '%s\\n' ;;" % (k, "\\n".join(hosts)))
    lines.append("  *) printf '%s\\n' ;;" % "\\n".join(schedule[-1]))
    lines.append("esac")
    script = tmp_path / "discover.sh"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def run(tmp_path, schedule, flags, worker_args=()):
    log = tmp_path / "epochs.jsonl"
    script = discovery(tmp_path, log, schedule)
    rc, out, err, _ = horarun(*(["--host-discovery-script", script] + flags +
                                [PYTHON, WORKER, "--log", str(log)] + list(worker_args)),
                              env=base_env(), timeout=TIMEOUT)
    epochs = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
    return rc, epochs, out, err


def summary(epochs):
    # Nothing changed between a worker's launch and its first generation in these scenarios:
    # the rank horarun gave it at launch is the one it joined with.
    for e in epochs:
        assert e["launch_rank"] == e["start_rank"], e
    return [(e["epoch"], e["start_rank"], e["size"], e["rendezvous"], e["host"]) for e in epochs]


def test_a_failed_rank_leaves_the_other_host_to_finish(tmp_path):
    # -np 2, but the first generation takes every offered slot up to --max-num-proc (4), as
    # horovodrun's driver does; the worker that started as rank 0 raises at epoch 1.
    rc, epochs, out, err = run(
        tmp_path, [["localhost:2", "127.0.0.1:2"]],
        ["-np", "2", "--min-num-proc", "2", "--max-num-proc", "4"], ["--exit", "1:0"])
    assert rc == 0, (out + err)[-4000:]
    assert summary(epochs) == [(0, 0, 4, 1, "localhost"), (1, 2, 2, 2, "127.0.0.1"),
                               (2, 2, 2, 2, "127.0.0.1")], (epochs, err[-3000:])
    assert "host localhost blacklisted" in err, err[-3000:]


def test_hosts_added_and_removed_are_announced_through_host_messages(tmp_path):
    # Rank 0 waits after epochs 0 and 1 on Horovod's `state._host_messages.empty()` for the
    # driver's notice; the commit that follows re-forms the job on the new hosts.
    rc, epochs, out, err = run(
        tmp_path, [["localhost:2"], ["localhost:2", "127.0.0.1:2"], ["127.0.0.1:2"]],
        ["-np", "2", "--min-num-proc", "2", "--max-num-proc", "4"], ["--await-hosts", "0,1"])
    assert rc == 0, (out + err)[-4000:]
    assert summary(epochs) == [(0, 0, 2, 1, "localhost"), (1, 0, 4, 2, "localhost"),
                               (2, 2, 2, 3, "127.0.0.1")], (epochs, err[-3000:])


def test_a_generation_without_survivors_starts_over_and_says_so(tmp_path):
    # The only host is dropped after epoch 0 and another one offered: horovodrun's driver
    # ends such a job ("No hosts from previous set remaining"); horarun warns and the new
    # workers train from their initial state.
    rc, epochs, out, err = run(
        tmp_path, [["localhost:2"], ["127.0.0.1:2"]], ["-np", "2", "--max-num-proc", "4"],
        ["--batch-sleep", "0.2"])
    assert rc == 0, (out + err)[-4000:]
    assert "no worker of generation 0 is left; generation 1 starts from its workers' " \
           "initial state" in err, err[-3000:]
    assert summary(epochs)[0] == (0, 0, 2, 1, "localhost"), epochs
    assert summary(epochs)[-3:] == [(e, 0, 2, 1, "127.0.0.1") for e in range(3)], epochs


def test_every_failing_host_ends_the_job_with_the_failure_code(tmp_path):
    rc, epochs, out, err = run(
        tmp_path, [["localhost:2", "127.0.0.1:2"]],
        ["-np", "4", "--min-num-proc", "2"], ["--exit", "1:0,2"])
    assert rc == 1, (out + err)[-4000:]
    assert summary(epochs) == [(0, 0, 4, 1, "localhost")], epochs
    assert "the first failure's code is 1" in err, err[-3000:]


def test_horovodrun_only_flags_are_named_or_refused():
    rc, out, err, _ = horarun("--config-file", "hvd.yaml", "-np", "1", "true")
    assert rc == 2 and "--config-file is not supported" in err, err
    rc, out, err, _ = horarun("-np", "1", "--torus-allreduce", "-prefix-timestamp",
                              "--log-without-timestamp", PYTHON, "-c", "print('ran')")
    assert rc == 0 and "ran" in out, err
    for flag in ("--torus-allreduce", "--prefix-output-with-timestamp",
                 "--log-without-timestamp"):
        assert "%s has no effect" % flag in err, err
    rc, out, err, _ = horarun("-v")
    assert rc == 0 and "horarun (Hora)" in out + err, (out, err)
