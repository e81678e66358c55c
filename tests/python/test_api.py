"""Every hora.torch collective against a reference, in jobs of 2 and 3 ranks."""

import pytest

import harness

CASES = harness.case_names("api_worker") + harness.case_names("api_extras")


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request):
    return harness.run_job(request.param, "api_worker.py", timeout=300)


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
