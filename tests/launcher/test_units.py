"""Pure parts of tools/launcher: host lists and host files, rank placement, the topology
rule, mpirun's tagged output, the NIC lookup."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "launcher"))

import horarun_agent as agent  # noqa: E402
import horarun_hosts as hosts  # noqa: E402
import horarun_mpi as mpi  # noqa: E402


def test_parse_hosts_merges_repeats_in_order():
    assert hosts.parse_hosts("a:2,b,a:1") == [("a", 3), ("b", 1)]


@pytest.mark.parametrize("text,message", [("a:0", "at least 1 slot"), ("a:x", "not an integer"),
                                          ("a,,b", "empty host entry"), (":2", "missing host")])
def test_parse_hosts_errors(text, message):
    with pytest.raises(hosts.HostError, match=message):
        hosts.parse_hosts(text)


def test_hostfile_open_mpi_and_colon_forms(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# cluster\n\nnode1 slots=4 max_slots=8\nnode2:2  # two\nnode3\nnode1 slots=1\n")
    assert hosts.parse_hostfile(str(f)) == [("node1", 5), ("node2", 2), ("node3", 1)]


@pytest.mark.parametrize("text,message", [("a slots=0\n", "at least 1 slot"),
                                          ("a colour=red\n", "unknown field"),
                                          ("# nothing\n", "no hosts")])
def test_hostfile_errors(tmp_path, text, message):
    f = tmp_path / "hosts"
    f.write_text(text)
    with pytest.raises(hosts.HostError, match=message):
        hosts.parse_hostfile(str(f))


def test_assign_fills_hosts_in_order():
    assert hosts.assign(5, [("a", 2), ("b", 2), ("c", 2)]) == [0, 0, 1, 1, 2]
    assert hosts.assign(1, [("a", 2), ("b", 2)]) == [0]


def test_topology_follows_the_coordinators_rule():
    # hosts ordered by their lowest rank; local rank in rank order
    assert hosts.topology(["a", "b", "a", "c"]) == [
        (0, 2, 0, 3), (0, 1, 1, 3), (1, 2, 0, 3), (0, 1, 2, 3)]


def test_local_host_detection():
    assert hosts.is_local("localhost") and hosts.is_local("127.0.0.1")
    assert not hosts.is_local("192.0.2.1")           # TEST-NET: never this host
    assert not hosts.is_local("no-such-host.invalid")


def test_split_tagged_output():
    line = b"[1,0]<stdout>:partial[1,12]<stdout>:hi\n"
    assert mpi.split_tagged(line) == [(0, "stdout", b"partial"), (12, "stdout", b"hi\n")]
    assert mpi.split_tagged(b"mpirun noticed something\n") == [
        (None, None, b"mpirun noticed something\n")]


def test_tagged_pieces_join_into_each_ranks_lines():
    j = mpi.TaggedLines()
    # A line written in two pieces, one word per piece (print under PYTHONUNBUFFERED), and
    # another rank's whole line between them: each rank's line comes out whole.
    assert j.feed(b"[1,0]<stdout>:part1 [1,1]<stdout>:other\n") == [(1, "stdout", b"other\n")]
    assert j.feed(b"[1,0]<stdout>:part2\n") == [(0, "stdout", b"part1 part2\n")]
    assert j.feed(b"[1,3]<stdout>:a[1,3]<stdout>: [1,3]<stdout>:b[1,3]<stdout>:\n") == [
        (3, "stdout", b"a b\n")]
    # stdout and stderr of one rank are apart; two lines in one piece are two lines.
    assert j.feed(b"[1,2]<stderr>:err [1,2]<stdout>:x\ny\n") == [
        (2, "stdout", b"x\n"), (2, "stdout", b"y\n")]
    assert j.feed(b"mpirun says\n") == [(None, None, b"mpirun says\n")]
    assert j.flush() == [(2, "stderr", b"err \n")]
    assert j.flush() == []


def test_nic_address():
    assert agent.nic_address("lo") == "127.0.0.1"
    assert agent.nic_address("nosuch0") is None
    assert agent.first_nic_address(["nosuch0", "lo"]) == ("lo", "127.0.0.1")


def test_reported_failure_reads_open_mpis_messages():
    assert mpi.reported_failure(b"  Exit code:    7\n") == 7
    assert mpi.reported_failure(
        b"mpirun noticed that process rank 1 with PID 4242 on node a exited on signal 9 "
        b"(Killed).\n") == 137
    assert mpi.reported_failure(b"  Process name: [[25692,1],1]\n") is None


class Lines:
    def __init__(self):
        self.plain = []

    def plain_line(self, stream, text):
        self.plain.append(text)

    def rank_line(self, rank, stream, text):
        pass


@pytest.mark.parametrize("script,code", [
    # what Open MPI 4.1.4 did once under load: reports rank 1's code 7, exits with 0
    ("echo '  Exit code:    7' >&2; exit 0", 7),
    ("echo '[1,0]<stdout>:  Exit code:    7'; exit 0", 0),  # a rank's own line: not mpirun's
    ("exit 0", 0),
    ("echo '  Exit code:    7' >&2; exit 3", 3)])
def test_mpirun_exit_code_falls_back_to_its_reported_failure(script, code):
    import subprocess
    import time
    proc = subprocess.Popen(["/bin/sh", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    job = mpi.MpiJob(proc, Lines())
    deadline = time.monotonic() + 30
    while not job.poll():
        assert time.monotonic() < deadline, "the shell did not exit"
        time.sleep(0.01)
    job.reap()
    assert job.code == code, job.how


def test_cpu_slice_shares_the_allowed_cpus():
    assert agent.cpu_slice({0, 1}, 0, 2) == [0] and agent.cpu_slice({0, 1}, 1, 2) == [1]
    assert agent.cpu_slice({8, 2, 4, 6, 3}, 1, 2) == [4, 6]   # sorted, remainder unused
    assert agent.cpu_slice({0, 1}, 0, 3) is None               # oversubscribed: no binding
    assert agent.cpu_slice({0, 1}, 2, 2) is None


def _bindable(port):
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_free_ports_are_distinct_free_and_below_the_ephemeral_range():
    first, _ = agent.ephemeral_range()
    for _ in range(20):
        ports = agent.free_ports("127.0.0.1", 2)
        assert len(set(ports)) == 2, ports
        for p in ports:
            assert agent.LOWEST_PORT <= p < first, (p, first)
            _bindable(p)


def test_free_ports_fall_back_to_the_kernel_when_the_range_leaves_no_room(monkeypatch):
    monkeypatch.setattr(agent, "ephemeral_range", lambda: (agent.LOWEST_PORT + 10, 60999))
    ports = agent.free_ports("127.0.0.1", 2)
    assert len(set(ports)) == 2 and all(p > 0 for p in ports), ports


def test_ephemeral_range_reads_the_kernel_file_or_defaults(tmp_path):
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert agent.ephemeral_range(str(f)) == (40000, 50000)
    f.write_text("garbage")
    assert agent.ephemeral_range(str(f)) == (32768, 60999)
    assert agent.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
