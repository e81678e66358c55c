"""horarun across hosts, on the network-namespace kit (see kit.py): 2 and 3 hosts with 2
slots each, through ssh and through --mpi; the battery on the hierarchical backend; plain mpirun without horarun; an unreachable host;
SIGINT and a failing remote rank leave no process on any host; no command line on any host
holds the job token. Without the kit or root every test is skipped and says why (CI runs as
root with ../shared beside the checkout, so there they run)."""

import json
import os
import re
import shlex
import signal
import subprocess
import time

import pytest

from kit import HERE, Kit, PORT, PY, ROOT, find, why_not

HORARUN = os.environ.get("HORARUN") or os.path.join(ROOT, "tools", "launcher", "horarun")
PROG = os.path.join(HERE, "rank_prog.py")
TIMEOUT = 300  # a hang guard only, never an assertion


@pytest.fixture(scope="module")
def kit():
    reason = why_not()
    if reason:
        print("\nSKIP multihost test: " + reason)
        pytest.skip(reason)
    k = Kit()
    try:
        k.setup()
        yield k
    finally:
        k.teardown()


def hostlist(kit, n, slots=2):
    return ",".join("%s:%d" % (h, slots) for h in kit.hosts[:n])


def horarun(kit, args, on=0, env=None, timeout=TIMEOUT):
    """horarun run to the end on host index `on` (None: the root namespace):
    (rc, stdout, stderr)."""
    host = None if on is None else kit.hosts[on]
    p = subprocess.run(kit.on(host, [PY, HORARUN] + list(args)), env=dict(kit.env, **(env or {})),
                       capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def start_horarun(kit, args, on=0, env=None):
    return subprocess.Popen(kit.on(kit.hosts[on], [PY, HORARUN] + list(args)),
                            env=dict(kit.env, **(env or {})), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)


def rank_lines(text, stream="stdout"):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\[(\d+)\]<%s>: (.*)$" % stream, line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def ssh_args(kit):
    return ["--ssh-config-file", kit.ssh_config]


def wait_files(d, names, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(d, n)) for n in names):
            return True
        time.sleep(0.05)
    return False


def check_clean(kit):
    left = kit.wait_no_strays()
    assert not left, "processes left behind: %s" % left


# -- where ranks run and what they get ------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_ranks_get_real_topology_environment_and_cwd(kit, n):
    np = 2 * n - 1  # the last host gets one rank
    rc, out, err = horarun(kit, ["-np", str(np), "-H", hostlist(kit, n)] + ssh_args(kit) +
                           ["-x", "TEST_X=from-x", PY, PROG, "env"],
                           env={"TEST_PASSED": "launcher-env"})
    assert rc == 0, err
    lines = rank_lines(out)
    assert sorted(lines) == list(range(np)), out + err
    info = {r: json.loads(lines[r][0]) for r in lines}
    tokens = {i["env"]["HORA_JOB_TOKEN"] for i in info.values()}
    assert len(tokens) == 1 and re.fullmatch(r"[0-9a-f]{32}", tokens.pop())
    for r, i in info.items():
        e = i["env"]
        host = r // 2
        assert i["host"] == kit.hosts[host] == e["HORA_HOSTNAME"], (r, i)
        assert (e["HORA_RANK"], e["HORA_SIZE"]) == (str(r), str(np))
        assert e["HORA_LOCAL_RANK"] == str(r % 2)
        assert e["HORA_LOCAL_SIZE"] == ("1" if host == n - 1 else "2")
        assert (e["HORA_CROSS_RANK"], e["HORA_CROSS_SIZE"]) == (str(host), str(n))
        assert e["HORA_COORDINATOR_ADDR"].startswith(kit.addrs[0] + ":"), e
        assert e["TEST_PASSED"] == "launcher-env" and e["TEST_X"] == "from-x"
        assert i["cwd"] == ROOT and i["stdin_null"], i


def test_bind_to_core_binds_the_ranks_on_every_host(kit):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2), "--bind-to", "core"] +
                           ssh_args(kit) + [PY, PROG, "env"])
    assert rc == 0, err
    lines = rank_lines(out)
    assert sorted(lines) == list(range(4)), out + err
    per = len(cpus) // 2
    for r in range(4):
        i = json.loads(lines[r][0])
        local = int(i["env"]["HORA_LOCAL_RANK"])
        assert i["cpus"] == cpus[local * per:(local + 1) * per], (r, i["host"], i["cpus"])


