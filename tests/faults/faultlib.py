"""Helpers for the fault tests: run a job, watch its output lines as they come, kill ranks,
and never hang (every wait has a deadline; cleanup kills what is left).

A job's ranks print "READY rank=R pid=P" once running and, on their first error,
"FAILED rank=R t=<unix seconds> status=<STATUS> msg=<message>" (tests/faults/fault_job.cc).
"""

import os
import re
import signal
import subprocess
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PYTHON = "/usr/bin/python3"


def find(path):
    """A workspace file from the runfiles tree, the source tree or bazel-bin."""
    for base in (ROOT, os.path.join(ROOT, "bazel-bin")):
        p = os.path.join(base, path)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(path + " (build it first: bazel build //" +
                            os.path.dirname(path) + ":" + os.path.basename(path) + ")")


def hang_bound(deadline):
    """How long a test lets a wait run that the product ends after `deadline` seconds: loose
    enough for shared, loaded machines, tight enough to fail a hang or a missing deadline (the
    same rule as tests/harness/hang_bound.h). The measured times are printed, not asserted."""
    return 4 * deadline + 10


HORARUN = os.environ.get("HORARUN") or os.path.join(ROOT, "tools", "launcher", "horarun")
READY_RE = re.compile(r"READY rank=(\d+) pid=(\d+)")
FAILED_RE = re.compile(r"FAILED rank=(-?\d+) t=([0-9.]+) status=(\S+) msg=(.*)$")


class Failure:
    def __init__(self, m):
        self.rank = int(m.group(1))
        self.t = float(m.group(2))
        self.status = m.group(3)
        self.msg = m.group(4)

    def __repr__(self):
        return "FAILED rank=%d status=%s msg=%s" % (self.rank, self.status, self.msg)


def alive(pid):
    """True while pid runs (a zombie is not alive)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


class Job:
    """One process tree (horarun, or nk-exec ... for one rank) whose merged output is read
    line by line on a thread. Several Jobs can be watched together through their lines."""

    def __init__(self, argv, env=None, name="job"):
        self.name = name
        self.lines = []          # (unix time seen, text)
        self.cv = threading.Condition()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            with self.cv:
                self.lines.append((time.time(), raw.decode("utf-8", "replace").rstrip("\n")))
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def text(self):
        with self.cv:
            return "\n".join(l for _, l in self.lines)

    def wait_lines(self, pred, timeout):
        """Waits until pred(list of texts) is true; returns it, or False at the deadline."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                texts = [l for _, l in self.lines]
                if pred(texts):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    return bool(pred([l for _, l in self.lines]))
                self.cv.wait(min(left, 0.2))

    def ready(self):
        """{rank: pid} of the READY lines so far."""
        out = {}
        for l in self.text().splitlines():
            m = READY_RE.search(l)
            if m:
                out[int(m.group(1))] = int(m.group(2))
        return out

    def failures(self):
        """{rank: Failure} of the first FAILED line of each rank."""
        out = {}
        for l in self.text().splitlines():
            m = FAILED_RE.search(l)
            if m and int(m.group(1)) not in out:
                out[int(m.group(1))] = Failure(m)
        return out

    def finish(self, timeout):
        """Waits for the process to exit; True if it did (else it is killed, False)."""
        try:
            self.proc.wait(timeout)
            ok = True
        except subprocess.TimeoutExpired:
            ok = False
        self.kill()
        self.reader.join(5)
        return ok

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


def kill_ranks(pids):
    """SIGCONT + SIGKILL each live rank pid (ranks run in their own sessions). Call only while
    their parent (horarun) still holds them unreaped, so the pids cannot have been reused."""
    for pid in pids:
        if alive(pid):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass


def stacks(pids, limit=6000):
    """Thread stacks of the live pids (gdb, when installed), for the report of a hang."""
    out = []
    for pid in pids:
        if not alive(pid) or not os.path.exists("/usr/bin/gdb"):
            continue
        try:
            p = subprocess.run(["/usr/bin/gdb", "-p", str(pid), "-batch", "-nx", "-ex",
                                "thread apply all bt 12"], capture_output=True, timeout=60)
            text = p.stdout.decode("utf-8", "replace")
            out.append("--- pid %d ---\n%s" % (pid, "\n".join(
                l for l in text.splitlines() if l.startswith(("#", "Thread")))[:limit]))
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "\n".join(out)


def horarun_job(np, job, args=(), heartbeat_timeout=2, extra=(), env=None):
    argv = [PYTHON, HORARUN, "--keep-going", "--heartbeat-timeout", str(heartbeat_timeout),
            "-np", str(np)] + list(extra) + [job] + [str(a) for a in args]
    return Job(argv, env=env, name="horarun")
