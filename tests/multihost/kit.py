"""The network-namespace kit (../shared/tools/netns-kit) for the multi-host launcher tests:
3 hosts with sshd on port 2222, under this suite's own prefix and subnet so that it never
touches another test's hosts. Setup once per test module, teardown always (also before
setup, for what a killed earlier run left)."""

import os
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# HORA_MULTIHOST_PREFIX / HORA_MULTIHOST_NET: another prefix and /24 for a second checkout
# running this suite on the same machine at the same time.
PREFIX = os.environ.get("HORA_MULTIHOST_PREFIX", "hmh")
NET = os.environ.get("HORA_MULTIHOST_NET", "10.200.61")
PORT = "2222"
PY = "/usr/bin/python3"


def kit_dir():
    real = os.path.dirname(os.path.realpath(__file__))
    for c in (os.environ.get("NETNS_KIT", ""),
              os.path.join(ROOT, "..", "shared", "tools", "netns-kit"),
              os.path.join(real, "..", "..", "..", "shared", "tools", "netns-kit")):
        if c and os.path.exists(os.path.join(c, "setup.sh")):
            return os.path.normpath(c)
    return None


def why_not():
    """Why the kit cannot run here, or None."""
    if kit_dir() is None:
        return "the netns kit (../shared/tools/netns-kit) is not present"
    if os.geteuid() != 0:
        return "the netns kit needs root"
    for tool in ("ip", "nsenter", "ssh", "sshd", "unshare"):
        if shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool):
            return "%s is not installed" % tool
    return None


def find(path):
    """A workspace file: runfiles/source tree, $HORA_TEST_BIN_ROOT, or bazel-bin."""
    for base in (ROOT, os.environ.get("HORA_TEST_BIN_ROOT", ""), os.path.join(ROOT, "bazel-bin")):
        p = os.path.join(base, path)
        if base and os.path.exists(p):
            return p
    raise FileNotFoundError(path + " (build it: bazel build //" + os.path.dirname(path) + ":" +
                            os.path.basename(path) + ")")


class Kit:
    def __init__(self):
        self.dir = kit_dir()
        self.state = "/tmp/netns-kit/state/" + PREFIX
        self.env = dict(os.environ, NK_PREFIX=PREFIX, NK_NET=NET, NK_PORT=PORT,
                        NK_STATE=self.state)
        self.hosts = ["%sh%d" % (PREFIX, i) for i in (1, 2, 3, 4)]
        self.addrs = ["%s.%d" % (NET, i + 1) for i in (1, 2, 3, 4)]
        self.ssh_config = os.path.join(self.state, "ssh_config")
        self.key = os.path.join(self.state, "id_ed25519")

    def sh(self, *argv, timeout=120):
        return subprocess.run(list(argv), env=self.env, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def setup(self):
        self.teardown()
        p = self.sh(os.path.join(self.dir, "setup.sh"), str(len(self.hosts)))
        if p.returncode != 0:
            raise RuntimeError("netns kit setup failed: " + p.stderr.decode()[-800:])

    def teardown(self):
        self.sh(os.path.join(self.dir, "teardown.sh"), "--kill-stragglers")

    def on(self, host, argv):
        """argv run "on" host (nk-exec), or in the root namespace for host None."""
        if host is None:
            return list(argv)
        return [os.path.join(self.dir, "nk-exec"), host] + list(argv)

    def listener(self, host):
        with open(os.path.join(self.state, host, "sshd.rec")) as f:
            return int(f.read().split()[0])

    def strays(self):
        """{host: [pid, command]} of processes inside the hosts' namespaces other than their
        sshd listener: what a job left behind."""
        out = {}
        for h in self.hosts:
            p = self.sh("ip", "netns", "pids", h, timeout=30)
            pids = [int(x) for x in p.stdout.split()] if p.returncode == 0 else []
            left = []
            for pid in pids:
                if pid == self.listener(h):
                    continue
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                    with open("/proc/%d/stat" % pid) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            continue
                except OSError:
                    continue
                left.append((pid, cmd.strip()))
            if left:
                out[h] = left
        return out

    def wait_no_strays(self, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.strays():
                return {}
            time.sleep(0.1)
        return self.strays()

    def link(self, host, up):
        p = self.sh("ip", "-n", host, "link", "set", "eth0", "up" if up else "down")
        assert p.returncode == 0, p.stderr