def test_first_host_remote_runs_the_coordinator_there(kit):
    # horarun in the root namespace; every rank is remote, rank 0 on the second kit host.
    job = find("tests/integration/collectives_job")
    rc, out, err = horarun(kit, ["-np", "4", "-H", "%s:2,%s:2" % tuple(kit.hosts[1:3]),
                                 "--verbose"] + ssh_args(kit) + [job], on=None)
    assert rc == 0, out + err
    assert re.search(r"coordinator %s:\d+" % re.escape(kit.addrs[1]), err), err
    assert len(re.findall(r"checks, 0 failed", out)) == 4, out
    check_clean(kit)


def test_network_interface_picks_each_hosts_address(kit):
    rc, out, err = horarun(kit, ["-np", "3", "-H", hostlist(kit, 3, 1),
                                 "--network-interface", "nosuch0,eth0"] + ssh_args(kit) +
                           [PY, PROG, "env"])
    assert rc == 0, err
    info = {r: json.loads(l[0]) for r, l in rank_lines(out).items()}
    for r in range(3):
        e = info[r]["env"]
        assert e["HORA_COORDINATOR_ADDR"].startswith(kit.addrs[0] + ":")
        assert e["HORA_GLOO_IFACE"] == kit.addrs[r], e
    rc, out, err = horarun(kit, ["-np", "2", "-H", hostlist(kit, 2, 1),
                                 "--network-interface", "nosuch0"] + ssh_args(kit) +
                           [PY, PROG, "env"])
    assert rc == 255 and "none of the network interfaces nosuch0" in err, err


def test_ssh_port_and_identity_flags(kit, tmp_path):
    # A config without Port and IdentityFile: only -p and -i make ssh work.
    with open(kit.ssh_config) as f:
        text = f.read()
    bare = tmp_path / "ssh_config"
    bare.write_text("\n".join(l for l in text.splitlines()
                              if not re.match(r"\s*(Port|IdentityFile)\b", l)) + "\n")
    base = ["-np", "2", "-H", hostlist(kit, 2, 1), "--ssh-config-file", str(bare)]
    rc, out, err = horarun(kit, base + [PY, PROG, "env"])
    assert rc == 255 and "cannot reach host " + kit.hosts[1] in err, err
    rc, out, err = horarun(kit, base + ["-p", PORT, "-i", kit.key, PY, PROG, "env"])
    assert rc == 0, err
    assert sorted(rank_lines(out)) == [0, 1]


def test_hostfile_in_open_mpi_format(kit, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the kit's hosts by address\n%s slots=2\n%s slots=1 max_slots=4\n"
                        % (kit.addrs[0], kit.addrs[1]))
    rc, out, err = horarun(kit, ["-np", "3", "-hostfile", str(hostfile)] + ssh_args(kit) +
                           [PY, PROG, "env"])
    assert rc == 0, err
    info = {r: json.loads(l[0]) for r, l in rank_lines(out).items()}
    assert [info[r]["host"] for r in range(3)] == [kit.hosts[0]] * 2 + [kit.hosts[1]]
    assert info[2]["env"]["HORA_CROSS_RANK"] == "1"


def test_output_filename_writes_a_file_per_rank(kit, tmp_path):
    rc, out, err = horarun(kit, ["-np", "3", "-H", hostlist(kit, 2), "--output-filename",
                                 str(tmp_path)] + ssh_args(kit) + [PY, PROG, "env"])
    assert rc == 0, err
    for r, lines in rank_lines(out).items():
        with open(os.path.join(str(tmp_path), "rank.%d" % r, "stdout")) as f:
            assert f.read() == lines[0] + "\n"


