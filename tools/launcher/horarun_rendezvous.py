"""horarun's elastic rendezvous: where each worker learns its place in each generation.

A *generation* is one Hora job inside an elastic horarun job: a membership (worker ids in
rank order), a coordinator address and a job token of its own. The driver
(horarun_elastic.py) decides generations; this service hands them out. Protocol: one TCP
connection per request, one JSON line each way; every request carries the rendezvous token
(HORARUN_RENDEZVOUS_TOKEN, given to workers in their environment, never on a command line).

  {"op": "join", "worker": W, "after": G, "addr": A, "port": P}
      Blocks until a generation newer than G includes W and that generation's rank 0 has
      joined it (its A:P becomes the coordinator's address), or until `wait` seconds pass.
      Answers {"generation", "rank", "size", "local_rank", "local_size", "cross_rank",
      "cross_size", "coordinator", "job_token"}, or {"stop": why} when W has no place any
      more (its host was dropped, the job is ending), or {"retry": why} at the deadline.
      A worker of the current generation that joins tells the driver it left it (asked for
      a newer one): once every live member did, the driver forms the next generation with
      the same members (a reset after a failure on every rank).
  {"op": "generation"}
      Answers {"generation": newest decided}: cheap, for hvd.elastic's check at commit.

Rank order in a generation: the previous generation's survivors in their old rank order
grouped by host (hosts ordered by their lowest surviving rank), then new workers; so rank 0
is the lowest surviving rank, whose process creates the next coordinator. Local and cross
ranks follow the coordinator's rule (horarun_hosts.topology).
"""

import hmac
import json
import socket
import threading
import time

import horarun_hosts as hosts_mod

MAX_REQUEST = 1 << 16


class Generation:
    """One decided membership: number, worker ids in rank order, their hostnames."""

    def __init__(self, number, workers, hostnames, job_token):
        self.number = number
        self.workers = list(workers)
        self.hostnames = dict(hostnames)
        self.job_token = job_token
        self.coordinator = None  # "addr:port", once rank 0 joined
        self.topology = hosts_mod.topology([hostnames[w] for w in workers])

    def assignment(self, worker):
        rank = self.workers.index(worker)
        lr, ls, cr, cs = self.topology[rank]
        return {"generation": self.number, "rank": rank, "size": len(self.workers),
                "local_rank": lr, "local_size": ls, "cross_rank": cr, "cross_size": cs,
                "coordinator": self.coordinator, "job_token": self.job_token}


def order_members(previous, survivors, added):
    """Rank order of the next generation: `survivors` (worker ids of `previous`, a list in
    rank order, still alive) grouped by host in order of each host's lowest rank, then
    `added` in the order given. previous: [(worker, hostname)]."""
    alive = [(w, h) for w, h in previous if w in survivors]
    hosts = []
    for _, h in alive:
        if h not in hosts:
            hosts.append(h)
    ordered = [w for h in hosts for w, wh in alive if wh == h]
    return ordered + [w for w in added if w not in ordered]


class RendezvousServer:
    """The service above, on its own threads. Thread-safe; every wait is bounded."""

    def __init__(self, token, bind_addr="0.0.0.0", wait_s=600.0, loopback_addr=None):
        self.token = token
        self.wait_s = wait_s
        self._cv = threading.Condition()
        self._current = None        # newest Generation (guarded by _cv)
        self._stopped = {}          # worker -> why it has no place (guarded by _cv)
        self._ending = None         # why the job ends (guarded by _cv)
        self._left = set()          # members of _current that asked for a newer one
        self._seen = {}             # worker -> (addr, port) of its last join
        # The address of this host that other hosts reach: replaces a loopback address
        # reported by a rank 0 on this host when the generation spans several hosts.
        self.loopback_addr = loopback_addr
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((bind_addr, 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="horarun-rendezvous",
                                        daemon=True)
        self._thread.start()

    # -- the driver's side ---------------------------------------------------------------

    def publish(self, generation):
        """Makes `generation` the newest; wakes every waiting join."""
        with self._cv:
            self._current = generation
            self._left = set()
            self._cv.notify_all()

    def current(self):
        with self._cv:
            return self._current

    def drop(self, worker, why):
        """`worker` gets {"stop": why} from now on."""
        with self._cv:
            self._stopped[worker] = why
            self._cv.notify_all()

    def end(self, why):
        """Every join from now on answers {"stop": why}."""
        with self._cv:
            self._ending = why
            self._cv.notify_all()

    def all_left(self, alive):
        """True once every worker of `alive` that is a member of the newest generation asked
        for a newer one."""
        with self._cv:
            if self._current is None:
                return False
            members = [w for w in self._current.workers if w in alive]
            return bool(members) and all(w in self._left for w in members)

    def close(self):
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass
        with self._cv:
            self._cv.notify_all()

    # -- requests ------------------------------------------------------------------------

    def _serve(self):
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            conn.settimeout(30.0)
            data = b""
            while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            conn.settimeout(None)
            try:
                req = json.loads(data.decode("utf-8"))
            except ValueError:
                return
            if not hmac.compare_digest(str(req.get("token", "")), self.token):
                answer = {"error": "wrong rendezvous token"}
            elif req.get("op") == "generation":
                g = self.current()
                answer = {"generation": -1 if g is None else g.number}
            elif req.get("op") == "join":
                answer = self._join(req)
            else:
                answer = {"error": "unknown op %r" % req.get("op")}
            conn.settimeout(30.0)
            conn.sendall(json.dumps(answer).encode("utf-8") + b"\n")
        except OSError:
            pass
        finally:
            conn.close()

    def _set_coordinator(self, g, r0):
        addr, port = self._seen[r0][0], self._seen[r0][1]
        if addr.startswith("127.") and self.loopback_addr and len(set(g.hostnames.values())) > 1:
            addr = self.loopback_addr
        g.coordinator = "%s:%d" % (addr, port)

    def _join(self, req):
        worker = str(req.get("worker"))
        after = int(req.get("after", -1))
        wait = min(float(req.get("wait", self.wait_s)), self.wait_s)
        deadline = time.monotonic() + wait
        with self._cv:
            self._seen[worker] = (str(req.get("addr")), int(req.get("port", 0)))
            if self._current is not None and worker in self._current.workers and \
                    self._current.number <= after:
                self._left.add(worker)
                self._cv.notify_all()
            while True:
                if self._ending is not None:
                    return {"stop": self._ending}
                if worker in self._stopped:
                    return {"stop": self._stopped[worker]}
                g = self._current
                if g is not None and g.number > after and worker in g.workers:
                    if g.workers[0] == worker and g.coordinator is None:
                        self._set_coordinator(g, worker)
                        self._cv.notify_all()
                    if g.coordinator is not None:
                        return g.assignment(worker)
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return {"retry": "no generation for worker %s after %d within %gs"
                                     % (worker, after, wait)}
                self._cv.wait(min(left, 1.0))
