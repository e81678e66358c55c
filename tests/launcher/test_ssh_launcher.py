"""The ssh launcher of tools/launcher/horarun without sshd: a stand-in ssh (fake_ssh) runs the
remote command on this host, so the agent protocol, the environment and token through ssh's
standard input, the ssh flags, failures and signals of "remote" ranks are tested everywhere.
Real sshd across hosts: tests/multihost (netns kit)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
HORARUN = os.environ.get("HORARUN") or os.path.join(ROOT, "tools", "launcher", "horarun")
PY = sys.executable
TIMEOUT = 120  # a hang guard only


@pytest.fixture
def fake(tmp_path):
    """(environment with the stand-in ssh first on PATH, its argv log)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(os.path.join(HERE, "fake_ssh"), str(bindir / "ssh"))
    log = tmp_path / "ssh.log"
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ.get("PATH", "/usr/bin:/bin")),
               FAKE_SSH_LOG=str(log))
    return env, log


def run(args, env, timeout=TIMEOUT):
    p = subprocess.run([PY, HORARUN] + list(args), env=env, capture_output=True,
                       timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def rank_lines(text, stream="stdout"):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\[(\d+)\]<%s>: (.*)$" % stream, line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


ENV_JOB = ("import json,os,sys; st=os.fstat(0); print(json.dumps({'env': {k: v for k, v in "
           "os.environ.items() if k.startswith(('HORA_', 'TEST_')) or k == 'HOME'}, 'cwd': os.getcwd(), "
           "'stdin': sys.stdin.read(), 'null': st.st_rdev == os.stat('/dev/null').st_rdev}))")


def test_remote_ranks_get_env_cwd_and_token_through_stdin(fake, tmp_path):
    env, log = fake
    env["TEST_PASSED"] = "yes"
    env["HOME"] = "/launcher-home"  # a login variable: not forwarded to other hosts
    key = tmp_path / "id"
    key.write_text("not a key")
    rc, out, err = run(["-np", "3", "-H", "localhost:1,fake-a:2", "-p", "2200", "-i",
                        str(key), "--ssh-config-file", "/dev/null", "-x", "TEST_X=1", PY, "-c",
                        ENV_JOB], env)
    assert rc == 0, err
    info = {r: json.loads(l[0]) for r, l in rank_lines(out).items()}
    assert sorted(info) == [0, 1, 2]
    token = info[0]["env"]["HORA_JOB_TOKEN"]
    for r in (1, 2):
        e = info[r]["env"]
        assert e["HORA_JOB_TOKEN"] == token and e["HORA_RANK"] == str(r)
        assert e["TEST_PASSED"] == "yes" and e["TEST_X"] == "1"
        assert info[r]["cwd"] == ROOT and info[r]["stdin"] == "" and info[r]["null"]
        assert e["HOME"] == "/fake-remote-home"
    # the coordinator's address is the one the remote host saw the ssh connection come from
    assert info[0]["env"]["HORA_COORDINATOR_ADDR"].startswith("127.0.0.1:")
    argvs = log.read_text().splitlines()
    assert len(argvs) == 3  # one probe + two ranks
    for a in argvs:
        assert token not in a
        assert "-p 2200" in a and "-i %s" % key in a and "-F /dev/null" in a and " fake-a " in a
        assert "BatchMode=yes" in a


def test_remote_rank_failure_stops_the_job(fake, tmp_path):
    env, _ = fake
    code = ("import os,sys,time\n"
            "r=os.environ['HORA_RANK']\n"
            "open(os.path.join(sys.argv[1], r), 'w').write(str(os.getpid()))\n"
            "if r=='2':\n"
            "    while len(os.listdir(sys.argv[1])) < 3: time.sleep(0.02)\n"
            "    sys.exit(5)\n"
            "time.sleep(300)")
    d = tmp_path / "pids"  # tmp_path also holds the stand-in's bin/ and log
    d.mkdir()
    rc, out, err = run(["-np", "3", "-H", "localhost:1,fake-b:2", "--grace", "1", PY, "-c",
                        code, str(d)], env)
    assert rc == 5, err
    assert re.search(r"rank 2 on fake-b \(pid \d+\) exited with code 5; stopping the other "
                     r"ranks", err), err
    pids = [int(open(os.path.join(str(d), r)).read()) for r in "012"]
    assert wait_dead(pids), pids


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pids, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_remote_ranks_and_their_children(fake, tmp_path, sig, code):
    env, _ = fake
    child = ("import os,sys,time,subprocess,signal\n"
             "r=os.environ['HORA_RANK']; c=subprocess.Popen(['sleep','300'])\n"
             "if r=='1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "open(os.path.join(sys.argv[1], r+'.tmp'),'w').write('%d %d' % (os.getpid(), c.pid))\n"
             "os.rename(os.path.join(sys.argv[1], r+'.tmp'), os.path.join(sys.argv[1], r))\n"
             "time.sleep(300)")
    p = subprocess.Popen([PY, HORARUN, "-np", "2", "-H", "fake-c:2", "--grace", "1", PY, "-c",
                          child, str(tmp_path)], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not {"0", "1"} <= set(os.listdir(str(tmp_path))):
            time.sleep(0.05)  # a rank's "r.tmp" is not its file yet
        names = [n for n in os.listdir(str(tmp_path)) if n in ("0", "1")]
        assert sorted(names) == ["0", "1"], os.listdir(str(tmp_path))
        pids = [int(x) for n in names for x in open(os.path.join(str(tmp_path), n)).read().split()]
        assert all(alive(x) for x in pids)
        p.send_signal(sig)
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == code, err
        assert wait_dead(pids), pids
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_unreachable_host_fails_before_any_rank_starts(fake, tmp_path):
    env, log = fake
    rc, out, err = run(["-np", "3", "-H", "localhost:1,fake-d:1,unreachable-e:1", PY, "-c",
                        "open(%r, 'w')" % str(tmp_path / "started")], env)
    assert rc == 255, err
    assert "cannot reach host unreachable-e" in err and "Connection refused" in err, err
    assert "fake-d" not in err
    assert not (tmp_path / "started").exists()


def test_remote_command_not_found_and_missing_directory(fake, tmp_path):
    env, _ = fake
    rc, out, err = run(["-np", "1", "-H", "fake-f:1", "/nonexistent/hora-prog"], env)
    assert rc == 127, err
    assert "rank 0 on fake-f (pid ?) could not start: /nonexistent/hora-prog: command not found" \
        in err, err


def test_remote_output_is_prefixed_and_partial_lines_end(fake):
    env, _ = fake
    code = ("import sys; print('out'); sys.stderr.write('err\\n'); sys.stderr.write('partial')")
    rc, out, err = run(["-np", "1", "-H", "fake-g:1", PY, "-c", code], env)
    assert rc == 0, err
    assert rank_lines(out) == {0: ["out"]}
    assert rank_lines(err, "stderr") == {0: ["err", "partial"]}
    assert "horarun-agent" not in err
