#!/usr/bin/env python3
"""What TCP carries between two hosts: the ceiling a cross-host data plane is measured
against (docs/benchmarks-cross-host.md). One receiver, one sender, N parallel streams.

    tcp_limit.py serve --port P [--bind ADDR] [--streams N] [--buf-kib K]
    tcp_limit.py send --to ADDR --port P [--streams N] [--mib M] [--buf-kib K] [--rounds R]

The sender connects N streams and pushes M MiB in all, split evenly, R times; the receiver
reads every stream to its end and answers with the byte count, so each round's time ends when
the last byte is read. --buf-kib sets SO_SNDBUF/SO_RCVBUF (0: the kernel's autotuning). The
last line, for scripts:

    TCP_LIMIT streams=N mib=M rounds=R best_gbs=X median_gbs=Y

GB/s = 1e9 bytes per second of payload. On a real cluster run `serve` on one node and `send`
on another with the addresses of the NIC the job uses (and compare with iperf3 -P N)."""

import argparse
import socket
import statistics
import struct
import threading
import time

CHUNK = 4 << 20


def _tune(sock, buf_kib):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if buf_kib > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf_kib << 10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf_kib << 10)


def _drain(conn, counts, i):
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    n = 0
    while True:
        got = conn.recv_into(view)
        if not got:
            break
        n += got
    counts[i] = n


def serve(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _tune(ls, args.buf_kib)
    ls.bind((args.bind, args.port))
    ls.listen(64)
    print("tcp_limit: serving on %s:%d" % (args.bind, args.port), flush=True)
    while True:
        ctrl, _ = ls.accept()  # one control connection per round: "N streams follow"
        head = ctrl.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            ctrl.close()
            continue
        (n,) = struct.unpack("!I", head)
        if n == 0:  # the sender is done
            ctrl.close()
            return
        conns = [ls.accept()[0] for _ in range(n)]
        counts = [0] * n
        threads = [threading.Thread(target=_drain, args=(c, counts, i))
                   for i, c in enumerate(conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in conns:
            c.close()
        ctrl.sendall(struct.pack("!Q", sum(counts)))
        ctrl.close()


def _push(sock, nbytes, payload):
    view = memoryview(payload)
    left = nbytes
    while left > 0:
        k = min(left, len(payload))
        sock.sendall(view[:k])
        left -= k
    sock.shutdown(socket.SHUT_WR)


def _control(args, wait_s=10.0):
    """The round's control connection; the receiver may still be starting: retried for
    wait_s seconds while the connection is refused."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return socket.create_connection((args.to, args.port))
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise SystemExit("tcp_limit: nothing listens on %s:%d (is `serve` running?)"
                                 % (args.to, args.port))
            time.sleep(0.05)


def one_round(args, total):
    ctrl = _control(args)
    ctrl.sendall(struct.pack("!I", args.streams))
    socks = []
    for _ in range(args.streams):
        s = socket.socket()
        _tune(s, args.buf_kib)
        s.connect((args.to, args.port))
        socks.append(s)
    payload = bytes(CHUNK)
    per = total // args.streams
    sizes = [per + (1 if i < total % args.streams else 0) for i in range(args.streams)]
    start = time.perf_counter()
    threads = [threading.Thread(target=_push, args=(s, n, payload)) for s, n in zip(socks, sizes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (got,) = struct.unpack("!Q", ctrl.recv(8, socket.MSG_WAITALL))
    seconds = time.perf_counter() - start
    for s in socks:
        s.close()
    ctrl.close()
    if got != total:
        raise SystemExit("tcp_limit: the receiver read %d of %d bytes" % (got, total))
    return total / seconds / 1e9


def send(args):
    total = args.mib << 20
    rates = []
    for r in range(args.rounds + 1):
        gbs = one_round(args, total)
        if r > 0:  # the first round warms up
            rates.append(gbs)
            print("round %d: %d stream(s), %d MiB: %.2f GB/s" % (r, args.streams, args.mib, gbs),
                  flush=True)
    if args.stop:
        ctrl = _control(args)
        ctrl.sendall(struct.pack("!I", 0))
        ctrl.close()
    print("TCP_LIMIT streams=%d mib=%d rounds=%d best_gbs=%.2f median_gbs=%.2f" % (
        args.streams, args.mib, args.rounds, max(rates), statistics.median(rates)), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--buf-kib", type=int, default=0)
    c = sub.add_parser("send")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--streams", type=int, default=1)
    c.add_argument("--mib", type=int, default=1024)
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--buf-kib", type=int, default=0)
    c.add_argument("--stop", action="store_true", help="stop the receiver at the end")
    args = p.parse_args()
    if args.mode == "serve":
        serve(args)
    else:
        if args.streams < 1 or args.mib < 1 or args.rounds < 1:
            raise SystemExit("tcp_limit: --streams, --mib and --rounds must be at least 1")
        send(args)


if __name__ == "__main__":
    main()
