"""Jobs started without horarun: under plain mpirun (rank 0's coordinator address through
PMIx, no HORA_COORDINATOR_ADDR), with Slurm's and torchrun's variables set by hand for
several ranks (each rank a separate process started here), and under a real torchrun.
Every job runs an allreduce and an allgather against references (launch_env_worker.py, or
the collectives battery tests/integration/collectives_job) and reports its topology, which
is compared with what the test computed. Bad launcher variables fail hora.init with a
message naming the variable."""

import os
import random
import re
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))  # the runfiles tree under Bazel
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
WORKER = os.path.join(HERE, "launch_env_worker.py")
JOB_TIMEOUT = 300  # a hung job fails the test; no time is asserted for a job that finishes
# The launcher variables a test must not inherit (it sets the ones it means).
SCRUB = re.compile(r"^(HORA_|OMPI_|PMIX_|PMI_|SLURM_|TORCHELASTIC_|MASTER_|GROUP_|ROLE_)|"
                   r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE)$")
RESULT = re.compile(r"RESULT rank=(\d+) size=(\d+) local=(\d+)/(\d+) cross=(\d+)/(\d+) "
                    r"allreduce=ok allgather=ok")


def first_existing(*paths):
    for p in paths:
        if os.path.exists(p):
            return p
    raise RuntimeError("none of %s exists: build it first" % (paths,))


def library():
    if os.environ.get("HORA_LIBRARY"):
        return os.environ["HORA_LIBRARY"]
    return first_existing(os.path.join(REPO, "bindings", "c", "libhora.so"),
                          os.path.join(REPO, "bazel-bin", "bindings", "c", "libhora.so"))


def collectives_job():
    return first_existing(os.path.join(REPO, "tests", "integration", "collectives_job"),
                          os.path.join(REPO, "bazel-bin", "tests", "integration", "collectives_job"))


def base_env(**extra):
    env = {k: v for k, v in os.environ.items() if not SCRUB.search(k)}
    env.update(HORA_LIBRARY=library(), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.path.join(REPO, "bindings", "python"))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def free_port(lo=None, hi=None):
    """A port free a moment ago (in [lo, hi] when given)."""
    for _ in range(200):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", 0 if lo is None else random.randint(lo, hi)))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port")


def free_port_pair():
    """A MASTER_PORT whose next port (Hora's coordinator under torchrun) is free too, below
    the ephemeral range (32768-60999) where concurrent tests' connections cannot take it."""
    for _ in range(200):
        port = free_port(20000, 31998)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no free pair of ports")


def mpirun(np, *command_and_mpmd):
    argv = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none",
            "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
            "--mca", "oob_tcp_if_include", "lo"]
    if os.geteuid() == 0:
        argv.insert(1, "--allow-run-as-root")
    return argv + list(command_and_mpmd)


def run(argv, env, timeout=JOB_TIMEOUT):
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    sys.stdout.write(p.stdout[-4000:])
    sys.stderr.write(p.stderr[-4000:])
    return p


