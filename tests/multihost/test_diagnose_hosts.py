"""The hang diagnosis across hosts (docs/failure-model.md "Diagnosis"), on the
network-namespace kit (see kit.py): 3 hosts x 1 rank over ssh; rank 1 sleeps in a named
Python function, or is wedged in a C call that holds the GIL, while ranks 0 and 2 wait in
allreduce 'grad.7'. With a 10 s stall timeout the job ends within 45 s and horarun's output
names rank 1 with its host, the tensor and what it is doing. Without the kit or root every
test is skipped and says why."""

import os
import re
import time

import pytest

from kit import ROOT, PY, find
from test_multihost import check_clean, horarun, hostlist, kit, rank_lines, ssh_args  # noqa: F401

WORKER = os.path.join(ROOT, "tests", "python", "workers", "diagnose_worker.py")
TENSOR = "allreduce 'allreduce.grad.7'"


@pytest.mark.parametrize("mode,doing", [
    ("python", r"it is in stuck_in_data_loader \(diagnose_worker\.py:\d+\) <- main"),
    ("c", r"it is wedged outside Python: .*its last completed operation was allreduce "
          r"'allreduce\.warmup'"),
])
def test_a_stalled_rank_on_another_host_is_named(kit, tmp_path, mode, doing):
    env = {"HORA_LIBRARY": find("bindings/c/libhora.so"),
           "PYTHONPATH": os.path.join(ROOT, "bindings", "python"),
           "HORA_STALL_TIMEOUT_SECONDS": "10",
           "HORA_DIAGNOSE_FILE": str(tmp_path / "diagnosis.txt")}
    start = time.monotonic()
    rc, out, err = horarun(kit, ["-np", "3", "-H", hostlist(kit, 3, 1)] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH",
                            "-x", "HORA_STALL_TIMEOUT_SECONDS", "-x", "HORA_DIAGNOSE_FILE",
                            PY, WORKER, mode], env=env, timeout=45)
    elapsed = time.monotonic() - start
    assert elapsed < 45, elapsed
    assert rc != 0, out[-3000:] + err[-3000:]
    pid = re.search(r"READY rank=1 pid=(\d+)", out)
    assert pid, out[-3000:] + err[-3000:]
    named = [l for l in rank_lines(err, "stderr").get(0, [])
             if l.lstrip().startswith("rank 1 (host %s, pid %s) never submitted %s: "
                                      % (kit.hosts[1], pid.group(1), TENSOR))]
    assert named, "rank 0 did not name rank 1 on %s:\n%s" % (kit.hosts[1], err[-4000:])
    assert re.search(doing, named[0]), named[0]
    assert "ranks 0,2 have waited for it in %s" % TENSOR in named[0], named[0]
    with open(str(tmp_path / "diagnosis.txt")) as f:
        whole = f.read()
    for r in range(3):
        assert "== rank %d (host %s, " % (r, kit.hosts[r]) in whole, whole
    print("\nDIAGNOSE %s across hosts: job ended after %.1f s; %s" % (mode, elapsed, named[0]))
    check_clean(kit)
