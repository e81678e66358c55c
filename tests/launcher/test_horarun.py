"""Tests of tools/launcher/horarun: real processes, real signals.

Run: /usr/bin/python3 -m pytest -q tests/launcher   (or bazel test //tests/launcher:horarun_test)
HORARUN=/usr/local/bin/horarun tests an installed copy instead of the one in the tree.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
HORARUN = os.environ.get("HORARUN") or os.path.normpath(
    os.path.join(HERE, "..", "..", "tools", "launcher", "horarun"))
PY = sys.executable  # the interpreter running the tests also runs the ranks
TIMEOUT = 60         # generous: the machines are shared and have 2 cores

IDENTITY = ("HORA_RANK", "HORA_SIZE", "HORA_LOCAL_RANK", "HORA_LOCAL_SIZE", "HORA_CROSS_RANK",
            "HORA_CROSS_SIZE", "HORA_COORDINATOR_ADDR", "HORA_JOB_TOKEN", "HORA_HOSTNAME")


def horarun(*args, env=None, timeout=TIMEOUT):
    """Runs horarun to the end; returns (rc, stdout text, stderr text, seconds)."""
    start = time.monotonic()
    p = subprocess.run([HORARUN] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                       env=env, timeout=timeout)
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"), time.monotonic() - start)


def rank_lines(text, stream="stdout"):
    """'[1]<stdout>: x' lines -> {1: ['x', ...]}."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\[(\d+)\]<%s>: (.*)$" % stream, line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def alive(pid):
    """True while pid runs (a zombie is not alive)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def wait_until(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


PRINT_ENV = "import json,os; print(json.dumps({k: v for k, v in os.environ.items() " \
            "if k.startswith('HORA_') or k in ('FOO', 'PASSED', 'HOROVOD_HOSTNAME')}))"


def run_env_job(*options, np=3, env=None):
    rc, out, err, _ = horarun("-np", str(np), *options, PY, "-c", PRINT_ENV, env=env)
    assert rc == 0, err
    lines = rank_lines(out)
    assert sorted(lines) == list(range(np)), out
    return {rank: json.loads(lines[rank][0]) for rank in lines}


def test_identity_variables_per_rank():
    envs = run_env_job()
    tokens = {e["HORA_JOB_TOKEN"] for e in envs.values()}
    addrs = {e["HORA_COORDINATOR_ADDR"] for e in envs.values()}
    assert len(tokens) == 1 and re.fullmatch(r"[0-9a-f]{32}", tokens.pop())
    assert len(addrs) == 1 and re.fullmatch(r"127\.0\.0\.1:\d+", addrs.pop())
    for rank, env in envs.items():
        assert set(IDENTITY) <= set(env)
        assert env["HORA_RANK"] == env["HORA_LOCAL_RANK"] == str(rank)
        assert env["HORA_SIZE"] == env["HORA_LOCAL_SIZE"] == "3"
        assert (env["HORA_CROSS_RANK"], env["HORA_CROSS_SIZE"]) == ("0", "1")
        assert env["HORA_HOSTNAME"]
        assert env["HOROVOD_HOSTNAME"] == "localhost"  # the host list's entry, as horovodrun


def test_each_job_gets_a_fresh_token_and_a_free_port():
    a, b = run_env_job(np=1)[0], run_env_job(np=1)[0]
    assert a["HORA_JOB_TOKEN"] != b["HORA_JOB_TOKEN"]
    port = int(a["HORA_COORDINATOR_ADDR"].rsplit(":", 1)[1])
    assert 0 < port < 65536


def test_options_become_variables():
    env = dict(os.environ, PASSED="from-horarun", HORA_RANK="99")
    envs = run_env_job("--start-timeout", "30", "--log-level", "INFO",
                       "--fusion-threshold-mb", "2", "--cycle-time-ms", "2.5",
                       "--heartbeat-timeout", "10", "-x", "FOO=bar=baz", "-x", "PASSED",
                       np=2, env=env)
    for rank, e in envs.items():
        assert e["HORA_START_TIMEOUT_SECONDS"] == "30"
        assert e["HORA_LOG_LEVEL"] == "info"
        assert e["HORA_FUSION_THRESHOLD"] == str(2 * 1024 * 1024)
        assert e["HORA_CYCLE_TIME_MS"] == "2.5"
        assert e["HORA_HEARTBEAT_TIMEOUT_SECONDS"] == "10"
        assert e["FOO"] == "bar=baz"
        assert e["PASSED"] == "from-horarun"
        assert e["HORA_RANK"] == str(rank)  # identity is never overridden


def test_local_hosts_are_accepted():
    for hosts in ("localhost:2", "127.0.0.1:1,localhost:1", "localhost,127.0.0.1"):
        envs = run_env_job("-H", hosts, np=2)
        assert envs[1]["HORA_LOCAL_SIZE"] == "2"


def test_stdout_and_stderr_are_prefixed():
    code = ("import os,sys; r=os.environ['HORA_RANK']\n"
            "print('out one', r); print('out two', r, flush=True)\n"
            "sys.stderr.write('err ' + r + '\\n'); sys.stderr.flush()\n"
            "sys.stdout.write('partial ' + r)")
    rc, out, err, _ = horarun("-np", "2", PY, "-c", code)
    assert rc == 0, err
    so, se = rank_lines(out), rank_lines(err, "stderr")
    for r in (0, 1):
        assert so[r] == ["out one %d" % r, "out two %d" % r, "partial %d" % r]
        assert se[r] == ["err %d" % r]
    assert "<stderr>" not in out and "<stdout>" not in err
    assert out.endswith("\n")


def test_binary_and_long_output_is_forwarded_safely():
    code = ("import sys; b=sys.stdout.buffer\n"
            "b.write(b'\\xff\\xfe\\x00garbage\\n'); b.write(b'x' * 200000 + b'\\n'); b.write(b'end')")
    p = subprocess.run([HORARUN, "-np", "1", PY, "-c", code], capture_output=True,
                       timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split(b"\n")
    assert lines[0] == b"[0]<stdout>: \xff\xfe\x00garbage"
    assert all(l.startswith(b"[0]<stdout>: ") for l in lines[:-1])
    assert b"".join(l[len(b"[0]<stdout>: "):] for l in lines[1:-2]) == b"x" * 200000
    assert lines[-2] == b"[0]<stdout>: end" and lines[-1] == b""


def test_all_ranks_succeed():
    rc, out, err, _ = horarun("-np", "4", PY, "-c", "pass")
    assert (rc, out) == (0, "")


def write_pid_then(action, grandchild=False):
    """Child code: write its pid (and a grandchild's) to DIR/pid.RANK, then run action."""
    return ("import os,sys,time,signal,subprocess\n"
            "r=os.environ['HORA_RANK']; d=sys.argv[1]\n"
            "pids=[os.getpid()]\n"
            + ("pids.append(subprocess.Popen(['sleep','300']).pid)\n" if grandchild else "")
            + "open(os.path.join(d,'pid.'+r+'.tmp'),'w').write(' '.join(map(str,pids)))\n"
            "os.rename(os.path.join(d,'pid.'+r+'.tmp'), os.path.join(d,'pid.'+r))\n"
            + action)


def read_pids(d, np):
    pids = []
    for r in range(np):
        with open(os.path.join(str(d), "pid.%d" % r)) as f:
            pids += [int(x) for x in f.read().split()]
    return pids


def pid_files_written(d, np):
    return all(os.path.exists(os.path.join(str(d), "pid.%d" % r)) for r in range(np))


def start_pid_writers(np, grace, child, d):
    """horarun -np NP --grace GRACE running `child` (write_pid_then code) with DIR d."""
    return subprocess.Popen([HORARUN, "-np", str(np), "--grace", str(grace), PY, "-c", child,
                             str(d)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def wait_for_pids(d, np):
    """The pids of every rank and its grandchild, once all are written and alive."""
    assert wait_until(lambda: pid_files_written(d, np), 30)
    pids = read_pids(d, np)
    assert len(pids) == 2 * np and all(alive(x) for x in pids)
    return pids


def test_failing_rank_stops_the_others(tmp_path):
    # Rank 1 fails once every rank is up; rank 2 ignores SIGTERM, so it needs the SIGKILL.
    action = ("if r=='2': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "if r=='1':\n"
              "    while len([f for f in os.listdir(d) if not f.endswith('.tmp')]) < 3:\n"
              "        time.sleep(0.02)\n"
              "    sys.exit(3)\n"
              "time.sleep(300)\n")
    rc, out, err, secs = horarun("-np", "3", "--grace", "1", PY, "-c",
                                 write_pid_then(action, grandchild=True), str(tmp_path))
    assert rc == 3, err
    assert re.search(r"horarun: rank 1 \(pid \d+\) exited with code 3; stopping the other ranks",
                     err), err
    pids = read_pids(tmp_path, 3)
    assert wait_until(lambda: not any(alive(p) for p in pids), 5), pids


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_rank_killed_by_signal(sig):
    code = ("import os,time\n"
            "if os.environ['HORA_RANK']=='0': os.kill(os.getpid(), %d)\n"
            "time.sleep(300)" % sig)
    rc, out, err, secs = horarun("-np", "2", "--grace", "1", PY, "-c", code)
    assert rc == 128 + sig, err
    assert "rank 0 (pid" in err and signal.Signals(sig).name in err


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                      (signal.SIGHUP, 129)])
def test_signal_to_horarun_stops_every_rank(tmp_path, sig, code):
    np = 3
    child = write_pid_then("time.sleep(300)\n", grandchild=True)
    p = start_pid_writers(np, 2, child, tmp_path)
    try:
        pids = wait_for_pids(tmp_path, np)
        p.send_signal(sig)
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == code, err
        assert b"stopping every rank" in err
        assert wait_until(lambda: not any(alive(x) for x in pids), 5), pids
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_second_signal_kills_at_once(tmp_path):
    # The ranks (and their grandchildren) ignore SIGTERM, and the grace period is far longer
    # than the test: only the second signal's SIGKILL can end them in time.
    np = 2
    grace = 600
    child = ("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" +
             write_pid_then("time.sleep(900)\n", grandchild=True).replace(
                 "subprocess.Popen(['sleep','300'])",
                 "subprocess.Popen(['sleep','900'], preexec_fn=lambda: "
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN))"))
    p = start_pid_writers(np, grace, child, tmp_path)
    try:
        pids = wait_for_pids(tmp_path, np)
        p.send_signal(signal.SIGTERM)
        # The first signal is forwarded and ignored: everything still runs.
        time.sleep(1)
        assert p.poll() is None and all(alive(x) for x in pids)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 143, err
        assert b"second signal: killing every rank now" in err, err
        assert wait_until(lambda: not any(alive(x) for x in pids), 10), pids
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if pid_files_written(tmp_path, np):
            for x in read_pids(tmp_path, np):
                if alive(x):
                    os.kill(x, signal.SIGKILL)  # they ignore SIGTERM


def test_processes_left_behind_are_stopped_after_a_successful_job(tmp_path):
    # Each rank starts a grandchild in its process group and exits 0 at once.
    np = 2
    rc, out, err, _ = horarun("-np", str(np), "--grace", "2", PY, "-c",
                              write_pid_then("", grandchild=True), str(tmp_path))
    assert rc == 0, err
    pids = read_pids(tmp_path, np)
    grandchildren = pids[1::2]
    assert len(grandchildren) == np
    assert wait_until(lambda: not any(alive(x) for x in grandchildren), 10), grandchildren


@pytest.mark.parametrize("args,message", [
    (["-np", "0", "true"], "must be at least 1"),
    (["-np", "-2", "true"], "-np"),
    (["-np", "two", "true"], "is not an integer"),
    (["true"], "-np N"),
    (["-np", "2"], "missing the command"),
    (["-np", "2", "--"], "missing the command"),
    (["-np", "3", "-H", "localhost:2", "true"], "needs 3 slots"),
    (["-np", "1", "-H", "localhost:0", "true"], "at least 1 slot"),
    (["-np", "1", "-H", "localhost:x", "true"], "not an integer"),
    (["-np", "1", "-H", "a:1", "--hostfile", "/etc/hostname", "true"], "not allowed with"),
    (["-np", "1", "--mpi", "--gloo", "true"], "not allowed with"),
    (["-np", "1", "--mpi-args=-v", "true"], "--mpi-args needs --mpi"),
    (["-np", "1", "--ssh-config-file", "/nonexistent/cfg", "true"], "no such file"),
    (["-np", "1", "--hostfile", "/nonexistent/hosts", "true"], "no such file"),
    (["-np", "1", "--network-interface", "eth0,", "true"], "empty interface name"),
    (["-np", "1", "--fusion-threshold-mb", "lots", "true"], "is not a number"),
    (["-np", "1", "--start-timeout", "0", "true"], "greater than 0"),
    (["-np", "1", "--grace", "-1", "true"], "at least 0"),
    (["-np", "1", "--log-level", "loud", "true"], "is not a log level"),
    (["-np", "1", "-x", "1BAD=x", "true"], "NAME"),
    (["-np", "1", "--fusion-threshhold-mb", "3", "true"],
     "--fusion-threshhold-mb (did you mean --fusion-threshold-mb?)"),
    (["-np", "1", "--verbos", "true"], "--verbos (did you mean --verbose?)"),
])
def test_argument_errors(args, message):
    rc, out, err, _ = horarun(*args)
    assert rc == 2, err
    assert message in err and "horarun: error:" in err
    assert out == ""


def test_command_not_found():
    rc, out, err, _ = horarun("-np", "2", "/nonexistent/hora-no-such-program")
    assert rc == 127
    assert "command not found" in err


def test_help_and_version():
    rc, out, _, _ = horarun("--help")
    assert rc == 0 and "-np" in out and "HORA_RANK" in out
    rc, out, _, _ = horarun("--version")
    assert rc == 0 and out.startswith("horarun (Hora) ")


def test_options_after_the_command_belong_to_the_command():
    rc, out, err, _ = horarun("-np", "1", PY, "-c", "import sys; print(sys.argv[1:])",
                              "--verbose", "-np", "5")
    assert rc == 0, err
    assert rank_lines(out)[0] == ["['--verbose', '-np', '5']"]


def test_keep_going_lets_the_others_finish(tmp_path):
    code = ("import os,sys,time; r=os.environ['HORA_RANK']\n"
            "if r=='1': sys.exit(4)\n"
            "time.sleep(1); open(os.path.join(sys.argv[1], 'done.'+r), 'w').close()")
    rc, out, err, _ = horarun("-np", "3", "--keep-going", PY, "-c", code, str(tmp_path))
    assert rc == 4, err
    assert "rank 1 (pid" in err and "--keep-going" in err
    assert sorted(os.listdir(str(tmp_path))) == ["done.0", "done.2"]


def test_hostfile_gloo_and_disable_cache(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n127.0.0.1:1\n")
    envs = run_env_job("-hostfile", str(hostfile), "--gloo", "--disable-cache", np=3)
    for rank, e in envs.items():
        assert e["HORA_CPU_OPERATIONS"] == "gloo"
        assert (e["HORA_CROSS_SIZE"], e["HORA_LOCAL_SIZE"]) == ("1", "3")  # one host


def test_network_interface_on_this_host():
    envs = run_env_job("--network-interface", "nosuch0,lo", np=2)
    for e in envs.values():
        assert e["HORA_GLOO_IFACE"] == "127.0.0.1"
        assert e["HORA_COORDINATOR_ADDR"].startswith("127.0.0.1:")
    rc, out, err, _ = horarun("-np", "1", "--network-interface", "nosuch0", PY, "-c", "pass")
    assert rc == 255 and "none of the network interfaces nosuch0" in err, err


def test_output_filename_writes_each_rank(tmp_path):
    code = "import os,sys; print('out', os.environ['HORA_RANK']); sys.stderr.write('e\\n')"
    rc, out, err, _ = horarun("-np", "2", "--output-filename", str(tmp_path / "logs"),
                              PY, "-c", code)
    assert rc == 0, err
    for r in (0, 1):
        d = tmp_path / "logs" / ("rank.%d" % r)
        assert (d / "stdout").read_text() == "out %d\n" % r
        assert (d / "stderr").read_text() == "e\n"
    assert rank_lines(out) == {0: ["out 0"], 1: ["out 1"]}  # and still on the console


def mpirun_or_skip():
    import shutil
    if shutil.which("mpirun") is None:
        print("\nSKIP: mpirun is not installed")
        pytest.skip("mpirun is not installed")


def test_mpi_on_this_host_sets_identity_and_rewrites_tags():
    mpirun_or_skip()
    envs = run_env_job("--mpi", "--mpi-args", "--mca btl self,vader,tcp", np=3)
    token = {e["HORA_JOB_TOKEN"] for e in envs.values()}
    assert len(token) == 1
    for rank, e in envs.items():
        assert (e["HORA_RANK"], e["HORA_SIZE"]) == (str(rank), "3")
        assert (e["HORA_LOCAL_RANK"], e["HORA_LOCAL_SIZE"]) == (str(rank), "3")
        assert (e["HORA_CROSS_RANK"], e["HORA_CROSS_SIZE"]) == ("0", "1")
        assert "HORA_HOSTNAME" not in e  # the runtime's gethostname() decides under mpirun


def test_mpi_lines_written_in_pieces_stay_whole():
    mpirun_or_skip()
    code = ("import sys,time; sys.stdout.write('part1 '); sys.stdout.flush(); time.sleep(0.2)\n"
            "print('part2', 'and', 'more', flush=True)")
    rc, out, err, _ = horarun("-np", "2", "--mpi", "-x", "PYTHONUNBUFFERED=1", PY, "-c", code)
    assert rc == 0, err
    for rank in range(2):
        assert "[%d]<stdout>: part1 part2 and more\n" % rank in out, out


def test_mpi_failing_rank_exit_code():
    mpirun_or_skip()
    code = ("import os,sys,time; r=os.environ['HORA_RANK']\n"
            "sys.exit(7) if r=='1' else time.sleep(60)")
    rc, out, err, _ = horarun("-np", "2", "--mpi", PY, "-c", code)
    assert rc == 7, err
    assert "mpirun (pid" in err and "exited with code 7" in err


def check_build(env):
    p = subprocess.run([HORARUN, "--check-build"], capture_output=True, timeout=TIMEOUT, env=env)
    return p.returncode, p.stdout.decode()


def test_check_build_prefers_the_python_package(tmp_path):
    pkg = tmp_path / "hora"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "def built_backends():\n    return ['gloo', 'loopback']\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), HORA_LIBRARY="/nonexistent/libhora.so")
    rc, out = check_build(env)
    assert "gloo, loopback    (from hora.built_backends())" in out, out
    assert "[X] loopback" in out and "[ ] nccl" in out, out


def fake_library(tmp_path, backends):
    import shutil
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake.c"
    lines = ['#include <string.h>',
             'const char* hora_version(void) { return "9.9.9"; }',
             'int hora_built(const char* b) { return strcmp(b, "gloo") == 0; }']
    if backends is not None:
        lines.append('const char* hora_built_backends(void) { return "%s"; }' % backends)
    src.write_text("\n".join(lines) + "\n")
    lib = tmp_path / "libfake.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return str(lib)


def test_check_build_falls_back_to_the_c_function(tmp_path):
    lib = fake_library(tmp_path, "gloo,loopback,mpi")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "none"), HORA_LIBRARY=lib)
    rc, out = check_build(env)
    assert rc == 0, out
    assert "Hora 9.9.9" in out and "gloo, loopback, mpi    (from hora_built_backends())" in out
    assert "CUDA: no" in out and "NCCL: no" in out


