"""horarun's elastic mode: which hosts may run workers now.

HostSource: the hosts and slots of -H / --hostfile (fixed), or what --host-discovery-script
prints, as horovodrun reads it: one host per line, `host` or `host:slots` (a host without
slots has --slots-per-host, default 1); blank lines and `#` comments are skipped. The script
runs with a deadline; a failure the first time ends the start (the message names the
script and what it said), a later failure keeps the last good answer (and is reported once).

Blacklist: a host whose worker failed gets no workers for a while: for ever without
--blacklist-cooldown-range, else LO * 2^(n-1) seconds after its n-th failure, at most HI.
"""

import subprocess
import time

import horarun_hosts as hosts_mod

SCRIPT_TIMEOUT_S = 30.0


class DiscoveryError(Exception):
    """The discovery script failed or printed something that is not a host list."""


def parse_discovery(text, default_slots, where):
    """The script's output -> [(host, slots)], repeated hosts added up."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, slots = line.rpartition(":")
        if not sep:
            name, slots = line, str(default_slots)
        try:
            hosts.append((name, hosts_mod._slots(slots, "%s line %d" % (where, number), name)))
        except hosts_mod.HostError as e:
            raise DiscoveryError(str(e))
        if not name or " " in name:
            raise DiscoveryError("%s line %d: %r is not `host` or `host:slots`"
                                 % (where, number, line))
    return hosts_mod.merge(hosts)


class HostSource:
    def __init__(self, fixed=None, script=None, default_slots=1):
        self.fixed = fixed
        self.script = script
        self.default_slots = default_slots
        self.last = None
        self.warned = False

    def poll(self):
        """[(host, slots)] now; raises DiscoveryError only when no answer was ever good."""
        if self.script is None:
            return list(self.fixed)
        try:
            hosts = self._run()
        except DiscoveryError as e:
            if self.last is None:
                raise
            if not self.warned:
                self.warned = True
                import horarun_job
                horarun_job.say("warning: %s; keeping the last host list" % e)
            return list(self.last)
        self.last = hosts
        self.warned = False
        return list(hosts)

    def _run(self):
        where = "--host-discovery-script %s" % self.script
        try:
            p = subprocess.run([self.script], capture_output=True, timeout=SCRIPT_TIMEOUT_S,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DiscoveryError("%s: no answer within %gs" % (where, SCRIPT_TIMEOUT_S))
        except OSError as e:
            raise DiscoveryError("%s: cannot run it: %s" % (where, e.strerror or e))
        if p.returncode != 0:
            said = p.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise DiscoveryError("%s exited with code %d (stderr: %s)"
                                 % (where, p.returncode, " / ".join(said) or "nothing"))
        return parse_discovery(p.stdout.decode("utf-8", "replace"), self.default_slots, where)


class Blacklist:
    def __init__(self, cooldown=None, clock=time.monotonic):
        self.cooldown = cooldown  # (lo, hi) seconds, or None: for ever
        self.clock = clock
        self.until = {}           # host -> time it comes back (None: never)
        self.count = {}

    def add(self, host):
        """Returns how long the host stays out (None: for ever)."""
        self.count[host] = self.count.get(host, 0) + 1
        if self.cooldown is None:
            self.until[host] = None
            return None
        lo, hi = self.cooldown
        delay = min(float(hi), float(lo) * (2 ** (self.count[host] - 1)))
        self.until[host] = self.clock() + delay
        return delay

    def blocked(self, host):
        if host not in self.until:
            return False
        until = self.until[host]
        if until is not None and self.clock() >= until:
            del self.until[host]
            return False
        return True
