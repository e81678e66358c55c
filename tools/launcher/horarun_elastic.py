"""horarun's elastic mode: the driver (horovodrun's --min-np, --max-np,
--host-discovery-script, --slots-per-host, --reset-limit, --blacklist-cooldown-range,
--elastic-timeout).

The driver starts *workers* (one process each, on a slot of a host the HostSource offers),
runs the rendezvous service (horarun_rendezvous.py) and decides the generations; the workers'
hvd.elastic.run re-forms Hora with each one (bindings/python/hora/elastic_client.py). Rules:
  - A worker that exits non-zero blacklists its host (horarun_discovery.Blacklist); the other
    workers of that host are stopped (SIGTERM, SIGKILL after --grace); the survivors are not
    restarted: they get the next generation when they ask for it.
  - A host the discovery script no longer prints has its workers stopped the same way.
  - The first generation starts once --min-np slots are offered, on every usable slot up to
    --max-np (no limit without it), as horovodrun's driver does.
  - Free slots on offered hosts get new workers, up to --max-np; they join at the next
    generation, which the running workers notice at their next commit.
  - A new generation waits for the workers being stopped to exit; a worker that exits 0
    (even while being stopped) has finished the job: no generation follows, and workers
    that joined none are stopped. A generation with no member of the last one starts from
    its workers' initial state, with a warning (horovodrun's driver ends the job there).
  - Every live member of the newest generation asking for a newer one (a collective that
    failed on every rank with all of them alive) makes a new generation of the same members.
  - Each new generation after the first is a reset; more than --reset-limit of them end the
    job. Fewer than --min-np live workers for --elastic-timeout seconds end the job, naming
    the hosts. No worker left alive and none that finished: the first failure's code.
    Every worker finished with 0: 0.
Output lines carry the worker's number ([W]): its rank in the first generation for the
first workers, following numbers for those started later.
"""

import secrets
import signal
import socket
import time

import horarun_job
from horarun_discovery import Blacklist, DiscoveryError, HostSource
from horarun_job import StartError, say
from horarun_launchers import LocalLauncher, RankSpec
from horarun_rendezvous import Generation, RendezvousServer, order_members
from horarun_ssh import SshError, SshLauncher, probe_hosts
import horarun_hosts as hosts_mod

DISCOVERY_INTERVAL_S = 1.0
RENDEZVOUS_VAR = "HORARUN_RENDEZVOUS"
RENDEZVOUS_TOKEN_VAR = "HORARUN_RENDEZVOUS_TOKEN"
WORKER_VAR = "HORARUN_WORKER"
ELASTIC_TIMEOUT_VAR = "HORA_ELASTIC_TIMEOUT"


class Settings:
    """The elastic command line, checked (horarun_horovod.elastic_settings builds it)."""

    def __init__(self, np, min_np, max_np, slots, reset_limit, cooldown, timeout, script):
        self.np, self.min_np, self.max_np = np, min_np, max_np
        self.slots, self.reset_limit, self.cooldown = slots, reset_limit, cooldown
        self.timeout, self.script = timeout, script


class Worker:
    def __init__(self, number, host, part):
        self.number = number
        self.host = host
        self.part = part
        self.stopping = None  # deadline for SIGKILL once the driver asked it to stop
        self.result = None    # "done", "failed", "stopped"

    @property
    def id(self):
        return str(self.number)


