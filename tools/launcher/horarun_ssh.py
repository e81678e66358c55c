"""horarun: ranks on other hosts, over ssh.

Each remote rank is one `ssh HOST 'exec python3 -c LOADER'` whose standard input carries
horarun_agent.py's source, then the rank's config (command, working directory,
environment with the job token), then control lines; see horarun_agent.py for the
protocol. So the token is never on a command line (here or there), the user command's
stdin is /dev/null, and the agent on the remote host stops the rank's whole process group
when horarun asks, when the rank fails, or when the ssh connection goes away.

Before anything starts, horarun probes every remote host once, in parallel, the same way
(mode "probe"): an unreachable host fails the start within the start timeout naming the
host and what ssh said, and the probe answers the hostname, the address the ssh
connection came from (an address of this host that the remote host reaches), the
interface addresses for --network-interface, and for a remote first host, the
coordinator's address and a free port there.
"""

import json
import secrets
import shlex
import signal
import subprocess
import threading
import time

import horarun_agent as agent
from horarun_job import DRAIN_S, pump
from horarun_launchers import Launcher, PopenPart

LOADER = """import os
def _r(n):
    b = b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            raise SystemExit(111)
        b += c
    return b
exec(compile(_r(int(_r(10))), "horarun_agent", "exec"),
     {"__name__": "__horarun_agent__", "_read_exact": _r})
"""


class SshError(Exception):
    """A host that cannot be used; the message names it."""


class SshOptions:
    """How to reach hosts: -p, -i, --ssh-config-file; the remote python."""

    def __init__(self, port=None, identity=None, config=None, python="python3"):
        self.port = port
        self.identity = identity
        self.config = config
        self.python = python

    def options(self):
        """ssh's options: never prompt (BatchMode), no tty, then the user's choices."""
        argv = ["-o", "BatchMode=yes", "-T"]
        if self.config:
            argv += ["-F", self.config]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.identity:
            argv += ["-i", self.identity]
        return argv

    def argv(self, host):
        remote = "exec %s -c %s" % (shlex.quote(self.python), shlex.quote(LOADER))
        return ["ssh"] + self.options() + [host, remote]


def _frame(data):
    return b"%010d" % len(data) + data


def payload(cfg):
    """What the agent reads first: its own source, then the config."""
    with open(agent.__file__.replace(".pyc", ".py"), "rb") as f:
        source = f.read()
    return _frame(source) + _frame(json.dumps(cfg).encode("utf-8"))


def _ssh_said(stderr_text):
    lines = [l.strip() for l in stderr_text.splitlines() if l.strip()]
    return " / ".join(lines[-3:]) if lines else "nothing"


