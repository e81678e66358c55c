# Run on a GPU machine with hora installed: python -m pytest tests/gpu/test_torch_cuda.py
"""hora.torch on CUDA tensors through real jobs: every case of torch_cuda_worker.py must pass,
at world size 1 (`horarun -np 1`, the default data plane: NCCL) and at 2 and 4 ranks sharing
the one GPU (NCCL refuses that: HORA_GPU_OPERATIONS=shm, the staged data plane through pinned
host memory). Needs torch with CUDA and a GPU; without one every test is skipped, saying why.
horarun is $HORARUN, else `horarun` on PATH (the wheel's console script), else the
repository's tools/launcher/horarun. Each job is bounded by $HORA_GPU_JOB_TIMEOUT seconds
(default 420; tools/gpu_check.sh keeps it inside its own part's limit)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_cuda_worker.py")
CASES = re.findall(r"^@case\ndef (\w+)\(", open(WORKER).read(), re.M)
_CASE = re.compile(r"^\[(\d+)\]<stdout>: CASE (\S+) (PASS|FAIL|SKIP)(?: (.*))?$")
# (ranks, HORA_GPU_OPERATIONS)
JOBS = [(1, "auto"), (2, "shm"), (4, "shm"), (2, "gloo")]


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


_jobs = {}


def _job(np, ops):
    if not _gpu():
        pytest.skip("no CUDA GPU visible to torch on this machine")
    if (np, ops) not in _jobs:
        timeout = float(os.environ.get("HORA_GPU_JOB_TIMEOUT", "420"))
        env = dict(os.environ, HORA_GPU_OPERATIONS=ops)
        if ops != "auto":  # the CPU tensors' figures beside the staged ones: the same backend
            env["HORA_CPU_OPERATIONS"] = ops
        try:
            p = subprocess.run(_horarun() + ["-np", str(np), sys.executable, WORKER],
                               capture_output=True, timeout=timeout, universal_newlines=True,
                               env=env)
            out, rc = p.stdout + "\n" + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = "%s\n%s\nthe job did not end within %.0f s" % (
                e.stdout or "", e.stderr or "", timeout)
            rc = None
        sys.stdout.write(out)  # the figures (STAGED_BUSBW) reach the log
        results = {}
        for line in out.splitlines():
            m = _CASE.match(line)
            if m:
                rank, name, status, why = m.groups()
                if status != "PASS" or name not in results:
                    results[name] = (status, "rank %s: %s" % (rank, why or ""))
        _jobs[(np, ops)] = (rc, out, results)
    return _jobs[(np, ops)]


@pytest.mark.parametrize("np,ops", JOBS, ids=["np%d-%s" % j for j in JOBS])
def test_job_exits_cleanly(np, ops):
    rc, out, _ = _job(np, ops)
    assert rc == 0, out[-6000:]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("np,ops", JOBS, ids=["np%d-%s" % j for j in JOBS])
def test_case(np, ops, case):
    rc, out, results = _job(np, ops)
    status, why = results.get(case, ("MISSING", ""))
    if status == "SKIP":
        pytest.skip(why)
    assert status == "PASS", "%s: %s %s\n%s" % (case, status, why, out[-4000:])
