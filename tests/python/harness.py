"""Runs a worker script as a Hora job through horarun and reads its per-rank case results.

Workers print `CASE <name> PASS` or `CASE <name> FAIL <reason>` on every rank (see
workers/cases.py); horarun prefixes each line with `[rank]<stdout>: `.
"""

import os
import random
import re
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKERS = os.path.join(HERE, "workers")
# The ranks' interpreter: $HORA_TEST_PYTHON (the *_torch2 targets), else Debian's.
PYTHON = os.environ.get("HORA_TEST_PYTHON") or (
    "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
if not os.path.exists(PYTHON):
    raise RuntimeError("HORA_TEST_PYTHON=%s does not exist: run tools/setup.sh" % PYTHON)
# torch 2.x from PyPI, beside Debian's 1.13 (tools/setup_torch2.sh installs it).
TORCH2_PYTHON = os.path.join(os.environ.get("HORA_TORCH2", "/opt/hora/torch2"), "bin", "python")
# An installed package under test (run_pytest.sh's HORA_TEST_INSTALLED): bindings/python stays
# off every path, so the ranks and this process import the installed hora.
BINDINGS = [] if os.environ.get("HORA_TEST_INSTALLED") else [os.path.join(REPO, "bindings",
                                                                           "python")]


def torch2_python():
    """The torch 2.x interpreter; a missing one fails the test (setup installs it)."""
    if not os.path.exists(TORCH2_PYTHON):
        raise RuntimeError("torch 2.x is not installed at %s: run tools/setup.sh"
                           % TORCH2_PYTHON)
    return TORCH2_PYTHON

_LINE = re.compile(r"^\[(\d+)\]<(?:stdout|stderr)>: ?(.*)$")
_CASE = re.compile(r"^CASE (\S+) (PASS|FAIL)(?: (.*))?$")


def horarun():
    """$HORARUN, else the repository's tools/launcher/horarun."""
    path = os.environ.get("HORARUN") or os.path.join(REPO, "tools", "launcher", "horarun")
    if not os.path.exists(path):
        raise RuntimeError("horarun not found at %s (set HORARUN)" % path)
    return path


def job_env(extra=None):
    env = dict(os.environ)
    paths = BINDINGS + [WORKERS]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    if extra:
        env.update(extra)
    return env


class JobResult(object):
    def __init__(self, np, rc, stdout, stderr, timed_out):
        self.np, self.rc, self.stdout, self.stderr = np, rc, stdout, stderr
        self.timed_out = timed_out
        self.lines = {}   # rank -> [text]
        self.cases = {}   # name -> {rank: (status, reason)}
        for line in (stdout + "\n" + stderr).splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            rank, text = int(m.group(1)), m.group(2)
            self.lines.setdefault(rank, []).append(text)
            c = _CASE.match(text)
            if c:
                self.cases.setdefault(c.group(1), {})[rank] = (c.group(2), c.group(3) or "")

    def tail(self, n=60):
        out = (self.stdout + "\n" + self.stderr).splitlines()
        return "\n".join(out[-n:])

    def assert_case(self, name):
        """The case passed on every rank."""
        got = self.cases.get(name, {})
        problems = []
        for r in range(self.np):
            status, reason = got.get(r, ("MISSING", ""))
            if status != "PASS":
                problems.append("rank %d: %s %s" % (r, status, reason))
        if problems:
            raise AssertionError("case %s (np=%d, rc=%s%s):\n%s\n--- job output tail ---\n%s"
                                 % (name, self.np, self.rc,
                                    ", timed out" if self.timed_out else "",
                                    "\n".join(problems), self.tail()))


def run_job(np, script, args=(), timeout=240, extra_env=None, launcher_args=(), python=None):
    """Runs `horarun -np N python workers/<script> args...` (python: the interpreter of the
    ranks, Debian's by default); returns a JobResult."""
    cmd = [horarun(), "-np", str(np)] + list(launcher_args) + [
        python or PYTHON, os.path.join(WORKERS, script)] + list(args)  # an absolute script stays
    try:
        p = subprocess.run(cmd, cwd=REPO, env=job_env(extra_env), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, universal_newlines=True)
        return JobResult(np, p.returncode, p.stdout, p.stderr, False)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")
        return JobResult(np, None, text(e.stdout), text(e.stderr), True)


def free_port_pair():
    """A MASTER_PORT for torchrun whose next port (Hora's coordinator under torchrun) is free
    too, both below the kernel's ephemeral range (32768-60999), where the outgoing
    connections of the tests running beside this one cannot take the second a moment later."""
    for _ in range(200):
        port = random.randint(20000, 31998)
        socks = [socket.socket(), socket.socket()]
        try:
            socks[0].bind(("0.0.0.0", port))
            socks[1].bind(("0.0.0.0", port + 1))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free pair of ports")


def case_names(module_name):
    """The case names a worker module registers (imported without running it)."""
    sys.path.insert(0, WORKERS)
    for path in BINDINGS:
        sys.path.insert(0, path)
    import importlib
    mod = importlib.import_module(module_name)
    registry = sys.modules.get("cases")  # workers register through cases.case
    if registry is None:
        return []
    # cases.CASES is shared by every worker imported into this process: keep this module's.
    return [fn.__name__ for fn in registry.CASES if fn.__module__ == mod.__name__]
