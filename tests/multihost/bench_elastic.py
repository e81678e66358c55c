"""Recovery time of horarun's elastic mode on the network-namespace kit (kit.py): H hosts x 2
slots, elastic_prog.py training; the worker that started as rank 0 SIGKILLs itself at the
start of epoch 1; recovery = from its KILLED_AT to the survivors' first committed step in the
next generation (RECOVERED_AT, the latest of the survivors; one clock: the hosts are
namespaces of one machine). Also checks that every survivor printed the same parameters
after every epoch. Not a CI test: run by hand, as root, from the repository root:

  HORA_TEST_BIN_ROOT=bazel-bin /usr/bin/python3 tests/multihost/bench_elastic.py 2 10
  (hosts, trials) -> one line per trial, then median and worst
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kit import HERE, PY, ROOT, Kit, find  # noqa: E402

HORARUN = os.path.join(ROOT, "tools", "launcher", "horarun")


def trial(kit, hosts):
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "discover.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n" + "".join("echo %s:2\n" % h for h in kit.hosts[:hosts]))
        os.chmod(script, 0o755)
        env = dict(kit.env, HORA_LIBRARY=find("bindings/c/libhora.so"),
                   PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
        argv = [PY, HORARUN, "-np", str(2 * hosts), "--min-np", "2",
                "--host-discovery-script", script, "--ssh-config-file", kit.ssh_config,
                "-x", "HORA_LIBRARY", "-x", "PYTHONPATH", PY,
                os.path.join(HERE, "elastic_prog.py"), "--fail-worker", "0", "--batches", "20"]
        p = subprocess.run(kit.on(kit.hosts[0], argv), env=env, capture_output=True,
                           timeout=600, stdin=subprocess.DEVNULL, cwd=ROOT)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        raise RuntimeError("job failed (%d): %s" % (p.returncode, p.stderr.decode()[-2000:]))
    killed = float(re.search(r"KILLED_AT ([\d.]+)", out).group(1))
    recovered = [float(x) for x in re.findall(r"RECOVERED_AT ([\d.]+)", out)]
    digests = {}
    for w, e, dg in re.findall(r"^\[(\d+)\]<stdout>: EPOCH (\d+) size \d+ digest (\w+)", out,
                               re.M):
        digests.setdefault(int(e), set()).add(dg)
    if any(len(v) != 1 for v in digests.values()):
        raise RuntimeError("parameters differ between survivors: %s" % digests)
    if len(recovered) != 2 * hosts - 2:
        raise RuntimeError("expected %d recovered workers: %s" % (2 * hosts - 2, out[-2000:]))
    return max(recovered) - killed


def main():
    hosts, trials = int(sys.argv[1]), int(sys.argv[2])
    kit = Kit()
    kit.setup()
    try:
        times = []
        for i in range(trials):
            t = trial(kit, hosts)
            times.append(t)
            print("%d ranks, trial %d: %.2f s" % (2 * hosts, i + 1, t), flush=True)
        print("%d ranks: median %.2f s, worst %.2f s over %d trials"
              % (2 * hosts, statistics.median(times), max(times), trials), flush=True)
    finally:
        kit.teardown()


if __name__ == "__main__":
    main()
