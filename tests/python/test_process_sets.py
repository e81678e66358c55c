"""hora.torch process sets and send/recv in jobs of 2, 3 and 4 ranks."""

import pytest

import harness

CASES = harness.case_names("process_set_worker")


@pytest.fixture(scope="module", params=[2, 3, 4], ids=["np2", "np3", "np4"])
def job(request):
    return harness.run_job(request.param, "process_set_worker.py", timeout=300)


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
