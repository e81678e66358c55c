#!/usr/bin/python3
"""Per-call cost of hora.torch's small-op path (docs/benchmarks-steady.md "Lean Python path"):
a 4-byte CPU tensor through hvd.allreduce(t, name=..., op=hvd.Sum), through
hvd.allreduce_async + hvd.synchronize, and through the bare ctypes calls of the C API
(hora_allreduce_async + hora_wait + hora_release, no hora.torch on top), --rounds rounds of
--iters calls each, alternating, on every rank; rank 0 prints median and p90 per call (us).
The difference between the first two and the third is hora.torch's Python. With --profile,
rank 0 also runs --iters hvd.allreduce calls under cProfile and prints the top entries.

    HORA_STEADY=auto tools/launcher/horarun -np 2 /usr/bin/python3 tools/bench/py_call_overhead_bench.py
    HORA_STEADY=auto tools/launcher/horarun -np 1 /usr/bin/python3 tools/bench/py_call_overhead_bench.py --profile
"""
import argparse
import cProfile
import ctypes
import pstats
import statistics
import sys
import time

import torch

from hora import _lib
import hora.torch as hvd


def quantiles(samples_ns):
    s = sorted(samples_ns)
    return statistics.median(s) / 1e3, s[min(len(s) - 1, int(len(s) * 0.9))] / 1e3


def bare_c_api(t, out, name):
    """One allreduce through the C API's ctypes calls only: the floor under hora.torch."""
    lib = _lib.lib()
    desc = _lib.HoraTensor(t.data_ptr(), (ctypes.c_int64 * 1)(1), 1, 6, 0, 0, None)
    raw = _lib.c_handle()
    status = lib.hora_allreduce_async(name, ctypes.byref(desc), out.data_ptr(), 0, 1.0, 1.0, 0,
                                      ctypes.byref(raw))
    if status != 0:
        raise _lib.make_error(status, "bare allreduce")
    while True:
        status = lib.hora_wait(raw.value, 0.5)
        if status != 5:  # HORA_ERR_DEADLINE_EXCEEDED: wait again
            break
    lib.hora_release(raw.value)
    if status != 0:
        raise _lib.make_error(status, "bare allreduce")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    hvd.init()
    size = hvd.size()
    t = torch.ones(1, dtype=torch.float32)
    out = torch.empty(1, dtype=torch.float32)
    for _ in range(50):  # warm up; the steady path learns the names
        r = hvd.allreduce(t, name="ov.sync", op=hvd.Sum)
        hvd.synchronize(hvd.allreduce_async(t, name="ov.async", op=hvd.Sum))
        bare_c_api(t, out, b"allreduce.ov.bare")
    if r.item() != float(size) or out.item() != float(size):
        sys.exit("wrong sums %r %r, want %r" % (r.item(), out.item(), float(size)))

    now = time.perf_counter_ns
    sync_s, async_s, bare_s = [], [], []
    for _ in range(a.rounds):
        for _ in range(a.iters):
            t0 = now()
            hvd.allreduce(t, name="ov.sync", op=hvd.Sum)
            sync_s.append(now() - t0)
        for _ in range(a.iters):
            t0 = now()
            hvd.synchronize(hvd.allreduce_async(t, name="ov.async", op=hvd.Sum))
            async_s.append(now() - t0)
        for _ in range(a.iters):
            t0 = now()
            bare_c_api(t, out, b"allreduce.ov.bare")
            bare_s.append(now() - t0)
    if hvd.rank() == 0:
        sm, sp = quantiles(sync_s)
        am, ap = quantiles(async_s)
        bm, bp = quantiles(bare_s)
        print("RESULT np=%d iters=%d sync_median_us=%.1f sync_p90_us=%.1f async_median_us=%.1f "
              "async_p90_us=%.1f bare_median_us=%.1f bare_p90_us=%.1f python_sync_us=%.1f "
              "python_async_us=%.1f" % (size, a.iters * a.rounds, sm, sp, am, ap, bm, bp,
                                        sm - bm, am - bm))
        sys.stdout.flush()
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.iters):
            hvd.allreduce(t, name="ov.sync", op=hvd.Sum)
        prof.disable()
        if hvd.rank() == 0:
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    hvd.shutdown()


if __name__ == "__main__":
    main()