# -- real jobs --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["ssh", "mpi"])
@pytest.mark.parametrize("n", [2, 3])
def test_collectives_job_across_hosts(kit, mode, n):
    job = find("tests/integration/collectives_job")
    extra = ["--mpi"] if mode == "mpi" else []
    rc, out, err = horarun(kit, ["-np", str(2 * n), "-H", hostlist(kit, n)] + extra +
                           ssh_args(kit) + [job])
    assert rc == 0, out + err
    done = rank_lines(out)
    assert sorted(done) == list(range(2 * n)), out + err
    for r in range(2 * n):
        assert any(re.search(r"rank %d of %d: \d+ checks, 0 failed" % (r, 2 * n), l)
                   for l in done[r]), done[r]
    check_clean(kit)


def test_collectives_job_one_rank_per_host_on_the_tcp_backend(kit):
    # 3 hosts x 1 rank over ssh: "auto" takes tcp (several hosts, no MPI launcher); the
    # battery of every collective x dtype x op, uneven sizes included, against its references.
    job = find("tests/integration/collectives_job")
    rc, out, err = horarun(kit, ["-np", "3", "-H", hostlist(kit, 3, slots=1)] + ssh_args(kit) +
                           ["-x", "HORA_LOG_LEVEL", job], env={"HORA_LOG_LEVEL": "info"})
    text = out + err
    assert rc == 0, text[-4000:]
    assert re.search(r"process set 0 \(ranks 0,1,2\): cpu operations by tcp "
                     r"\(HORA_CPU_OPERATIONS=auto\)", text), text[-4000:]
    done = rank_lines(out)
    for r in range(3):
        assert any(re.search(r"rank %d of 3: \d+ checks, 0 failed" % r, l)
                   for l in done.get(r, [])), text[-4000:]
    check_clean(kit)


def test_send_recv_and_process_sets_across_hosts(kit):
    # 2 hosts x 2 ranks: process sets, and send/recv rings in every dtype, on the global set
    # and within sets, with the messages crossing hosts straight between the two ranks (the
    # point-to-point channel, not rank 0).
    job = find("tests/integration/process_sets_job")
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2)] + ssh_args(kit) + [job])
    assert rc == 0, (out + err)[-4000:]
    done = rank_lines(out)
    for r in range(4):
        assert any(re.search(r"rank %d of 4: \d+ checks, 0 failed" % r, l)
                   for l in done.get(r, [])), (out + err)[-4000:]
    check_clean(kit)


@pytest.mark.parametrize("mode,cross,chunk", [("ssh", "tcp", None), ("mpi", "mpi", None),
                                              ("ssh", "tcp", "4096"), ("mpi", "mpi", "4096")])
def test_collectives_job_on_the_hierarchical_backend(kit, mode, cross, chunk):
    # 2 hosts x 2 ranks: "auto" takes hierarchical (shm in each host, `cross` between them);
    # the same battery of every collective x dtype x op against its references. With `chunk`,
    # allreduces of more than that many bytes go in chunks whose phases overlap (the
    # cross-host one on a helper thread: under mpirun, MPI driven from a second thread).
    job = find("tests/integration/collectives_job")
    extra = ["--mpi"] if mode == "mpi" else []
    env = {"HORA_LOG_LEVEL": "info"}
    if chunk is not None:
        env["HORA_HIERARCHICAL_CHUNK_BYTES"] = chunk
        extra += ["-x", "HORA_HIERARCHICAL_CHUNK_BYTES"]
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2)] + extra + ssh_args(kit) +
                           ["-x", "HORA_LOG_LEVEL", job], env=env)
    text = out + err
    assert rc == 0, text[-4000:]
    if chunk is not None:
        assert ("hierarchical: allreduces of more than %s bytes go in chunks of that size" %
                chunk) in text, text[-4000:]
    assert re.search(r"process set 0 \(ranks 0,1,2,3\): cpu operations by hierarchical "
                     r"\(HORA_CPU_OPERATIONS=auto\)", text), text[-4000:]
    assert re.search(r"\(ranks 0,2\): cpu operations by %s \(the hierarchical backend's "
                     r"cross-host" % cross, text), text[-4000:]
    assert "cpu operations by shm (the hierarchical backend's host-local" in text, text[-4000:]
    done = rank_lines(out)
    for r in range(4):
        assert any(re.search(r"rank %d of 4: \d+ checks, 0 failed" % r, l)
                   for l in done.get(r, [])), text[-4000:]
    check_clean(kit)


