"""Errors in collectives raise HoraError with the runtime's message; 2 and 3 ranks."""

import pytest

import harness

CASES = harness.case_names("error_worker")


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request):
    return harness.run_job(request.param, "error_worker.py", timeout=300)


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)


@pytest.mark.parametrize("np", [2, 3])
def test_peer_failure(np):
    """The last rank exits mid-job; the survivors raise HorovodInternalError in bounded time."""
    job = harness.run_job(np, "peer_failure_worker.py", timeout=120)
    for rank in range(np - 1):
        status, reason = job.cases.get("peer_failure", {}).get(rank, ("MISSING", ""))
        assert status == "PASS", "rank %d: %s %s\n%s" % (rank, status, reason, job.tail())
        assert job.cases.get("shutdown_returns", {}).get(rank, ("MISSING",))[0] == "PASS", \
            job.tail()
