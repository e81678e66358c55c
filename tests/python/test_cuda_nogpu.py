"""CUDA and NCCL on a machine without a GPU (CI): CUDA tensors are refused on every rank with
a clear error and the job goes on; HORA_GPU_OPERATIONS selection and its errors; NCCL's
version and loader (HORA_NCCL_LIBRARY); horarun --check-build's NCCL and CUDA lines; and
libhora.so has no link-time dependency on CUDA or NCCL. On a machine with a GPU the refusal
cases do not apply (tests/gpu/ covers that machine) and are skipped, saying why."""

import ctypes
import os
import subprocess
import sys

import pytest

import harness

CASES = harness.case_names("cuda_nogpu_worker")
LIB = os.environ.get("HORA_LIBRARY", "")


def _has_gpu():
    out = subprocess.run([sys.executable, "-c", "import hora; print(hora.cuda_info())"],
                         env=harness.job_env(), capture_output=True, timeout=60,
                         universal_newlines=True).stdout
    return "cudaGetDeviceCount" not in out


@pytest.fixture(scope="module")
def job():
    if _has_gpu():
        pytest.skip("this machine has a usable GPU: the no-GPU refusal does not apply")
    return harness.run_job(2, "cuda_nogpu_worker.py", timeout=180,
                           extra_env={"HORA_GPU_OPERATIONS": "nccl"})


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)


@pytest.mark.parametrize("var,value,expected", [
    ("HORA_CPU_OPERATIONS", "nccl",
     "HORA_CPU_OPERATIONS=nccl: backend 'nccl' serves cuda tensors, not cpu"),
    ("HORA_GPU_OPERATIONS", "bogus",
     "HORA_GPU_OPERATIONS=bogus: no backend 'bogus' is built into this libhora"),
])
def test_operations_errors_fail_init_on_every_rank(var, value, expected):
    code = ("import hora\n"
            "try:\n    hora.init()\n    print('INIT OK')\n"
            "except hora.HoraError as e:\n    print('INIT ERROR', e)\n")
    p = subprocess.run([harness.horarun(), "-np", "2", harness.PYTHON, "-c", code],
                       env=harness.job_env({var: value}), capture_output=True,
                       timeout=120, universal_newlines=True)
    out = p.stdout + p.stderr
    for rank in range(2):
        lines = [l for l in out.splitlines() if l.startswith("[%d]" % rank) and "INIT" in l]
        assert lines and "INIT ERROR" in lines[0] and expected in lines[0], out


def _nccl_version(extra_env):
    code = "import hora, json; print(json.dumps(hora.nccl_version()))"
    p = subprocess.run([sys.executable, "-c", code], env=harness.job_env(extra_env),
                       capture_output=True, timeout=60, universal_newlines=True)
    assert p.returncode == 0, p.stderr
    import json
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_nccl_is_loaded_at_run_time_with_its_version():
    env = {k: "" for k in ("HORA_NCCL_LIBRARY",)}
    code, detail = _nccl_version(env)
    assert code >= 21400, detail
    assert "libnccl.so" in detail and os.path.exists(detail), detail


def test_nccl_library_path_that_does_not_exist_is_named():
    code, detail = _nccl_version({"HORA_NCCL_LIBRARY": "/nonexistent"})
    assert code == 0
    assert "HORA_NCCL_LIBRARY=/nonexistent" in detail, detail


def test_torch_nccl_built_is_the_version_code():
    code = ("import hora, hora.torch as hvd; v, _ = hora.nccl_version(); "
            "print(hvd.nccl_built() == v and v > 0, hvd.cuda_built(), "
            "hvd.gpu_available() == __import__('torch').cuda.is_available())")
    p = subprocess.run([harness.PYTHON, "-c", code], env=harness.job_env(), capture_output=True,
                       timeout=120, universal_newlines=True)
    assert p.stdout.split() == ["True", "True", "True"], p.stdout + p.stderr


def test_check_build_lists_nccl_and_cuda():
    p = subprocess.run([harness.horarun(), "--check-build"], env=harness.job_env(),
                       capture_output=True, timeout=120, universal_newlines=True)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    nccl = [l for l in out.splitlines() if l.startswith("NCCL: ")]
    cuda = [l for l in out.splitlines() if l.startswith("CUDA: ")]
    assert nccl and "version 2." in nccl[0] and "loaded from" in nccl[0], out
    assert cuda and "CUDA runtime" in cuda[0], out
    assert "[X] cuda" in out and "[X] nccl" in out, out
    p = subprocess.run([harness.horarun(), "--check-build"],
                       env=harness.job_env({"HORA_NCCL_LIBRARY": "/nonexistent"}),
                       capture_output=True, timeout=120, universal_newlines=True)
    line = [l for l in p.stdout.splitlines() if l.startswith("NCCL: ")]
    assert line and "cannot be loaded here" in line[0] and "/nonexistent" in line[0], p.stdout


def test_libhora_has_no_link_time_dependency_on_cuda_or_nccl():
    assert LIB and os.path.exists(LIB), "HORA_LIBRARY=%r" % LIB
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, timeout=60,
                         universal_newlines=True, check=True).stdout
    needed = [l for l in out.splitlines() if "(NEEDED)" in l]
    assert needed, out
    bad = [l for l in needed if any(n in l for n in ("libcudart", "libnccl", "libcuda."))]
    assert not bad, bad


def test_nccl_comes_from_the_nvidia_nccl_wheel_torch_brings():
    """torch 2.x from PyPI depends on nvidia-nccl: hora/_lib.py points HORA_NCCL_LIBRARY at
    its libnccl.so.2, so Hora uses the NCCL torch uses."""
    python = harness.torch2_python()
    find = ("import hora._lib as l; print(l.nccl_wheel_library())")
    wheel = subprocess.run([python, "-c", find], env=harness.job_env({"HORA_NCCL_LIBRARY": ""}),
                           capture_output=True, timeout=60, universal_newlines=True)
    path = wheel.stdout.strip()
    assert path.endswith(os.path.join("nvidia", "nccl", "lib", "libnccl.so.2")), \
        wheel.stdout + wheel.stderr
    code = "import hora, json; print(json.dumps(hora.nccl_version()))"
    p = subprocess.run([python, "-c", code], env=harness.job_env({"HORA_NCCL_LIBRARY": ""}),
                       capture_output=True, timeout=60, universal_newlines=True)
    import json
    version, detail = json.loads(p.stdout.strip().splitlines()[-1])
    assert version >= 21400 and os.path.realpath(detail) == os.path.realpath(path), p.stdout
