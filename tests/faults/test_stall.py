"""A tensor submitted by one rank only (3 ranks through horarun): the stall warning names the
tensor and the missing ranks; the stall timeout aborts every rank with that report, in time.
Mismatched shapes are covered by tests/integration (collectives_job)."""

import re

from faultlib import find, hang_bound, horarun_job

JOB = find("tests/faults/probe_job")
WAIT_S = 60
REPORT = "tensor 'stall.lonely' submitted by rank 0 but not by ranks 1,2 for "


def test_stall_warning_names_tensor_and_missing_ranks_then_job_goes_on():
    # The other ranks submit 3 s late: warnings (every 0.5 s after 1 s), then success.
    job = horarun_job(3, JOB, args=["stall", 3], extra=["-x", "HORA_STALL_WARNING_SECONDS=1"])
    try:
        assert job.wait_lines(lambda ls: sum("DONE rank=" in l for l in ls) == 3, WAIT_S), \
            job.text()
    finally:
        assert job.finish(30), "horarun did not exit:\n" + job.text()
    warnings = [l for l in job.text().splitlines()
                if "[hora 0] [warning] coordinator: 1 tensor(s) stalled: " + REPORT in l]
    assert warnings, job.text()
    assert job.proc.returncode == 0, job.text()
    assert "FAILED" not in job.text()


def test_stall_timeout_aborts_every_rank_with_the_report():
    timeout = 2.0
    job = horarun_job(3, JOB, args=["stall", -1],
                      extra=["-x", "HORA_STALL_WARNING_SECONDS=1",
                             "-x", "HORA_STALL_TIMEOUT_SECONDS=%g" % timeout])
    try:
        done = job.wait_lines(lambda ls: sum("FAILED rank=" in l for l in ls) == 3, WAIT_S)
        assert done, "not every rank failed within %d s:\n%s" % (WAIT_S, job.text())
    finally:
        assert job.finish(30), "horarun did not exit:\n" + job.text()
    m = re.search(r"SUBMITTED rank=0 t=([0-9.]+)", job.text())
    assert m, job.text()
    t_submit = float(m.group(1))
    fails = job.failures()
    assert sorted(fails) == [0, 1, 2], job.text()
    worst = 0.0
    for r, f in fails.items():
        assert f.status == "ABORTED", f
        assert f.msg.startswith("stall timeout: " + REPORT), f
        dt = f.t - t_submit
        worst = max(worst, dt)
        # Never before the timeout; after it within one stall check (<= warning / 2) on an idle
        # machine, which is printed below; the test only rules out a hang.
        assert timeout - 0.1 <= dt <= hang_bound(timeout), (r, dt, f)
    print("\nSTALL timeout %.1f s: every rank failed %.3f s after the submission at worst"
          % (timeout, worst))
