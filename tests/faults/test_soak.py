"""Soak: 100,000 small allreduces in one 2-rank job through horarun (soak_job.cc: rounds of 4
in flight, then one alone), twice: with HORA_STEADY=off, every operation through the
coordinator and its fused buckets; with the default, the steady path running nearly all of
them. Resident memory is flat between the warm-up and the end (< 5 MiB growth), the thread
count does not grow (within gRPC's pool slack), the handle table is empty, and after shutdown
no thread of Hora's is left (only main)."""

import os
import re

import pytest

from faultlib import find, horarun_job

JOB = find("tests/faults/soak_job")
N = int(os.environ.get("SOAK_N", "100000"))
WARMUP = 10000
SLACK_KIB = 5 * 1024


@pytest.mark.parametrize("steady", ["off", "auto"])
def test_soak_memory_threads_handles_flat(steady):
    job = horarun_job(2, JOB, args=[N, WARMUP], heartbeat_timeout=30,
                      env=dict(os.environ, HORA_STEADY=steady))
    try:
        ok = job.wait_lines(lambda ls: sum("SOAK rank=" in l or "FAILED" in l for l in ls) >= 2,
                            540)
    finally:
        assert job.finish(30), "horarun did not exit:\n" + job.text()
    text = job.text()
    assert ok, "the soak did not finish within 540 s:\n" + text[-3000:]
    assert job.proc.returncode == 0, text[-3000:]
    lines = re.findall(r"SOAK .*", text)
    assert len(lines) == 2, text[-3000:]
    for line in lines:
        print("\n" + line)
        v = dict(kv.split("=") for kv in line.split()[1:])
        assert int(v["n"]) == N and int(v["bad"]) == 0, line
        assert int(v["growth_kib"]) < SLACK_KIB, line
        # gRPC's sync server grows and shrinks its poller pool by a thread or two with load
        # (rank 0); a leak would grow with the 100,000 operations.
        assert int(v["threads_end"]) <= int(v["threads_warm"]) + 2, line
        assert int(v["threads_after_shutdown"]) == 1, line
        assert int(v["handles_end"]) == 0, line
        # Which path the operations took: none on the steady path when it is off; with it on,
        # most of the lone ones at least (a bucket of their own every round).
        if steady == "off":
            assert int(v["fast"]) <= 0, line
        else:
            assert int(v["fast"]) > N // 10, line