def test_check_build_without_the_list_reports_it_unavailable(tmp_path):
    lib = fake_library(tmp_path, None)
    rc, out = check_build(dict(os.environ, HORA_LIBRARY=lib))
    assert rc == 0, out
    assert "the list of backends is unavailable" in out and "[X] gloo" in out, out
    rc, out = check_build(dict(os.environ, HORA_LIBRARY="/nonexistent/libhora.so",
                               PYTHONPATH=str(tmp_path / "none")))
    assert rc == 1 and "Hora: build information unavailable" in out, out


def test_horovodrun_flags_apply_or_are_ignored():
    # Flags that apply become the Hora variables they mean.
    code = ("import os; print(os.environ.get('HORA_STALL_WARNING_SECONDS'), "
            "os.environ.get('HORA_STALL_TIMEOUT_SECONDS'), "
            "os.environ.get('HORA_HIERARCHICAL_ALLREDUCE'), "
            "os.environ.get('HORA_COLLECTIVE_TIMEOUT_SECONDS'), "
            "os.environ.get('HORA_TIMELINE_MARK_CYCLES'))")
    rc, out, err, _ = horarun("-np", "2", "--stall-check-warning-time-seconds", "7",
                              "--stall-check-shutdown-time-seconds", "30",
                              "--no-hierarchical-allreduce", "--gloo-timeout-seconds", "45",
                              "--timeline-mark-cycles", "--cache-capacity", "1024", PY, "-c",
                              code)
    assert rc == 0, err
    lines = rank_lines(out)
    assert lines[0] == ["7 30 0 45 1"] and lines[1] == ["7 30 0 45 1"], out
    # One with no meaning in Hora is named on stderr with the reason, and the job runs.
    assert "horarun: --cache-capacity has no effect: Hora has no response cache" in err, err
    rc, out, err, _ = horarun("-np", "1", "--no-stall-check", PY, "-c",
                              "import os; print(os.environ['HORA_STALL_WARNING_SECONDS'])")
    assert rc == 0 and rank_lines(out)[0] == ["10000000"], out + err
