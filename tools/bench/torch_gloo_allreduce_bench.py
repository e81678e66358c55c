#!/usr/bin/python3
"""torch.distributed (gloo backend) allreduce benchmark, same sizes and columns as
hora_allreduce_bench: float32 sum, in place (dist.all_reduce), real values, one check per
size, iteration count adapted to about --target-seconds per size, time per operation of the
slowest rank, algbw and busbw = algbw * 2 (n - 1) / n in GB/s; then the raw latency of a
4-byte all_reduce (median, p90).

Needs Debian's torch: run with /usr/bin/python3.

  /usr/bin/python3 tools/bench/torch_gloo_allreduce_bench.py --np 2 [--csv]
      spawns the ranks itself (env:// rendezvous on 127.0.0.1 and a free port);
  tools/launcher/horarun -np 2 /usr/bin/python3 tools/bench/torch_gloo_allreduce_bench.py
      one rank per process from HORA_RANK / HORA_SIZE; MASTER_PORT is taken from the
      environment, else the port after HORA_COORDINATOR_ADDR's.
Gloo is told to use the loopback interface (GLOO_SOCKET_IFNAME=lo unless already set).
"""
import argparse
import math
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launcher"))
import horarun_agent  # noqa: E402  (cpu_slice: --bind-to core as horarun binds)


def parse_bytes(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(float(t))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=0, help="spawn this many ranks (else: be one rank)")
    p.add_argument("--min-bytes", type=parse_bytes, default=4)
    p.add_argument("--max-bytes", type=parse_bytes, default=256 << 20)
    p.add_argument("--step-factor", type=int, default=4)
    p.add_argument("--target-seconds", type=float, default=0.6)
    p.add_argument("--max-iters", type=int, default=100000)
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--lat-iters", type=int, default=2000)
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--no-bandwidth", action="store_true")
    p.add_argument("--csv", action="store_true")
    p.add_argument("--impl", default="torch-gloo", help="label in the impl column")
    p.add_argument("--bind-to", choices=("none", "core"), default="none",
                   help="with --np: core binds rank k of N to the k-th of N equal slices of "
                        "the CPUs (horarun --bind-to core's rule)")
    a = p.parse_args(argv)
    a.min_bytes = max(4, a.min_bytes)
    a.step_factor = max(2, a.step_factor)
    a.min_iters = max(1, a.min_iters)
    a.lat_iters = max(1, a.lat_iters)
    return a


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def spawn(args, argv):
    """Starts args.np ranks of this script and waits; the first failure stops the others."""
    port = free_port()
    child_argv = [a for a in argv]
    # Drop --np N / --np=N so the children run as ranks.
    cleaned, skip = [], False
    for a in child_argv:
        if skip:
            skip = False
            continue
        if a == "--np":
            skip = True
            continue
        if a.startswith("--np="):
            continue
        cleaned.append(a)
    procs = []
    for rank in range(args.np):
        env = dict(os.environ)
        env.update({"RANK": str(rank), "WORLD_SIZE": str(args.np), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port), "LOCAL_RANK": str(rank)})
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        cpus = None
        if args.bind_to == "core":  # horarun's own rule
            cpus = horarun_agent.cpu_slice(os.sched_getaffinity(0), rank, args.np)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + cleaned, env=env,
            preexec_fn=(lambda c=cpus: os.sched_setaffinity(0, c)) if cpus else None))
    rc = 0
    remaining = list(procs)
    while remaining:
        for p in list(remaining):
            r = p.poll()
            if r is None:
                continue
            remaining.remove(p)
            if r != 0 and rc == 0:
                rc = r
                for q in remaining:
                    q.terminate()
        time.sleep(0.05)
    return rc


