"""horarun's elastic mode, its parts one by one (tools/launcher/horarun_rendezvous.py,
horarun_discovery.py): the rank order of a new generation, the discovery script's output,
the blacklist's cooldown on an injected clock, and the rendezvous service over real sockets
(places handed out, rank 0's address, a reset when every member asks again, a stop, the
deadline of a join)."""

import json
import os
import socket
import sys
import threading

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "launcher"))

import horarun_discovery as disc  # noqa: E402
import horarun_rendezvous as rdv  # noqa: E402


def test_survivors_keep_their_order_by_host_and_new_workers_follow():
    prev = [("0", "a"), ("1", "a"), ("2", "b"), ("3", "b"), ("4", "a")]
    # Rank 0 gone: the lowest survivor (1, on a) leads; a's workers stay together.
    assert rdv.order_members(prev, {"1", "2", "3", "4"}, ["7"]) == ["1", "4", "2", "3", "7"]
    # Host a gone: b's workers first.
    assert rdv.order_members(prev, {"2", "3"}, ["2", "3", "5"]) == ["2", "3", "5"]


def test_generation_assignment_follows_the_topology_rule():
    g = rdv.Generation(3, ["5", "2", "9"], {"5": "b", "2": "b", "9": "c"}, "tok")
    g.coordinator = "10.0.0.2:4000"
    assert g.assignment("2") == {"generation": 3, "rank": 1, "size": 3, "local_rank": 1,
                                 "local_size": 2, "cross_rank": 0, "cross_size": 2,
                                 "coordinator": "10.0.0.2:4000", "job_token": "tok"}


def test_discovery_output_is_read_as_horovod_prints_it():
    text = "a:4\n\n# spare\nb\nc:1  # one\na:2\n"
    assert disc.parse_discovery(text, 2, "s") == [("a", 6), ("b", 2), ("c", 1)]
    for bad, message in (("a:0\n", "at least 1 slot"), ("a:x\n", "not an integer"),
                         ("a b\n", "is not `host`")):
        with pytest.raises(disc.DiscoveryError, match=message):
            disc.parse_discovery(bad, 1, "s")


def test_discovery_script_failures(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(disc.DiscoveryError, match=r"exited with code 3 \(stderr: broken\)"):
        disc.HostSource(script=str(bad)).poll()
    flaky = tmp_path / "flaky.sh"
    flaky.write_text("#!/bin/sh\necho h1:2\n")
    flaky.chmod(0o755)
    source = disc.HostSource(script=str(flaky))
    assert source.poll() == [("h1", 2)]
    flaky.write_text("#!/bin/sh\nexit 1\n")
    assert source.poll() == [("h1", 2)]  # a later failure keeps the last good answer


def test_blacklist_cooldown_doubles_up_to_the_limit():
    now = [100.0]
    b = disc.Blacklist((10, 25), clock=lambda: now[0])
    assert b.add("h") == 10 and b.blocked("h")
    now[0] += 10
    assert not b.blocked("h")
    assert b.add("h") == 20
    assert b.add("h") == 25
    forever = disc.Blacklist(None, clock=lambda: now[0])
    assert forever.add("h") is None
    now[0] += 1e9
    assert forever.blocked("h")


def request(server, req, token=None):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(json.dumps(dict(req, token=token or server.token)).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def join_async(server, worker, after, port, results, wait=30):
    def run():
        results[worker] = request(server, {"op": "join", "worker": worker, "after": after,
                                           "addr": "127.0.0.1", "port": port, "wait": wait})
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.fixture
def server():
    s = rdv.RendezvousServer("secret", bind_addr="127.0.0.1", wait_s=30)
    yield s
    s.close()


def test_places_wait_for_rank_0_whose_address_is_the_coordinator(server):
    assert request(server, {"op": "generation"}) == {"generation": -1}
    assert "wrong rendezvous token" in request(server, {"op": "generation"}, "x")["error"]
    server.publish(rdv.Generation(0, ["0", "1"], {"0": "a", "1": "a"}, "t0"))
    results = {}
    t1 = join_async(server, "1", -1, 5555, results)
    t1.join(0.5)
    assert t1.is_alive()  # rank 0 has not joined yet: no coordinator to name
    t0 = join_async(server, "0", -1, 4444, results)
    t0.join(30)
    t1.join(30)
    assert results["0"]["rank"] == 0 and results["1"]["rank"] == 1
    assert results["0"]["coordinator"] == results["1"]["coordinator"] == "127.0.0.1:4444"
    assert request(server, {"op": "generation"}) == {"generation": 0}


def test_every_member_asking_again_is_seen_and_a_stop_answers(server):
    server.publish(rdv.Generation(0, ["0", "1"], {"0": "a", "1": "b"}, "t0"))
    results = {}
    threads = [join_async(server, w, 0, 4000 + int(w), results) for w in ("0", "1")]
    for _ in range(300):
        if server.all_left({"0", "1"}):
            break
        threading.Event().wait(0.01)
    assert server.all_left({"0", "1"})
    server.publish(rdv.Generation(1, ["0", "1"], {"0": "a", "1": "b"}, "t1"))
    for t in threads:
        t.join(30)
    assert results["0"]["generation"] == results["1"]["generation"] == 1
    assert results["1"]["job_token"] == "t1"
    server.drop("1", "its host was dropped")
    assert request(server, {"op": "join", "worker": "1", "after": 1, "addr": "127.0.0.1",
                            "port": 1}) == {"stop": "its host was dropped"}
    server.end("the job ends")
    assert request(server, {"op": "join", "worker": "0", "after": 1, "addr": "127.0.0.1",
                            "port": 1}) == {"stop": "the job ends"}


def test_a_join_waits_no_longer_than_asked(server):
    answer = request(server, {"op": "join", "worker": "9", "after": -1, "addr": "127.0.0.1",
                              "port": 1, "wait": 0.3})
    assert "retry" in answer and "within 0.3s" in answer["retry"], answer


def test_a_worker_refuses_a_bad_elastic_timeout(monkeypatch):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "bindings", "python"))
    from hora import elastic_client, errors
    for bad in ("abc", "0", "-3", "nan"):
        monkeypatch.setenv("HORA_ELASTIC_TIMEOUT", bad)
        with pytest.raises(errors.HoraInvalidArgumentError, match="HORA_ELASTIC_TIMEOUT=%r: must "
                           "be a number of seconds > 0" % bad):
            elastic_client._timeout()
    monkeypatch.setenv("HORA_ELASTIC_TIMEOUT", "2.5")
    assert elastic_client._timeout() == 2.5