def training_env():
    return {"HORA_LIBRARY": find("bindings/c/libhora.so"),
            "PYTHONPATH": os.path.join(ROOT, "bindings", "python")}


@pytest.mark.parametrize("mode", ["ssh", "mpi"])
def test_training_across_hosts_ends_with_identical_parameters(kit, mode):
    extra = ["--mpi"] if mode == "mpi" else []
    rc, out, err = horarun(kit, ["-np", "4", "-H", hostlist(kit, 2)] + extra + ssh_args(kit) +
                           ["-x", "HORA_LIBRARY", "-x", "PYTHONPATH", PY,
                            os.path.join(ROOT, "examples", "gpt_char_lm.py"), "--steps", "6",
                            "--log-every", "3", "--n-layer", "1", "--n-embd", "32",
                            "--sample-chars", "20", "--threads", "1"],
                           env=training_env())
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "PASS: every rank holds identical parameters" in out, out[-3000:]
    check_clean(kit)


def test_plain_mpirun_without_horarun(kit):
    # Rank and size from Open MPI's variables and the token from its job id; the coordinator
    # address given by hand (-x), which wins over the PMIx exchange (next test).
    job = find("tests/integration/collectives_job")
    env_sh = open(os.path.join(kit.state, "env.sh")).read()
    mpirun_args = re.search(r'NK_MPIRUN_ARGS="(.*)"', env_sh).group(1)
    argv = ["mpirun", "-np", "4", "-H", "%s:2,%s:2" % tuple(kit.addrs[:2])]
    argv += shlex.split(mpirun_args)
    argv += ["-x", "HORA_COORDINATOR_ADDR=%s:29611" % kit.addrs[0], job]
    p = subprocess.run(kit.on(kit.hosts[0], argv), env=kit.env, capture_output=True,
                       timeout=TIMEOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out + p.stderr.decode("utf-8", "replace")
    assert len(re.findall(r"rank \d of 4: \d+ checks, 0 failed", out)) == 4, out
    check_clean(kit)


@pytest.mark.parametrize("iface", [None, "eth0"])
def test_plain_mpirun_without_an_address(kit, iface):
    # No HORA_COORDINATOR_ADDR: rank 0 listens on an address of its host that the other host
    # reaches (HORA_COORDINATOR_IFACE's, else the first external interface's) and publishes it
    # through PMIx; every rank reads it there.
    job = find("tests/integration/collectives_job")
    env_sh = open(os.path.join(kit.state, "env.sh")).read()
    mpirun_args = re.search(r'NK_MPIRUN_ARGS="(.*)"', env_sh).group(1)
    argv = ["mpirun", "-np", "4", "-H", "%s:2,%s:2" % tuple(kit.addrs[:2])]
    argv += shlex.split(mpirun_args) + ["-x", "HORA_LOG_LEVEL=info"]
    if iface:
        argv += ["-x", "HORA_COORDINATOR_IFACE=" + iface]
    env = {k: v for k, v in kit.env.items() if k != "HORA_COORDINATOR_ADDR"}
    p = subprocess.run(kit.on(kit.hosts[0], argv + [job]), env=env, capture_output=True,
                       timeout=TIMEOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    assert p.returncode == 0, out[-3000:] + err[-3000:]
    assert len(re.findall(r"rank \d of 4: \d+ checks, 0 failed", out)) == 4, out
    published = re.findall(r"\[hora (\d)\] \[info\] coordinator address (\S+) through pmix", out + err)
    assert sorted(r for r, _ in published) == ["0", "1", "2", "3"], err[-3000:]
    assert {a for _, a in published} == {published[0][1]}
    assert published[0][1].startswith(kit.addrs[0] + ":"), published
    check_clean(kit)


# -- failures -----------------------------------------------------------------------------------

def test_unreachable_host_fails_the_start_naming_it(kit, tmp_path):
    kit.link(kit.hosts[2], False)
    try:
        rc, out, err = horarun(kit, ["-np", "6", "-H", hostlist(kit, 3, 2), "--start-timeout",
                                     "30"] + ssh_args(kit) + [PY, PROG, "hold", str(tmp_path)])
    finally:
        kit.link(kit.hosts[2], True)
    assert rc == 255, err
    assert "cannot reach host %s" % kit.hosts[2] in err and "ssh said: " in err, err
    assert kit.hosts[1] not in err, err
    assert os.listdir(str(tmp_path)) == [], "a rank started before every host was reached"
    rc, out, err = horarun(kit, ["-np", "2", "-H", "%s:1,nosuchhost-h15:1" % kit.hosts[0]] +
                           ssh_args(kit) + [PY, PROG, "env"])
    assert rc == 255 and "cannot reach host nosuchhost-h15" in err and "resolve" in err, err


def test_remote_command_not_found(kit):
    rc, out, err = horarun(kit, ["-np", "2", "-H", "%s:1,%s:1" % tuple(kit.hosts[1:3])] +
                           ssh_args(kit) + ["/nonexistent/hora-no-such-program"], on=None)
    assert rc == 127, err
    assert re.search(r"rank \d on %s \(pid \?\) could not start: /nonexistent/hora-no-such-program:"
                     r" command not found" % "(%s|%s)" % tuple(kit.hosts[1:3]), err), err
    check_clean(kit)


def read_pids(d, np):
    out = {}
    for r in range(np):
        with open(os.path.join(d, "pid.%d" % r)) as f:
            host, *pids = f.read().split()
            out[r] = (host, [int(p) for p in pids])
    return out


def test_failing_remote_rank_stops_every_host(kit, tmp_path):
    np = 6
    rc, out, err = horarun(kit, ["-np", str(np), "-H", hostlist(kit, 3), "--grace", "1"] +
                           ssh_args(kit) + [PY, PROG, "hold", str(tmp_path), "3"])
    assert rc == 3, err
    assert re.search(r"horarun: rank 3 on %s \(pid \d+\) exited with code 3; stopping the other "
                     r"ranks" % kit.hosts[1], err), err
    pids = read_pids(str(tmp_path), np)
    assert pids[3][0] == kit.hosts[1] and pids[5][0] == kit.hosts[2]
    check_clean(kit)


@pytest.mark.parametrize("mode", ["ssh", "mpi"])
def test_sigint_mid_job_leaves_no_process_on_any_host(kit, tmp_path, mode):
    np = 6
    extra = ["--mpi"] if mode == "mpi" else []
    p = start_horarun(kit, ["-np", str(np), "-H", hostlist(kit, 3), "--grace", "2"] + extra +
                      ssh_args(kit) + [PY, PROG, "hold", str(tmp_path)])
    try:
        assert wait_files(str(tmp_path), ["pid.%d" % r for r in range(np)], 120), \
            p.stderr.read1(10000) if p.poll() is not None else "ranks did not start"
        pids = read_pids(str(tmp_path), np)
        assert {h for h, _ in pids.values()} == set(kit.hosts[:3])
        assert kit.strays(), "the scan must see the running job"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 130, err
        assert b"got SIGINT; stopping every rank" in err, err
        check_clean(kit)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("mode", ["ssh", "mpi"])
def test_no_command_line_on_any_host_holds_the_token(kit, tmp_path, mode):
    np = 6
    extra = ["--mpi"] if mode == "mpi" else []
    mark = "h15-mark-%d" % os.getpid()
    p = start_horarun(kit, ["-np", str(np), "-H", hostlist(kit, 3)] + extra + ssh_args(kit) +
                      [PY, PROG, "token", str(tmp_path), mark])
    try:
        assert wait_files(str(tmp_path), ["pid.%d" % r for r in range(np)], 120)
        token = None
        while token is None and p.poll() is None:
            line = p.stdout.readline().decode()
            m = re.search(r"TOKEN ([0-9a-f]{32})", line)
            token = m.group(1) if m else None
        assert token, "no rank printed the token"
        holders, marked = [], 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            marked += mark.encode() in cmd
            if token.encode() in cmd:
                holders.append(cmd.replace(b"\0", b" ")[:300])
        assert marked >= np, "the scan must see every rank's command line (%d)" % marked
        assert not holders, holders
        open(os.path.join(str(tmp_path), "go"), "w").close()
        p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0
        check_clean(kit)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