def identity():
    env = os.environ
    rank = env.get("RANK", env.get("HORA_RANK"))
    size = env.get("WORLD_SIZE", env.get("HORA_SIZE"))
    if rank is None or size is None:
        return None
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        coord = env.get("HORA_COORDINATOR_ADDR", "")
        if ":" not in coord:
            sys.stderr.write("set MASTER_PORT (or run under horarun, or use --np N)\n")
            sys.exit(2)
        os.environ["MASTER_PORT"] = str(int(coord.rsplit(":", 1)[1]) + 1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return int(rank), int(size)


def main(argv):
    args = parse_args(argv)
    if args.np > 0:
        return spawn(args, argv)
    ident = identity()
    if ident is None:
        sys.stderr.write("not a rank: give --np N, or run under horarun\n")
        return 2
    rank, size = ident

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)
    init_s = time.perf_counter() - t0

    def max_over_ranks(x):
        t = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    out = sys.stdout
    if rank == 0:
        if args.csv:
            out.write("kind,impl,np,bytes,count,type,op,iters,time_us,algbw_gbs,busbw_gbs,p50_us,"
                      "p90_us,min_us,extra_us,wrong\n")
        else:
            out.write("# %s all_reduce benchmark, %d ranks, float32 sum, in place (torch %s)\n"
                      % (args.impl, size, torch.__version__))
            out.write("#%12s %12s %8s %6s %8s %11s %9s %9s %7s\n" % (
                "size", "count", "type", "redop", "iters", "time", "algbw", "busbw", "#wrong"))
            out.write("#%12s %12s %8s %6s %8s %11s %9s %9s %7s\n" % (
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
        out.flush()

    total_wrong = 0
    if not args.no_bandwidth:
        nbytes = args.min_bytes
        while nbytes <= args.max_bytes:
            count = nbytes // 4
            t_size = time.perf_counter()
            # Rank r holds (i % 13) + r + 1 at element i; the sum over n ranks is exact.
            idx = torch.arange(count, dtype=torch.int32)
            base = (idx % 13).to(torch.float32)
            buf = base + float(rank + 1)
            want = base * size + size * (size + 1) / 2.0
            del idx
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            first = max_over_ranks(time.perf_counter() - t0)  # same batch sizes on every rank
            wrong_here = int((buf != want).sum().item())
            if wrong_here:
                bad = (buf != want).nonzero()[:3].flatten().tolist()
                for i in bad:
                    sys.stderr.write("rank %d: element %d is %g, want %g\n"
                                     % (rank, i, buf[i].item(), want[i].item()))
            del want, base
            wrong = int(max_over_ranks(wrong_here))
            total_wrong += wrong

            # Warm-up in batches that every rank runs alike, growing until a batch takes about a
            # quarter of the target time (0.15 s at most); the last batch estimates one operation.
            window = min(0.15, args.target_seconds / 4)
            batch = 1 if first > 0.05 else 5
            while True:
                t0 = time.perf_counter()
                for _ in range(batch):
                    dist.all_reduce(buf)
                elapsed = max_over_ranks(time.perf_counter() - t0)
                est = elapsed / batch
                if elapsed >= window or batch >= args.max_iters:
                    break
                grow = int(math.ceil(batch * 1.2 * window / max(elapsed, 1e-9)))
                batch = max(2 * batch, min(16 * batch, grow))
            iters = int(math.ceil(args.target_seconds / max(est, 1e-7)))
            iters = max(args.min_iters, min(args.max_iters, iters))

            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            per_op = max_over_ranks((time.perf_counter() - t0) / iters)
            del buf
            algbw = nbytes / per_op / 1e9
            busbw = algbw * 2.0 * (size - 1) / size
            if rank == 0:
                if args.csv:
                    out.write("bw,%s,%d,%d,%d,float,sum,%d,%.3f,%.4f,%.4f,,,,,%d\n" % (
                        args.impl, size, nbytes, count, iters, per_op * 1e6, algbw, busbw, wrong))
                else:
                    out.write(" %12d %12d %8s %6s %8d %11.2f %9.3f %9.3f %7d\n" % (
                        nbytes, count, "float", "sum", iters, per_op * 1e6, algbw, busbw, wrong))
                out.flush()
                # Wall time of the whole size (fill, check, warm-up, timed loop) to stderr, to
                # see where a slow run spends its time.
                sys.stderr.write("rank %d size %d: %.2f s in all, %.2f s timed\n" % (rank,
                    nbytes, time.perf_counter() - t_size, per_op * iters))
            nbytes *= args.step_factor

    if not args.no_latency:
        v = torch.ones(1, dtype=torch.float32)
        for _ in range(100):
            dist.all_reduce(v)
        dist.barrier()
        samples = []
        clock = time.perf_counter_ns
        for _ in range(args.lat_iters):
            v.fill_(1.0)
            a = clock()
            dist.all_reduce(v)
            samples.append((clock() - a) / 1e3)
        s = sorted(samples)

        def pct(p):
            k = max(0, min(len(s) - 1, int(math.ceil(p * len(s))) - 1))
            return s[k]

        p50 = max_over_ranks(pct(0.5))
        p90 = max_over_ranks(pct(0.9))
        mn = max_over_ranks(s[0])
        mean = max_over_ranks(sum(s) / len(s))
        if rank == 0:
            if args.csv:
                out.write("lat,%s,%d,4,1,float,sum,%d,%.3f,,,%.3f,%.3f,%.3f,,0\n" % (
                    args.impl, size, args.lat_iters, mean, p50, p90, mn))
            else:
                out.write("# %s 4-byte all_reduce latency, %d iterations: median %.1f us, p90 %.1f us, "
                          "min %.1f us, mean %.1f us\n" % (args.impl, args.lat_iters, p50, p90, mn, mean))
            out.flush()
    if rank == 0 and not args.csv:
        out.write("# init_process_group took %.3f s on rank 0\n" % init_s)
    dist.destroy_process_group()
    if total_wrong:
        sys.stderr.write("rank %d: %d wrong elements\n" % (rank, total_wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
