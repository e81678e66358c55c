"""examples/gpt_parallel.py across 2 netns hosts x 2 ranks, as Megatron-LM lays a job out:
tensor parallelism inside a host, the pipeline's stages (send/recv of activations and
gradients) or the data-parallel replicas across hosts. With HORA_DETERMINISTIC each layout
must print the same losses, to the last printed digit, as the same layout on one host of 4
ranks: the cross-host transports change where the bytes go, not the arithmetic."""

import os
import re

import pytest

from kit import ROOT, PY, find
from test_multihost import check_clean, horarun, hostlist, kit, ssh_args  # noqa: F401

EXAMPLE = os.path.join(ROOT, "examples", "gpt_parallel.py")
LAYOUTS = {
    # ranks 0-1 on the first host, 2-3 on the second: TP pairs in a host, stages across
    "tp2_pp2": ["--tp", "2", "--pp", "2"],
    # two stages, two replicas each, ZeRO-1 over the replicas
    "pp2_dp2_zero1": ["--pp", "2", "--zero", "1"],
}


def losses(kit, hosts, args):
    env = {"HORA_LIBRARY": find("bindings/c/libhora.so"),
           "PYTHONPATH": os.path.join(ROOT, "bindings", "python"), "HORA_DETERMINISTIC": "1"}
    rc, out, err = horarun(kit, ["-np", "4", "-H", hosts] + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", "-x", "HORA_DETERMINISTIC",
                            PY, EXAMPLE] + args +
                           ["--steps", "6", "--warmup", "2", "--log-every", "2", "--n-layer", "2",
                            "--n-embd", "64", "--block-size", "32", "--batch-size", "8"],
                           env=env)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "PASS" in out, out[-3000:]
    got = re.findall(r"^\[0\]<stdout>: step +\d+/\d+ +loss (\S+)", out, re.M)
    assert len(got) >= 3, out[-3000:]
    return got


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_across_hosts_trains_as_on_one_host(kit, layout):
    across = losses(kit, hostlist(kit, 2, 2), LAYOUTS[layout])
    one = losses(kit, "%s:4" % kit.hosts[0], LAYOUTS[layout])
    print("%s: across 2 hosts %s, on one host %s" % (layout, across, one))
    assert across == one, (across, one)
    check_clean(kit)
