"""HORA_DETERMINISTIC across 2 netns hosts x 2 ranks (issue 33): the allreduces of
tests/python/workers/deterministic_worker.py equal numpy's left-to-right rank-order sum bit
for bit, grouped and per tensor, through the job's default backends across hosts
(hierarchical: shm in each host, tcp across); with the option off the same comparison
misses somewhere (so the test can fail)."""

import os

import pytest

from kit import ROOT, PY, find
from test_multihost import check_clean, horarun, hostlist, kit, ssh_args  # noqa: F401

WORKER = os.path.join(ROOT, "tests", "python", "workers", "deterministic_worker.py")
ON_CASES = ["float32_sum_grouped", "float32_sum_per_tensor", "float32_average_grouped",
            "float32_average_per_tensor", "float64_sum_grouped", "float16_sum_per_tensor"]


@pytest.mark.parametrize("mode", ["env", "off"])
def test_deterministic_sums_across_hosts(kit, mode):
    env = {"HORA_LIBRARY": find("bindings/c/libhora.so"),
           "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "bindings", "python"),
                                          os.path.dirname(WORKER)]),
           "HORA_DETERMINISTIC": "1" if mode == "env" else "0"}
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2, 2)] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", "-x", "HORA_DETERMINISTIC",
                            PY, WORKER, mode], env=env)
    text = out + err
    assert rc == 0, text[-4000:]
    for name in (["without_the_option_some_bits_differ"] if mode == "off" else ON_CASES):
        for r in range(4):
            assert "[%d]<stdout>: CASE %s PASS" % (r, name) in out, \
                "rank %d, case %s: %s" % (r, name, text[-4000:])
    check_clean(kit)
