"""A worker's side of horarun's elastic rendezvous (tools/launcher/horarun_rendezvous.py has
the protocol): which generation this process belongs to, and its place in the next one.

Active only in a process horarun's elastic driver started (HORARUN_RENDEZVOUS set); then
hora.init() without explicit arguments takes its rank, size, coordinator address and job
token from here, and hvd.elastic.run moves from one generation to the next through it.
Every request has a deadline: a join waits at most HORA_ELASTIC_TIMEOUT seconds (what the
driver also waits for --min-np workers), each connection 30 s.
"""

import json
import os
import random
import socket
import time

from . import errors

RENDEZVOUS_VAR = "HORARUN_RENDEZVOUS"
TOKEN_VAR = "HORARUN_RENDEZVOUS_TOKEN"
WORKER_VAR = "HORARUN_WORKER"
TIMEOUT_VAR = "HORA_ELASTIC_TIMEOUT"
CONNECT_TIMEOUT_S = 30.0
LOWEST_PORT = 20000

_generation = -1  # the generation this process last joined


class RendezvousStop(errors.HorovodInternalError):
    """The driver has no place for this worker any more (the job ends, its host was
    dropped); the message says why."""


def active():
    return bool(os.environ.get(RENDEZVOUS_VAR))


def generation():
    return _generation


def _timeout():
    text = os.environ.get(TIMEOUT_VAR, "600")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise errors.HoraInvalidArgumentError(
            errors.ERR_INVALID_ARGUMENT, "%s=%r: must be a number of seconds > 0" % (
                TIMEOUT_VAR, text), "hora.init")
    return value


def _request(req, wait):
    host, _, port = os.environ[RENDEZVOUS_VAR].rpartition(":")
    req = dict(req, token=os.environ.get(TOKEN_VAR, ""))
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S) as s:
            s.settimeout(wait + CONNECT_TIMEOUT_S)
            s.sendall(json.dumps(req).encode("utf-8") + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            local = s.getsockname()[0]
    except (OSError, ValueError) as e:
        raise errors.HorovodInternalError(
            "elastic rendezvous %s: %s" % (os.environ[RENDEZVOUS_VAR], e))
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        raise errors.HorovodInternalError("elastic rendezvous %s: bad answer %r"
                                          % (os.environ[RENDEZVOUS_VAR], data[:200]))
    if "error" in answer:
        raise errors.HorovodInternalError("elastic rendezvous: " + answer["error"])
    return answer, local


def _free_port(addr):
    """A port of addr that was free a moment ago (below the ephemeral range, as horarun's
    own choice: a port bound to 0 can be taken by an outgoing connection meanwhile)."""
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(LOWEST_PORT, 32000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, port))
                return port
            except OSError:
                continue
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def newest_generation():
    """The newest generation the driver decided (one short request)."""
    answer, _ = _request({"op": "generation"}, CONNECT_TIMEOUT_S)
    return int(answer["generation"])


def join():
    """Blocks until this worker has its place in a generation newer than the last one it
    joined; returns the assignment (dict: generation, rank, size, local_rank, local_size,
    cross_rank, cross_size, coordinator, job_token) and sets the HORA_*/HOROVOD_* rank
    variables to it. Raises RendezvousStop when the driver has no place for it,
    HorovodInternalError when none came within HORA_ELASTIC_TIMEOUT."""
    global _generation
    deadline = time.monotonic() + _timeout()
    # The address this host reaches the driver from: where a coordinator here listens.
    _, addr = _request({"op": "generation"}, CONNECT_TIMEOUT_S)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.HorovodInternalError(
                "elastic rendezvous: no new generation for worker %s within %s=%gs"
                % (os.environ.get(WORKER_VAR), TIMEOUT_VAR, _timeout()))
        answer, _ = _request({"op": "join", "worker": os.environ.get(WORKER_VAR),
                              "after": _generation, "addr": addr, "port": _free_port(addr),
                              "wait": left}, left)
        if "stop" in answer:
            raise RendezvousStop("elastic: " + answer["stop"])
        if "retry" not in answer:
            break
    _generation = int(answer["generation"])
    for name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
        value = str(answer[name])
        os.environ["HORA_" + name.upper()] = value
        os.environ["HOROVOD_" + name.upper()] = value
    return answer
