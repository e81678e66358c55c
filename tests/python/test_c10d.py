"""torch.distributed on Hora: init_process_group("hora") under horarun with torch 2.x (PyPI,
tools/setup_torch2.sh), 2 and 3 ranks: every collective, subgroups, DDP and
ZeroRedundancyOptimizer against gloo in the same job (workers/c10d_worker.py); a rank killed
mid-step and a one-sided call end with DistBackendError on every survivor
(workers/c10d_fault_worker.py)."""

import os
import re

import pytest

import harness

CASES = harness.case_names("c10d_worker")


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request):
    return harness.run_job(request.param, "c10d_worker.py", timeout=300,
                           python=harness.torch2_python())


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)


def test_dead_rank_is_named_by_every_survivor(tmp_path):
    job = harness.run_job(3, "c10d_fault_worker.py", args=["peer_failure", str(tmp_path)],
                          timeout=120,
                          python=harness.torch2_python(),
                          extra_env={"HORA_HEARTBEAT_TIMEOUT_SECONDS": "2"})
    got = job.cases.get("peer_failure", {})
    for rank in (0, 1):
        status, why = got.get(rank, ("MISSING", ""))
        assert status == "PASS", "rank %d: %s %s\n%s" % (rank, status, why, job.tail())


def test_one_sided_call_is_named_by_the_stall_report(tmp_path):
    job = harness.run_job(2, "c10d_fault_worker.py", args=["stall", str(tmp_path)], timeout=120,
                          python=harness.torch2_python(),
                          extra_env={"HORA_STALL_TIMEOUT_SECONDS": "3",
                                     "HORA_STALL_WARNING_SECONDS": "1"})
    got = job.cases.get("stall", {})
    for rank in (0, 1):
        status, why = got.get(rank, ("MISSING", ""))
        assert status == "PASS", "rank %d: %s %s\n%s" % (rank, status, why, job.tail())


def test_accelerate_fsdp_example_trains(tmp_path):
    """examples/accelerate_clm.py: a GPT-2 with Accelerate + FSDP2 on "hora", 2 CPU ranks."""
    script = os.path.join(harness.REPO, "examples", "accelerate_clm.py")
    job = harness.run_job(2, script, args=["--steps", "40", "--check-dir", str(tmp_path)],
                          timeout=300, python=harness.torch2_python())
    text = "\n".join(job.lines.get(0, []))
    assert job.rc == 0, job.tail()
    assert "2 ranks on hora" in text and "(fell)" in text, job.tail()
    assert "parameters identical on every rank" in text, job.tail()


def test_under_torchrun(tmp_path):
    """init_process_group("hora") under torchrun (no horarun): Hora's coordinator takes
    MASTER_PORT + 1 beside torch's store on MASTER_PORT (docs/launching.md)."""
    import subprocess
    port = harness.free_port_pair()
    some = ["all_reduce_every_op_and_dtype", "subgroup_collectives", "ddp_matches_ddp_on_gloo"]
    cmd = [harness.torch2_python(), "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(port),
           os.path.join(harness.WORKERS, "c10d_worker.py")] + some
    p = subprocess.run(cmd, cwd=str(tmp_path), env=harness.job_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
    # Both ranks write to one pipe: lines may interleave, so count the markers themselves.
    passed = re.findall(r"CASE (\w+) PASS", p.stdout)
    assert p.returncode == 0, p.stdout[-4000:]
    assert sorted(passed) == sorted(some * 2), p.stdout[-4000:]


def test_the_torch2_environment_imports_the_installed_hora():
    """docs/c10d.md runs `horarun -np 2 /opt/hora/torch2/bin/python train.py`: after
    tools/install.sh that environment imports hora (its own copy: it does not see the system's
    site) and finds the installed libhora.so, with nothing of the repository on any path."""
    import subprocess
    if not os.path.exists("/usr/local/lib/libhora.so"):
        pytest.skip("Hora is not installed on this machine (tools/install.sh)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HORA_LIBRARY", "LD_LIBRARY_PATH")}
    p = subprocess.run([harness.torch2_python(), "-c",
                        "import hora, hora.torch, hora._lib as l; l.lib(); "
                        "maps = [x.split()[-1] for x in open('/proc/self/maps') "
                        "if x.rstrip().endswith('/libhora.so')]; "
                        "print(hora.__file__, maps[0])"],
                       cwd="/", env=env, capture_output=True, universal_newlines=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    where, lib = p.stdout.split()[-2:]
    assert where.startswith(os.path.dirname(os.path.dirname(harness.torch2_python()))), where
    assert os.path.realpath(lib) == os.path.realpath("/usr/local/lib/libhora.so"), lib
