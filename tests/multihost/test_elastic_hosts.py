"""horarun's elastic mode (tools/launcher/horarun_elastic.py) on the network-namespace kit
(kit.py), 2 hosts x 2 slots, with elastic_prog.py as the training job: the worker that
started as rank 0 (and so held the coordinator) SIGKILLs itself, or raises, at the start of
epoch 1, and the two workers of the other host finish epochs 1 and 2 from the last commit
with identical parameters; a host the discovery script adds joins (2 ranks, then 4); every
worker failing ends the job with the first failure's code; fewer than --min-np ends it after
--elastic-timeout naming the hosts; --reset-limit holds. Without the kit or root every test
is skipped and says why."""

import os
import re
import stat

from kit import HERE, PY
from test_multihost import check_clean, horarun, kit, rank_lines, ssh_args  # noqa: F401
from test_steady_hosts import env

PROG = os.path.join(HERE, "elastic_prog.py")
PASS = ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH"]


def discovery(tmp_path, lines):
    """A discovery script that prints the file `hosts` (returned with the script)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(l + "\n" for l in lines))
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat %s\n" % hosts)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), str(hosts)


def elastic(kit, tmp_path, flags, prog_args, hosts=None):
    hosts = hosts if hosts is not None else ["%s:2" % h for h in kit.hosts[:2]]
    script, hosts_file = discovery(tmp_path, hosts)
    rc, out, err = horarun(kit, ["--host-discovery-script", script] + flags + ssh_args(kit) +
                           PASS + [PY, PROG] + prog_args, env=env())
    return rc, out, err, hosts_file


def epochs(lines):
    """[(epoch, size, digest)] a worker printed."""
    found = [re.match(r"EPOCH (\d+) size (\d+) digest (\w+)", l) for l in lines]
    return [(int(m.group(1)), int(m.group(2)), m.group(3)) for m in found if m]


def done(lines):
    found = [re.match(r"DONE worker (\d+) rank (\d+) size (\d+) digest (\w+)", l) for l in lines]
    return [m.groups() for m in found if m]


def check_survivors(rc, out, err):
    assert rc == 0, out[-4000:] + err[-4000:]
    lines = rank_lines(out)
    # Workers 0 and 1 ran on the first host: 0 failed, 1 was stopped with its host.
    assert not done(lines.get(0, [])) and not done(lines.get(1, [])), out[-3000:]
    finals = [done(lines.get(w, [])) for w in (2, 3)]
    assert all(len(f) == 1 for f in finals), out[-4000:] + err[-2000:]
    assert {f[0][2] for f in finals} == {"2"}, finals
    assert len({f[0][3] for f in finals}) == 1, "parameters differ: %s" % finals
    for w in (2, 3):
        seen = epochs(lines[w])
        # Epoch 0 at size 4, then epochs 1 and 2 at size 2, once each, the same on both.
        assert [(e, s) for e, s, _ in seen] == [(0, 4), (1, 2), (2, 2)], (w, seen)
        # The new generation started from the commit at the end of epoch 0.
        assert any(re.search(r"rank \d of 2 from epoch 1 batch 0", l) for l in lines[w]), \
            lines[w]
    assert epochs(lines[2]) == epochs(lines[3])
    assert "generation 1: 2 rank(s) on %s" % kit_host(1) in err, err[-3000:]


def kit_host(i):
    return "%sh%d" % (os.environ.get("HORA_MULTIHOST_PREFIX", "hmh"), i + 1)


def test_rank_0_sigkilled_survivors_finish_from_the_last_commit(kit, tmp_path):
    rc, out, err, _ = elastic(kit, tmp_path, ["-np", "4", "--min-np", "2"],
                              ["--fail-worker", "0", "--fail-how", "kill"])
    check_survivors(rc, out, err)
    assert "worker 0 on %s was killed by SIGKILL" % kit.hosts[0] in err, err[-3000:]
    check_clean(kit)


def test_rank_0_raises_survivors_finish_from_the_last_commit(kit, tmp_path):
    rc, out, err, _ = elastic(kit, tmp_path, ["-np", "4", "--min-np", "2"],
                              ["--fail-worker", "0", "--fail-how", "raise"])
    check_survivors(rc, out, err)
    assert "worker 0 on %s exited with code 1" % kit.hosts[0] in err, err[-3000:]
    check_clean(kit)


def test_a_discovered_host_joins(kit, tmp_path):
    line = "%s:2" % kit.hosts[1]
    rc, out, err, hosts_file = elastic(
        kit, tmp_path, ["-np", "2", "--min-np", "2", "--max-np", "4"],
        ["--epochs", "3", "--grow-file", str(tmp_path / "hosts"), "--grow-line", line,
         "--grow-to", "4"], hosts=["%s:2" % kit.hosts[0]])
    assert rc == 0, out[-4000:] + err[-4000:]
    lines = rank_lines(out)
    finals = [done(lines.get(w, [])) for w in range(4)]
    assert all(len(f) == 1 for f in finals), out[-4000:] + err[-2000:]
    assert {f[0][2] for f in finals} == {"4"}, finals
    assert len({f[0][3] for f in finals}) == 1, "parameters differ: %s" % finals
    # The first workers: epochs 0 and 1 at 2 ranks, epoch 2 at 4; the new ones only epoch 2.
    for w in (0, 1):
        assert [(e, s) for e, s, _ in epochs(lines[w])] == [(0, 2), (1, 2), (2, 4)]
    for w in (2, 3):
        assert [(e, s) for e, s, _ in epochs(lines[w])] == [(2, 4)]
    assert "generation 1: 4 rank(s)" in err, err[-3000:]
    check_clean(kit)


def test_a_host_the_discovery_script_drops_is_stopped_and_the_rest_go_on(kit, tmp_path):
    # 2 hosts x 2; at epoch 1 the script stops offering the second host: the driver stops its
    # workers, the first host's two finish at 2 ranks with identical parameters, exit 0.
    rc, out, err, _ = elastic(
        kit, tmp_path, ["-np", "4", "--min-np", "2"],
        ["--epochs", "3", "--step-sleep", "0.5", "--shrink-file", str(tmp_path / "hosts"),
         "--shrink-line", "%s:2" % kit.hosts[0]])
    assert rc == 0, out[-4000:] + err[-4000:]
    lines = rank_lines(out)
    finals = [done(lines.get(w, [])) for w in range(4)]
    assert [len(f) for f in finals] == [1, 1, 0, 0], out[-4000:] + err[-2000:]
    assert {f[0][2] for f in finals[:2]} == {"2"}, finals
    assert finals[0][0][3] == finals[1][0][3], "parameters differ: %s" % finals
    assert "host %s is no longer offered" % kit.hosts[1] in err, err[-3000:]
    check_clean(kit)


def test_an_elastic_sampler_trains_each_sample_once_per_epoch_across_a_lost_rank_0(kit,
                                                                                    tmp_path):
    # 48 samples, batches of 2: rank 0 dies after 2 committed batches of epoch 0 (16 samples
    # of the job); the 2 survivors finish the other 32 and epoch 1 between them.
    script, _ = discovery(tmp_path, ["%s:2" % h for h in kit.hosts[:2]])
    rc, out, err = horarun(kit, ["--host-discovery-script", script, "-np", "4", "--min-np", "2"] +
                           ssh_args(kit) + PASS +
                           [PY, os.path.join(HERE, "elastic_sampler_prog.py")], env=env())
    assert rc == 0, out[-4000:] + err[-4000:]
    seen = {0: [], 1: []}
    for line in out.splitlines():
        m = re.search(r"COMMITTED epoch (\d+) worker \d+ samples ([\d,]+)", line)
        if m:
            seen[int(m.group(1))] += [int(i) for i in m.group(2).split(",")]
    for epoch, samples in seen.items():
        assert sorted(samples) == list(range(48)), (epoch, sorted(samples))
    assert len(re.findall(r"DONE worker \d+ size 2", out)) == 2, out[-3000:]
    check_clean(kit)


def test_every_worker_failing_ends_with_the_first_failures_code(kit, tmp_path):
    rc, out, err, _ = elastic(kit, tmp_path, ["-np", "4", "--min-np", "1"],
                              ["--fail-all", "7"])
    assert rc == 7, out[-3000:] + err[-3000:]
    assert "the first failure's code is 7" in err, err[-3000:]
    check_clean(kit)


def test_fewer_than_min_np_ends_after_the_timeout_naming_the_hosts(kit, tmp_path):
    rc, out, err, _ = elastic(kit, tmp_path, ["-np", "4", "--min-np", "3",
                                              "--elastic-timeout", "3"],
                              ["--fail-worker", "0", "--fail-how", "kill"])
    assert rc == 137, out[-3000:] + err[-3000:]
    assert re.search(r"only 2 worker\(s\) \(on %s\) for 3s, fewer than --min-np 3"
                     % re.escape(kit.hosts[1]), err), err[-3000:]
    check_clean(kit)


def test_reset_limit_holds(kit, tmp_path):
    rc, out, err, _ = elastic(kit, tmp_path, ["-np", "4", "--min-np", "2", "--reset-limit",
                                              "0"], ["--fail-worker", "0", "--fail-how",
                                                     "raise"])
    assert rc == 1, out[-3000:] + err[-3000:]
    assert "past --reset-limit 0" in err, err[-3000:]
    lines = rank_lines(out)
    assert not any(done(lines.get(w, [])) for w in range(4)), out[-3000:]
    check_clean(kit)


def test_example_keeps_training_across_a_killed_host(kit, tmp_path):
    """examples/elastic_synthetic_benchmark.py, horarun in the root namespace, 2 hosts x 2:
    once rank 0 printed its first iteration, every worker process on the first host is
    SIGKILLed (the host is lost); the other host's 2 workers finish every iteration."""
    import signal
    import subprocess
    import time
    from kit import ROOT
    from test_multihost import HORARUN
    script, _ = discovery(tmp_path, ["%s:2" % h for h in kit.hosts[:2]])
    argv = [PY, HORARUN, "-np", "4", "--min-np", "2", "--host-discovery-script", script] + \
        ssh_args(kit) + PASS + [PY, os.path.join(ROOT, "examples",
                                                 "elastic_synthetic_benchmark.py"),
                                "--iterations", "6", "--batches-per-iter", "10"]
    out_file = tmp_path / "out"
    with open(out_file, "wb") as out:
        job = subprocess.Popen(argv, env=dict(kit.env, **env()), stdout=out,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + 240
        while b"iter 0:" not in out_file.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = [pid for pid, cmd in kit.strays().get(kit.hosts[0], [])
                  if "elastic_synthetic_benchmark" in cmd and "horarun" not in cmd]
        assert killed, kit.strays()
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        _, err = job.communicate(timeout=300)
    out = out_file.read_text()
    err = err.decode("utf-8", "replace")
    assert job.returncode == 0, out[-3000:] + err[-3000:]
    assert "iter 5:" in out and "on 2 ranks" in out, out[-3000:]
    passed = re.findall(r"rank \d of 2: parameters equal rank 0's: PASS", out)
    assert len(passed) == 2, out[-3000:]
    check_clean(kit)
