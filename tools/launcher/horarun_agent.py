"""horarun's process primitives, and the agent that runs one rank on a remote host.

This file is self-contained (standard library only, no other horarun module): the ssh
launcher sends its source over ssh's standard input to `python3 -c LOADER` on the remote
host, so nothing of Hora needs to be installed there but python3. On this host the other
modules import it for the same primitives (exit codes, process-group liveness, NIC
addresses).

Protocol on the agent's standard input (written by horarun_ssh.py):
  1. LOADER reads a 10-digit length and that many bytes: this file's source, and runs it;
  2. the agent reads a 10-digit length and that many bytes: a JSON config (mode "probe" or
     "rank"; for a rank: command, working directory, environment, including the job token,
     which therefore never appears on a command line);
  3. then control lines: "INT", "TERM" or "KILL" (forwarded to the rank's process group).
     End of input means horarun (or its ssh) is gone: the rank is stopped.
The agent gives the rank stdin from /dev/null and its own process group, forwards the
rank's stdout and stderr bytes as they come to its own, and reports to horarun on stderr in
marker lines ("\\0horarun-agent NONCE {json}") that horarun strips: "started" with the
rank's pid, "error" when the rank could not start, "exit" with the code. The agent exits
only after every process of the rank's group is gone (SIGTERM, then SIGKILL after the
grace period), so a remote rank never outlives its job.
"""

import fcntl
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

POLL_S = 0.05
KILL_WAIT_S = 5.0      # after SIGKILL, how long to wait for the kernel to finish a group
DRAIN_S = 2.0          # after a group is gone, how long to wait for its last output
MARK = b"\0horarun-agent "
CONTROL = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL}
SIOCGIFADDR = 0x8915


# -- primitives shared with horarun's own modules ------------------------------------------

def exit_code(status):
    """waitid siginfo -> (code as a shell reports it, description)."""
    if status.si_code == os.CLD_EXITED:
        return status.si_status, "exited with code %d" % status.si_status
    try:
        name = signal.Signals(status.si_status).name
    except ValueError:
        name = "signal %d" % status.si_status
    return 128 + status.si_status, "was killed by %s (exit code %d)" % (
        name, 128 + status.si_status)


def exited(pid):
    """(code, how) once the child pid exited, else None; never reaps it (WNOWAIT), so its
    pid, which is also its process group id, stays taken and killpg() cannot hit an
    unrelated group."""
    try:
        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 255, "disappeared"
    if status is not None and status.si_pid == pid:
        return exit_code(status)
    return None


def _live_processes():
    """(pid, process group, session) of every live process (zombies do not count);
    None when /proc cannot be read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[0] != b"Z":
            found.append((int(entry), int(fields[2]), int(fields[3])))
    return found


def group_alive(pgid):
    """True while any process of the group is alive (zombies do not count)."""
    procs = _live_processes()
    if procs is None:
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return any(group == pgid for _, group, _ in procs)


def session_members(sid):
    """Pids of the live processes of session `sid`."""
    return [pid for pid, _, session in (_live_processes() or []) if session == sid]


def signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def nic_address(name):
    """The IPv4 address of network interface `name`, or None."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR,
                             struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        sock.close()


def first_nic_address(nics):
    """(nic, address) of the first interface in `nics` that has an IPv4 address, else None."""
    for nic in nics:
        addr = nic_address(nic)
        if addr:
            return nic, addr
    return None


LOWEST_PORT = 10000  # free_ports picks at random from here to the ephemeral range