def start_ranks(envs):
    """One process per rank, each with its own environment; returns their outputs."""
    procs = [subprocess.Popen([PYTHON, WORKER], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True) for e in envs]
    outs = []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=JOB_TIMEOUT)
            outs.append((p.returncode, out, err))
            sys.stdout.write("--- rank %d rc=%d\n%s%s" % (r, p.returncode, out[-2000:], err[-2000:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def results(text):
    """{rank: (size, local_rank, local_size, cross_rank, cross_size)} from RESULT lines."""
    return {int(m.group(1)): tuple(int(g) for g in m.groups()[1:]) for m in RESULT.finditer(text)}


# --- mpirun: the address through PMIx ------------------------------------------------------

@pytest.mark.parametrize("np", [2, 3])
def test_mpirun_collectives_job_without_an_address(np):
    p = run(mpirun(np, collectives_job()), base_env())
    assert p.returncode == 0, p.stderr[-3000:]
    for r in range(np):
        assert re.search(r"^rank %d of %d: \d+ checks, 0 failed$" % (r, np), p.stdout, re.M), r


def test_mpirun_torch_worker_reports_open_mpi_topology():
    p = run(mpirun(3, PYTHON, WORKER), base_env(EXPECT_SIZE=3, EXPECT_LOCAL_SIZE=3, EXPECT_CROSS_SIZE=1,
                                                 HORA_LOG_LEVEL="info"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = results(p.stdout)
    assert got == {r: (3, r, 3, 0, 1) for r in range(3)}
    published = set(re.findall(r"coordinator address (\S+) through pmix", p.stderr))
    assert len(published) == 1 and published.pop().startswith("127.0.0.1:"), p.stderr[-2000:]


def test_mpirun_coordinator_iface_and_port():
    port = free_port()
    p = run(mpirun(2, PYTHON, WORKER), base_env(HORA_COORDINATOR_IFACE="nosuch0,lo",
                                                 HORA_COORDINATOR_PORT=port, HORA_LOG_LEVEL="info"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert len(results(p.stdout)) == 2
    assert "coordinator address 127.0.0.1:%d through pmix" % port in p.stderr


def test_mpirun_coordinator_iface_without_an_address_fails_naming_it():
    p = run(mpirun(2, PYTHON, WORKER), base_env(HORA_COORDINATOR_IFACE="nosuch0"))
    assert p.returncode != 0
    assert "HORA_COORDINATOR_IFACE='nosuch0': none of these interfaces has an IPv4 address" in p.stdout


def test_mpirun_rank_that_never_starts_hora_fails_the_others_at_the_start_timeout():
    deadline = 3
    env = base_env(HORA_START_TIMEOUT_SECONDS=deadline)
    start = time.time()
    p = run(mpirun(1, PYTHON, WORKER, ":", "-np", "1", "sleep", "120"), env)
    took = time.time() - start
    bound = 4 * deadline + 10  # the hang bound (tests/harness/hang_bound.h, faultlib.hang_bound)
    print("DETECTION %.1f s (start timeout %d s, bound %d s)" % (took, deadline, bound))
    assert p.returncode != 0
    assert re.search(r"INIT_ERROR .*PMIx: .*fence of every rank.*a rank did not start Hora", p.stdout), p.stdout
    assert took < bound


# --- Slurm's variables by hand ---------------------------------------------------------------

def slurm_envs(hostnames):
    """4 tasks on two nodes, 2 each, as srun sets them; the port comes from the job and step
    ids (chosen here so that the rule lands on a free port)."""
    port = free_port(20000, 39999)
    job, step = 7000 + (port - 20000) // 20, (port - 20000) % 20
    envs = []
    for r in range(4):
        e = base_env(SLURM_PROCID=r, SLURM_NTASKS=4, SLURM_LOCALID=r % 2, SLURM_NODEID=r // 2,
                     SLURM_STEP_NODELIST="127.0.0.[1-2]", SLURM_JOB_NODELIST="127.0.0.[1-2],gpu[07-09]",
                     SLURM_STEP_TASKS_PER_NODE="2(x2)", SLURM_TASKS_PER_NODE="2(x2),1(x3)",
                     SLURM_STEP_NUM_NODES=2, SLURM_JOB_ID=job, SLURM_STEP_ID=step, HORA_LOG_LEVEL="info")
        if hostnames:
            e["HORA_HOSTNAME"] = "slurm-node-%d" % (r // 2)
        envs.append(e)
    return envs, port


def test_slurm_variables_by_hand_four_ranks_two_nodes():
    envs, port = slurm_envs(hostnames=True)
    outs = start_ranks(envs)
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = {}
    for _, out, _ in outs:
        got.update(results(out))
    assert got == {r: (4, r % 2, 2, r // 2, 2) for r in range(4)}
    assert "listening on 0.0.0.0:%d" % port in outs[0][2]
    assert not any("Slurm says" in err for _, _, err in outs)


def test_slurm_topology_that_disagrees_with_the_hostnames_is_a_warning():
    envs, _ = slurm_envs(hostnames=False)  # every rank on this host: the hostnames say 1 node
    outs = start_ranks(envs)
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = {}
    for _, out, _ in outs:
        got.update(results(out))
    assert got == {r: (4, r, 4, 0, 1) for r in range(4)}
    assert "Slurm says local size 2 (hostnames give 4)" in outs[1][2]


# --- torchrun --------------------------------------------------------------------------------

def test_torchrun_variables_by_hand_coordinator_beside_master_port():
    # The test holds MASTER_PORT as torchrun's agent would (its TCPStore listens there).
    store = socket.socket()
    store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for _ in range(100):
        port = free_port()
        probe = socket.socket()
        try:
            probe.bind(("0.0.0.0", port + 1))
            store.bind(("127.0.0.1", port))
            break
        except OSError:
            continue
        finally:
            probe.close()
    store.listen(8)
    try:
        envs = [base_env(RANK=r, WORLD_SIZE=3, LOCAL_RANK=r, LOCAL_WORLD_SIZE=3, GROUP_RANK=0,
                         GROUP_WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                         TORCHELASTIC_RUN_ID="by-hand", HORA_LOG_LEVEL="info") for r in range(3)]
        outs = start_ranks(envs)
    finally:
        store.close()
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = {}
    for _, out, _ in outs:
        got.update(results(out))
    assert got == {r: (3, r, 3, 0, 1) for r in range(3)}
    assert "listening on 0.0.0.0:%d" % (port + 1) in outs[0][2]


@pytest.mark.parametrize("nproc", [2, 3])
def test_real_torchrun(nproc, tmp_path):
    port = free_port_pair()
    # --redirects/--tee 1: Debian's torch 1.13 on Python 3.11 cannot parse their default "0"
    # (Std.from_str returns None), so stdout is tee'd to the console with a [defaultN]: prefix.
    argv = [PYTHON, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(port), "--redirects", "1", "--tee", "1",
            "--log_dir", str(tmp_path), WORKER]
    p = run(argv, base_env(EXPECT_SIZE=nproc, EXPECT_LOCAL_SIZE=nproc, EXPECT_CROSS_SIZE=1))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert results(p.stdout) == {r: (nproc, r, nproc, 0, 1) for r in range(nproc)}


def test_real_torchrun_restarts(tmp_path):
    # torchrun's elastic agent (c10d rendezvous, --nnodes 1:2, --max-restarts 1): in attempt 0
    # rank 1 exits 1 after a real Hora job; the agent stops every worker and starts them
    # again (TORCHELASTIC_RESTART_COUNT=1), and the new processes form a new Hora job.
    port = free_port_pair()
    argv = [PYTHON, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc_per_node", "2",
            "--max_restarts", "1", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", "127.0.0.1:%d" % port, "--rdzv_conf", "last_call_timeout=1",
            "--redirects", "1", "--tee", "1", "--log_dir", str(tmp_path), WORKER]
    # With a c10d rendezvous the agent picks MASTER_PORT itself (an ephemeral port), so its next
    # port may be taken: the coordinator's port is given, as docs/launching.md tells users.
    p = run(argv, base_env(FAIL_ATTEMPT=0, HORA_COORDINATOR_PORT=port + 1))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAILING attempt 0" in p.stdout, p.stdout[-3000:]
    # Both attempts ran the collectives on both ranks.
    assert len(RESULT.findall(p.stdout)) == 4, p.stdout[-3000:]


# --- bad launcher variables ------------------------------------------------------------------

BAD = [
    ({"SLURM_PROCID": 0, "SLURM_NTASKS": 2, "SLURM_JOB_ID": 5, "SLURM_STEP_NODELIST": "node[01-"},
     "SLURM_STEP_NODELIST='node[01-' is not a Slurm node list: unclosed '['"),
    ({"SLURM_PROCID": 2, "SLURM_NTASKS": 2, "SLURM_JOB_ID": 5, "SLURM_STEP_NODELIST": "n1"},
     "SLURM_PROCID='2' is not below SLURM_NTASKS='2'"),
    ({"SLURM_PROCID": 0, "SLURM_NTASKS": 3, "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": 5,
      "SLURM_STEP_NODELIST": "n[1-2]"}, "SLURM_STEP_TASKS_PER_NODE='2(x2)' adds up to 4 tasks but SLURM_NTASKS='3'"),
    ({"RANK": 2, "WORLD_SIZE": 2, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 1234},
     "RANK='2' is not below WORLD_SIZE='2'"),
    ({"RANK": 0, "WORLD_SIZE": 2, "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT is not set (MASTER_ADDR is)"),
    ({"OMPI_COMM_WORLD_RANK": 1, "OMPI_COMM_WORLD_SIZE": 2}, "PMIX_NAMESPACE"),
    ({"OMPI_COMM_WORLD_RANK": 1, "OMPI_COMM_WORLD_SIZE": 2, "PMIX_NAMESPACE": "no-server"}, "PMIx_Init"),
]


@pytest.mark.parametrize("variables,message", BAD, ids=[m.split("=")[0].split(" ")[0] + "-%d" % i
                                                          for i, (_, m) in enumerate(BAD)])
def test_bad_launcher_variables_fail_init_naming_them(variables, message):
    (rc, out, err), = start_ranks([base_env(**variables)])
    assert rc == 3, out + err
    assert "INIT_ERROR" in out and message in out, out
