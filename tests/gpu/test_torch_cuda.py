# Run on a GPU machine with hora installed: python -m pytest tests/gpu/test_torch_cuda.py
"""hora.torch on CUDA tensors through a real job (`horarun -np 1`, since NCCL refuses two
ranks on one GPU): every case of torch_cuda_worker.py must pass. Needs torch with CUDA and a
GPU; without one every test is skipped, saying why. horarun is $HORARUN, else `horarun` on
PATH (the wheel's console script), else the repository's tools/launcher/horarun."""

import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_cuda_worker.py")
CASES = re.findall(r"^@case\ndef (\w+)\(", open(WORKER).read(), re.M)
_CASE = re.compile(r"^\[0\]<stdout>: CASE (\S+) (PASS|FAIL)(?: (.*))?$")


def _horarun():
    found = os.environ.get("HORARUN") or shutil.which("horarun")
    if found:
        return [found]
    repo = os.path.join(HERE, "..", "..", "tools", "launcher", "horarun")
    return [os.path.normpath(repo)]


def _gpu():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture(scope="module")
def job():
    if not _gpu():
        pytest.skip("no CUDA GPU visible to torch on this machine")
    p = subprocess.run(_horarun() + ["-np", "1", sys.executable, WORKER],
                       capture_output=True, timeout=420, universal_newlines=True)
    results = {}
    for line in (p.stdout + "\n" + p.stderr).splitlines():
        m = _CASE.match(line)
        if m:
            results[m.group(1)] = (m.group(2), m.group(3) or "")
    return p, results


def test_job_exits_cleanly(job):
    p, _ = job
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    p, results = job
    status, why = results.get(case, ("MISSING", ""))
    assert status == "PASS", "%s: %s %s\n%s" % (case, status, why, (p.stdout + p.stderr)[-4000:])