def ephemeral_range(path="/proc/sys/net/ipv4/ip_local_port_range"):
    """(first, last) of the kernel's ports for outgoing connections; Linux's default when the
    file cannot be read."""
    try:
        with open(path) as f:
            first, last = (int(x) for x in f.read().split()[:2])
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(host, n):
    """n different ports of `host` that were free a moment ago (each bound once, then all
    closed). Drawn at random below the ephemeral range: a port the kernel hands out (bind to
    0) can be taken by any outgoing connection on the machine before the job binds it, which
    made a job fail with "cannot listen" while other jobs ran; port 0 only where that range
    leaves no room or nothing there is free."""
    first, _ = ephemeral_range()
    pick = random.SystemRandom()
    socks = []
    try:
        tries = 0
        while len(socks) < n:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = pick.randrange(LOWEST_PORT, first) if first > LOWEST_PORT + 1000 and \
                tries < 100 else 0
            tries += 1
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()
                if port == 0:
                    raise
                continue
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


BIND_VAR = "HORARUN_BIND_TO"  # set by horarun --bind-to in each rank's environment


def cpu_slice(allowed, local_rank, local_size):
    """The CPUs of local rank `local_rank` of `local_size` under --bind-to core: an equal,
    disjoint, contiguous share of `allowed` (this host's CPUs horarun may use), the
    remainder left to no rank; None when there are fewer CPUs than local ranks (nothing
    is bound then: an oversubscribed host is better left to the scheduler)."""
    cpus = sorted(allowed)
    per = len(cpus) // local_size if local_size > 0 else 0
    if per < 1 or not 0 <= local_rank < local_size:
        return None
    return cpus[local_rank * per:(local_rank + 1) * per]


def _rank_cpus(env):
    if env.get(BIND_VAR) != "core" or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        local_rank, local_size = int(env["HORA_LOCAL_RANK"]), int(env["HORA_LOCAL_SIZE"])
    except (KeyError, ValueError):
        return None
    return cpu_slice(os.sched_getaffinity(0), local_rank, local_size)


def start_command(command, env, cwd=None):
    """Popen of a rank: own session (so its own process group), stdin from /dev/null,
    stdout/stderr on pipes. Returns (proc, None) or (None, (code, message)): 127 when the
    command is not found, 126 when it cannot be run. With HORARUN_BIND_TO=core in env the
    rank starts bound to its CPU slice (cpu_slice): the forking thread takes the slice for
    the fork, so every thread of the rank inherits it, then gets its own CPUs back."""
    cpus = _rank_cpus(env)
    before = os.sched_getaffinity(0) if cpus else None
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
    except OSError as e:
        code = 127 if isinstance(e, FileNotFoundError) else 126
        why = "command not found" if code == 127 else (e.strerror or str(e))
        return None, (code, "%s: %s" % (command[0], why))
    finally:
        if before:
            os.sched_setaffinity(0, before)
    return proc, None


# -- probe: what horarun asks a remote host before the job starts --------------------------

def probe(cfg):
    """Facts about this host: its name, the ssh connection's two addresses, the addresses
    of the requested interfaces, whether the working directory exists and, for the first
    host of a job, the coordinator's address and two free ports on it (the coordinator's and
    the one torch.distributed's store gets as MASTER_PORT)."""
    conn = os.environ.get("SSH_CONNECTION", "").split()
    info = {
        "hostname": socket.gethostname(),
        "client_addr": conn[0] if len(conn) == 4 else None,
        "server_addr": conn[2] if len(conn) == 4 else None,
        "python": sys.version.split()[0],
        "cwd_ok": os.path.isdir(cfg.get("cwd") or "/"),
        "nic": first_nic_address(cfg.get("nics") or []),
    }
    if cfg.get("want_port"):
        addr = info["nic"][1] if info["nic"] else info["server_addr"] or "127.0.0.1"
        info["coordinator"] = [addr] + free_ports(addr, 2)
    return info


# -- the remote rank -----------------------------------------------------------------------