class Driver:
    def __init__(self, args, settings, base_env, remote_env, common, ssh, cwd, output):
        self.args, self.s, self.common = args, settings, common
        self.base_env, self.remote_env = base_env, remote_env
        self.ssh, self.cwd, self.output = ssh, cwd, output
        self.source = HostSource(None if settings.script else args.host_list, settings.script,
                                 settings.slots)
        self.blacklist = Blacklist(settings.cooldown)
        self.local_names = hosts_mod.local_names()
        self.hostinfo = {}        # host -> {"local", "hostname", "rdv_addr"} once probed
        self.unreachable = set()
        self.workers = []
        self.generation = None
        self.resets = 0
        self.first_failure = None
        self.signals = []
        self.short_since = None   # when live workers fell below --min-np
        self.offered = []
        self.rdv = RendezvousServer(secrets.token_hex(16), wait_s=settings.timeout)

    # -- hosts ----------------------------------------------------------------------------

    def _probe(self, host):
        """Fills hostinfo[host]; False (and the host is left out) when it cannot be used."""
        if host in self.hostinfo:
            return True
        if host in self.unreachable:
            return False
        if hosts_mod.is_local(host, self.local_names):
            self.hostinfo[host] = {"local": True, "hostname": socket.gethostname(),
                                   "rdv_addr": "127.0.0.1"}
            return True
        try:
            info = probe_hosts([host], self.ssh, self.cwd, [], None,
                               self.args.start_timeout or 30.0)[host]
        except SshError as e:
            say("elastic: leaving host %s out: %s" % (host, e))
            self.unreachable.add(host)
            return False
        self.hostinfo[host] = {"local": False, "hostname": info["hostname"],
                               "rdv_addr": info.get("client_addr") or "127.0.0.1"}
        if self.rdv.loopback_addr is None and info.get("client_addr"):
            self.rdv.loopback_addr = info["client_addr"]
        return True

    def _usable(self):
        return [(h, n) for h, n in self.offered
                if not self.blacklist.blocked(h) and self._probe(h)]

    # -- workers --------------------------------------------------------------------------

    def live(self):
        return [w for w in self.workers if w.result is None and w.stopping is None]

    def _start_worker(self, host, expected):
        number = len(self.workers)
        info = self.hostinfo[host]
        env = dict(self.base_env if info["local"] else self.remote_env)
        env.update(self.common)
        # Horovod's rank variables for the generation this worker is expected to join, as
        # horovodrun's driver sets them when it starts a worker; hvd.init sets them again
        # from the generation it does join (a host change in between may move it).
        place = expected.assignment(str(number))
        env.update({"HOROVOD_" + k.upper(): str(place[k]) for k in (
            "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")})
        env.update({RENDEZVOUS_VAR: "%s:%d" % (info["rdv_addr"], self.rdv.port),
                    RENDEZVOUS_TOKEN_VAR: self.rdv.token, WORKER_VAR: str(number),
                    ELASTIC_TIMEOUT_VAR: "%g" % self.s.timeout,
                    # Horovod's scripts see the host as the host list or the discovery
                    # script names it; Hora's topology uses the machine's name.
                    "HORA_HOSTNAME": info["hostname"], "HOROVOD_HOSTNAME": host})
        spec = RankSpec(number, host, info["local"], info["hostname"], env)
        if info["local"]:
            launcher = LocalLauncher(self.args.command, [spec])
        else:
            launcher = SshLauncher(host, self.ssh, self.args.command, [spec], self.cwd,
                                   self.args.grace)
        part = launcher.start(self.output)[0]
        self.workers.append(Worker(number, host, part))
        if self.args.verbose:
            say("elastic: worker %d started on %s (%s)" % (number, host, part.label()))

    def _grow(self, limit):
        """Starts workers on free slots, at most `limit` in all; returns how many."""
        hosts = []
        for host, slots in self._usable():
            used = sum(1 for w in self.live() if w.host == host)
            while used < slots and len(hosts) < limit:
                hosts.append(host)
                used += 1
        expected = self._expected(hosts)
        for host in hosts:
            self._start_worker(host, expected)
        return len(hosts)

    def _members(self, new_hosts=()):
        """(worker ids, id -> hostname) of the live workers, then of workers about to be
        started on `new_hosts` (the ids they will get)."""
        placed = [(w.id, w.host) for w in self.live()]
        placed += [(str(len(self.workers) + i), h) for i, h in enumerate(new_hosts)]
        return [i for i, _ in placed], {i: self.hostinfo[h]["hostname"] for i, h in placed}

    def _expected(self, hosts):
        """The generation that workers started now on `hosts` are expected to join: the live
        workers and these, ordered as _publish will order them if nothing else changes."""
        ids, hostnames = self._members(hosts)
        return Generation(-1, self._order(ids), hostnames, "")

    def _order(self, ids):
        """Rank order of a next generation of the workers `ids` (order_members)."""
        previous = [] if self.generation is None else [
            (w, self.generation.hostnames[w]) for w in self.generation.workers]
        return order_members(previous, set(ids), ids)

    def _stop(self, worker, sig=signal.SIGTERM):
        if worker.stopping is None:
            worker.stopping = time.monotonic() + self.args.grace
            self.rdv.drop(worker.id, "the driver stopped this worker")
        worker.part.send(sig)

    # -- generations ----------------------------------------------------------------------

    def _publish(self):
        ids, hostnames = self._members()
        order = self._order(ids)
        if self.generation is None:
            number = 0
        else:
            number = self.generation.number + 1
            if not set(self.generation.workers) & set(ids):
                # horovodrun's driver ends the job here ("No hosts from previous set
                # remaining"); these workers can still train, from their first state.
                say("elastic: warning: no worker of generation %d is left; generation %d "
                    "starts from its workers' initial state (nothing to sync from)" % (
                        self.generation.number, number))
        self.generation = Generation(number, order, hostnames, secrets.token_hex(16))
        self.rdv.publish(self.generation)
        say("elastic: generation %d: %d rank(s) on %s" % (
            number, len(order), ", ".join(sorted({w.host for w in self.live()}))))

    # -- the loop -------------------------------------------------------------------------

    def _on_signal(self, signum, frame):
        self.signals.append(signum)

    def _finish(self, code, why=None):
        if why:
            say(why)
            self.rdv.end(why)
        for w in self.workers:
            if w.result is None:
                self._stop(w)
        deadline = time.monotonic() + self.args.grace
        while time.monotonic() < deadline and any(not w.part.poll() for w in self.workers):
            time.sleep(horarun_job.POLL_S)
        for w in self.workers:
            w.part.send(signal.SIGKILL)
        deadline = time.monotonic() + horarun_job.KILL_WAIT_S
        while time.monotonic() < deadline and any(w.part.busy() for w in self.workers):
            time.sleep(horarun_job.POLL_S)
        for w in self.workers:
            w.part.reap()
        drain = time.monotonic() + horarun_job.DRAIN_S
        for w in self.workers:
            for t in w.part.threads:
                t.join(max(0.0, drain - time.monotonic()))
        return code

    def _check_exits(self):
        """Looks at every worker that exited; True when the membership changed."""
        changed = False
        for w in self.workers:
            if w.result is not None or not w.part.poll():
                continue
            if w.part.code == 0:  # finished its training, even if it was being stopped
                w.result = "done"
                continue
            if w.stopping is not None:
                w.result = "stopped"
                continue
            w.result = "failed"
            changed = True
            if self.first_failure is None:
                self.first_failure = w.part.code
            out = self.blacklist.add(w.host)
            say("elastic: worker %d on %s %s; host %s blacklisted %s" % (
                w.number, w.host, w.part.how, w.host,
                "for good" if out is None else "for %gs" % out))
            for other in self.live():
                if other.host == w.host:
                    self._stop(other)
        return changed

    def _none_left(self):
        """Why the job ends with no worker left and none finished."""
        stopped = sum(1 for w in self.workers if w.result == "stopped")
        code = self.first_failure or 1
        if not stopped:
            return "elastic: every worker failed; the first failure's code is %d" % code
        return ("elastic: no worker is left: %d failed, %d stopped by the driver (their host "
                "was blacklisted or is no longer offered); the first failure's code is %d" % (
                    len(self.workers) - stopped, stopped, code))

    def _drop_vanished(self):
        hosts = {h for h, _ in self.offered}
        changed = False
        for w in self.live():
            if w.host not in hosts:
                say("elastic: host %s is no longer offered; stopping worker %d" %
                    (w.host, w.number))
                self._stop(w)
                changed = True
        return changed

    def run(self):
        old = {s: signal.signal(s, self._on_signal)
               for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            return self._run()
        except StartError as e:
            return self._finish(e.code, "error: %s" % e)
        finally:
            for w in self.workers:
                w.part.force_kill()
            self.rdv.close()
            self.output.close()
            for s, h in old.items():
                signal.signal(s, h)

    def _run(self):
        try:
            self.offered = self.source.poll()
        except DiscoveryError as e:
            say("error: %s" % e)
            return 1
        start = time.monotonic()
        while sum(n for _, n in self._usable()) < self.s.min_np:
            if self.signals:
                return 128 + self.signals[0]
            if time.monotonic() - start > self.s.timeout:
                say("error: fewer than --min-np %d slots on %s after %gs" % (
                    self.s.min_np, ", ".join(h for h, _ in self.offered) or "no host",
                    self.s.timeout))
                return 1
            time.sleep(DISCOVERY_INTERVAL_S)
            self.offered = self.source.poll()
        # As horovodrun's driver: the first generation takes every usable slot, up to --max-np.
        self._grow(self.s.max_np or 1 << 30)
        self._publish()
        next_poll = time.monotonic() + DISCOVERY_INTERVAL_S
        pending = False
        while True:
            if self.signals:
                sig = self.signals[0]
                say("got %s; stopping every worker" % signal.Signals(sig).name)
                return self._finish(128 + sig)
            pending |= self._check_exits()
            now = time.monotonic()
            for w in self.workers:
                if w.stopping is not None and w.result is None and now > w.stopping:
                    w.part.send(signal.SIGKILL)
            live = self.live()
            if not live and all(w.result is not None for w in self.workers):
                if any(w.result == "done" for w in self.workers):
                    return self._finish(0)
                return self._finish(self.first_failure or 1, self._none_left())
            finishing = any(w.result == "done" for w in self.workers)
            if finishing:
                # No generation comes after a finished worker: those still waiting for one
                # would wait for nothing.
                for w in live:
                    if w.stopping is None and w.id not in self.generation.workers:
                        say("elastic: the job is finishing; stopping worker %d, which joined "
                            "no generation" % w.number)
                        self._stop(w)
            if now >= next_poll and not finishing:
                next_poll = now + DISCOVERY_INTERVAL_S
                self.offered = self.source.poll()
                pending |= self._drop_vanished()
                room = (self.s.max_np or 1 << 30) - len(self.live())
                pending |= self._grow(room) > 0
            if not pending and self.rdv.all_left({w.id for w in self.live()}):
                pending = True
            # The next generation waits for the workers being stopped to exit (--grace at
            # most): one that exits 0 instead has finished the job, and the job ends.
            stopping = any(w.stopping is not None and w.result is None for w in self.workers)
            if pending and not finishing and not stopping:
                code = self._decide()
                if code is not None:
                    return code
                pending = self.short_since is not None
            time.sleep(horarun_job.POLL_S)

    def _decide(self):
        """Publishes the next generation if it may; an exit code when the job must end."""
        live = self.live()
        if len(live) < self.s.min_np:
            now = time.monotonic()
            if self.short_since is None:
                self.short_since = now
                say("elastic: %d worker(s) left, fewer than --min-np %d; waiting up to %gs "
                    "for hosts" % (len(live), self.s.min_np, self.s.timeout))
            if now - self.short_since > self.s.timeout:
                hosts = sorted({w.host for w in live})
                return self._finish(self.first_failure or 1, (
                    "elastic: only %d worker(s) (on %s) for %gs, fewer than --min-np %d; "
                    "stopping the job" % (len(live), ", ".join(hosts) or "no host",
                                          self.s.timeout, self.s.min_np)))
            return None
        self.short_since = None
        if self.s.reset_limit is not None and self.resets >= self.s.reset_limit:
            return self._finish(self.first_failure or 1, (
                "elastic: the job would reset a %s time, past --reset-limit %d; stopping "
                "the job" % (_ordinal(self.resets + 1), self.s.reset_limit)))
        self.resets += 1
        self._publish()
        return None


def _ordinal(n):
    return "%d%s" % (n, {1: "st", 2: "nd", 3: "rd"}.get(n if n < 20 else n % 10, "th"))


def env_bases(environ, common, not_forwarded):
    """(this host's base environment, other hosts'), as make_plan builds them."""
    local = dict(environ)
    local.update(common)
    remote = {k: v for k, v in environ.items() if not not_forwarded.match(k)}
    remote.update(common)
    for env in (local, remote):
        for k in list(env):
            if k.startswith(("HORA_RANK", "HORA_SIZE", "HORA_LOCAL_", "HORA_CROSS_",
                             "HORA_COORDINATOR_ADDR", "HORA_JOB_TOKEN")):
                del env[k]
    return local, remote
