"""horarun: host lists (-H, --hostfile), which hosts are this one, where each rank runs, and
the local/cross ranks that follow.

Ranks fill the hosts in the order given, each host up to its slots (horovodrun's and
mpirun's `--map-by slot`). Local and cross ranks follow the coordinator's own rule
(coordinator/service_join.cc): ranks with the same hostname share a host; local rank =
index among them in rank order; cross rank = index of the host, hosts ordered by their
lowest rank; cross size = number of hosts.
"""

import socket


class HostError(Exception):
    """A bad host list or host file; the message names the entry."""


LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def _slots(text, where, name):
    try:
        count = int(text, 10)
    except ValueError:
        raise HostError("%s: slots %r of host %s is not an integer" % (where, text, name))
    if count < 1:
        raise HostError("%s: host %s must have at least 1 slot" % (where, name))
    return count


def merge(hosts):
    """[(name, slots)] with repeated names added up, in order of first appearance."""
    order, total = [], {}
    for name, slots in hosts:
        if name not in total:
            order.append(name)
            total[name] = 0
        total[name] += slots
    return [(name, total[name]) for name in order]


def parse_hosts(text):
    """-H 'a:2,b' -> [('a', 2), ('b', 1)]."""
    hosts = []
    where = "-H %r" % text
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise HostError("%s: empty host entry" % where)
        name, sep, slots = entry.rpartition(":")
        if not sep:
            name, slots = entry, "1"
        if not name:
            raise HostError("%s: missing host name in %r" % (where, entry))
        hosts.append((name, _slots(slots, where, name)))
    return merge(hosts)


def parse_hostfile(path):
    """Open MPI host file lines (`host`, `host slots=N [max_slots=M]`) or `host:N`;
    `#` starts a comment. Repeated hosts add up."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HostError("--hostfile %s: %s" % (path, e.strerror or e))
    hosts = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = "--hostfile %s line %d" % (path, number)
        words = line.split()
        name, slots = words[0], "1"
        if ":" in name:
            name, _, slots = name.rpartition(":")
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if key in ("slots", "slot", "cpu", "count") and sep:
                slots = value
            elif key in ("max_slots", "max-slots") and sep:
                _slots(value, where, name)
            else:
                raise HostError("%s: unknown field %r (expected slots=N)" % (where, word))
        if not name:
            raise HostError("%s: missing host name" % where)
        hosts.append((name, _slots(slots, where, name)))
    if not hosts:
        raise HostError("--hostfile %s: no hosts in it" % path)
    return merge(hosts)


def local_names():
    names = set(LOCAL_NAMES)
    for getter in (socket.gethostname, socket.getfqdn):
        try:
            name = getter()
        except OSError:
            continue
        if name:
            names.add(name)
            names.add(name.split(".")[0])
    return names


def is_local(name, names=None):
    """True when `name` is this host: a name of it, or an address that is one of its own
    (binding to it works)."""
    if name in (names if names is not None else local_names()):
        return True
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    addrs = {info[4][0] for info in infos}
    if not addrs:
        return False
    for addr in addrs:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((addr, 0))
        except OSError:
            return False
        finally:
            sock.close()
    return True


def assign(np, hosts):
    """Host index of every rank: fill the hosts in order, each up to its slots.
    REQUIRES: the slots add up to at least np."""
    placement = []
    for index, (_, slots) in enumerate(hosts):
        take = min(slots, np - len(placement))
        placement += [index] * take
    return placement


def topology(hostnames):
    """hostnames[rank] -> [(local_rank, local_size, cross_rank, cross_size)] per rank,
    by the coordinator's rule (see the module comment)."""
    host_index, count = {}, {}
    for name in hostnames:
        host_index.setdefault(name, len(host_index))
        count[name] = count.get(name, 0) + 1
    seen = {}
    result = []
    for name in hostnames:
        local = seen.get(name, 0)
        seen[name] = local + 1
        result.append((local, count[name], host_index[name], len(host_index)))
    return result