def probe_one(host, ssh, cfg, timeout):
    """The probe of one host (dict), or raises SshError."""
    try:
        proc = subprocess.Popen(ssh.argv(host), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        raise SshError("cannot run ssh: %s" % (e.strerror or e))
    try:
        out, err = proc.communicate(payload(dict(cfg, mode="probe")), timeout=timeout)
    except subprocess.TimeoutExpired:
        agent.signal_group(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise SshError("cannot reach host %s: no answer within %gs (ssh said: %s)"
                       % (host, timeout, _ssh_said(err.decode("utf-8", "replace"))))
    if proc.returncode != 0:
        raise SshError("cannot reach host %s: ssh exited with code %d (ssh said: %s)"
                       % (host, proc.returncode, _ssh_said(err.decode("utf-8", "replace"))))
    try:
        return json.loads(out.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SshError("host %s: unexpected probe answer %r (stderr: %s)"
                       % (host, out[-200:], _ssh_said(err.decode("utf-8", "replace"))))


def probe_hosts(hosts, ssh, cwd, nics, first, timeout):
    """{host: probe} for every host, probed in parallel; `first` (or None) also gets a
    coordinator address and port. Raises SshError naming every host that failed."""
    results, errors = {}, {}

    def run(host):
        cfg = {"cwd": cwd, "nics": nics, "want_port": host == first}
        try:
            results[host] = probe_one(host, ssh, cfg, timeout)
        except SshError as e:
            errors[host] = str(e)

    threads = [threading.Thread(target=run, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout + 10  # probe_one enforces `timeout` itself
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for host in hosts:
        if host not in results and host not in errors:
            errors[host] = "cannot reach host %s: no answer within %gs" % (host, timeout)
    if errors:
        raise SshError("; ".join(errors[h] for h in hosts if h in errors))
    for host in hosts:
        info = results[host]
        if not info.get("cwd_ok"):
            raise SshError("host %s: the working directory %s does not exist there"
                           % (host, cwd))
        if nics and not info.get("nic"):
            raise SshError("host %s has none of the network interfaces %s"
                           % (host, ",".join(nics)))
    return results


class SshRank(PopenPart):
    """A rank on another host: the local ssh process, whose agent reports in marker lines."""

    def __init__(self, spec, proc, nonce, output):
        PopenPart.__init__(self, proc)
        self.rank = spec.rank
        self.host = spec.host
        self.nonce = nonce.encode()
        self.remote_pid = None
        self.report = None        # the agent's "exit" or "error" marker
        self.ssh_lines = []       # the last stderr lines, for ssh's own error messages
        self.threads.append(pump(
            proc.stdout, lambda line: output.rank_line(self.rank, "stdout", line),
            "horarun-%d-stdout" % self.rank))
        self.threads.append(pump(proc.stderr, lambda line: self._stderr(line, output),
                                 "horarun-%d-stderr" % self.rank))
        self.control_lock = threading.Lock()

    def _stderr(self, line, output):
        if line.startswith(agent.MARK + self.nonce + b" "):
            try:
                msg = json.loads(line[len(agent.MARK) + len(self.nonce) + 1:])
            except ValueError:
                msg = {}
            if msg.get("kind") == "started":
                self.remote_pid = msg.get("pid")
            elif msg.get("kind") in ("exit", "error"):
                self.report = msg
            return
        self.ssh_lines = (self.ssh_lines + [line.decode("utf-8", "replace").strip()])[-3:]
        output.rank_line(self.rank, "stderr", line)

    def label(self):
        pid = self.remote_pid if self.remote_pid is not None else "?"
        return "rank %d on %s (pid %s)" % (self.rank, self.host, pid)

    def _describe(self, code, how):
        # The last marker comes through stderr, which may still be in flight.
        deadline = time.monotonic() + DRAIN_S
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        r = self.report
        if r and r.get("kind") == "exit":
            return int(r["code"]), r.get("how", how)
        if r and r.get("kind") == "error":
            return int(r["code"]), "could not start: %s" % r.get("message")
        said = " / ".join(l for l in self.ssh_lines if l) or "nothing"
        if code == 255:
            return 255, "lost: ssh to %s failed (ssh said: %s)" % (self.host, said)
        return code, "ended before its agent reported (ssh %s; stderr: %s)" % (how, said)

    def send(self, sig):
        """Asks the agent; if it cannot be asked any more (ssh gone), nothing remains here
        but ssh itself, which gets the signal."""
        word = {signal.SIGINT: b"INT\n", signal.SIGKILL: b"KILL\n"}.get(sig, b"TERM\n")
        with self.control_lock:
            try:
                self.proc.stdin.write(word)
                self.proc.stdin.flush()
                return
            except (OSError, ValueError):
                pass
        if sig == signal.SIGKILL:
            agent.signal_group(self.pgid, signal.SIGKILL)

    def reap(self):
        PopenPart.reap(self)
        with self.control_lock:
            try:
                self.proc.stdin.close()
            except (OSError, ValueError):
                pass


class SshLauncher(Launcher):
    """Starts the ranks of one remote host, each through its own ssh connection."""

    def __init__(self, host, ssh, command, specs, cwd, grace, unset=()):
        self.host = host
        self.ssh = ssh
        self.command = list(command)
        self.specs = specs
        self.cwd = cwd
        self.grace = grace
        self.unset = list(unset)

    def start(self, output):
        parts = []
        for spec in self.specs:
            nonce = secrets.token_hex(8)
            proc = subprocess.Popen(self.ssh.argv(self.host), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True, close_fds=True)
            part = SshRank(spec, proc, nonce, output)
            cfg = {"mode": "rank", "nonce": nonce, "command": self.command, "cwd": self.cwd,
                   "env": spec.env, "unset": self.unset, "grace": self.grace}
            with part.control_lock:
                try:
                    proc.stdin.write(payload(cfg))
                    proc.stdin.flush()
                except OSError:
                    pass  # ssh already gone: poll() reports what it said
            parts.append(part)
        return parts