class RemoteRank:
    """Runs one rank on this host for a horarun on another host (see the module comment)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.nonce = cfg["nonce"].encode()
        self.grace = float(cfg.get("grace", 5.0))
        self.err_lock = threading.Lock()
        self.err_last = b"\n"    # last byte written to our stderr
        self.proc = None
        self.launcher_gone = False  # end of input, SIGTERM or SIGHUP: stop the rank
        self.gone_seen = False
        self.pending = b""

    def mark(self, kind, **fields):
        fields["kind"] = kind
        line = MARK + self.nonce + b" " + json.dumps(fields).encode() + b"\n"
        with self.err_lock:
            if self.err_last != b"\n":
                line = b"\n" + line
            self._write(2, line)
            self.err_last = b"\n"

    @staticmethod
    def _write(fd, data):
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            pass  # horarun's ssh is gone: keep draining the rank, drop its output

    def _forward(self, stream, fd):
        try:
            while True:
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    break
                if fd == 2:
                    with self.err_lock:
                        self._write(2, chunk)
                        self.err_last = chunk[-1:]
                else:
                    self._write(fd, chunk)
        except OSError:
            pass

    def _control(self, timeout):
        """Waits up to `timeout` for control input; returns the signal asked for, or None.
        Records end of input (horarun gone) in self.launcher_gone."""
        if self.launcher_gone:
            if not self.gone_seen:
                self.gone_seen = True
                return signal.SIGTERM
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([0], [], [], timeout)
        if not ready:
            return None
        try:
            data = os.read(0, 4096)
        except OSError:
            data = b""
        if not data:
            self.launcher_gone = self.gone_seen = True
            return signal.SIGTERM
        self.pending += data
        sig = None
        while b"\n" in self.pending:
            word, self.pending = self.pending.split(b"\n", 1)
            sig = CONTROL.get(word.strip().decode("ascii", "replace"), sig)
        return sig

    def _done(self):
        return exited(self.proc.pid) is not None and not group_alive(self.proc.pid)

    def _stop(self, sig):
        """sig to the rank's group; SIGKILL after the grace period or when asked."""
        pgid = self.proc.pid
        signal_group(pgid, sig)
        if sig != signal.SIGKILL:
            deadline = time.monotonic() + self.grace
            while time.monotonic() < deadline and not self._done():
                if self._control(POLL_S) == signal.SIGKILL:
                    break
        signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and not self._done():
            time.sleep(POLL_S)

    def run(self):
        cfg = self.cfg
        try:
            os.chdir(cfg["cwd"])
        except OSError as e:
            self.mark("error", code=1, message="cannot enter the working directory %s: %s"
                      % (cfg["cwd"], e.strerror or e))
            return 1
        env = dict(os.environ)
        for name in cfg.get("unset", []):
            env.pop(name, None)
        env.update(cfg["env"])
        self.proc, error = start_command(cfg["command"], env)
        if error:
            self.mark("error", code=error[0], message=error[1])
            return error[0]
        self.mark("started", pid=self.proc.pid)
        threads = [threading.Thread(target=self._forward, args=(s, fd), daemon=True)
                   for s, fd in ((self.proc.stdout, 1), (self.proc.stderr, 2))]
        for t in threads:
            t.start()
        while exited(self.proc.pid) is None:
            sig = self._control(POLL_S)
            if sig is not None:
                self._stop(sig)
                break
        if group_alive(self.proc.pid):
            self._stop(signal.SIGTERM)  # what the rank left behind in its group
        code, how = exited(self.proc.pid)
        self.proc.wait()
        deadline = time.monotonic() + DRAIN_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.mark("exit", code=code, how=how, pid=self.proc.pid)
        return code


def _remote_main(read_exact):
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    cfg = json.loads(read_exact(int(read_exact(10))).decode("utf-8"))
    if cfg["mode"] == "probe":
        sys.stdout.write(json.dumps(probe(cfg)) + "\n")
        sys.stdout.flush()
        return 0
    agent = RemoteRank(cfg)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: setattr(agent, "launcher_gone", True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return agent.run()


if __name__ == "__horarun_agent__":
    sys.exit(_remote_main(_read_exact))  # noqa: F821 (defined by the loader)
