"""hvd.elastic (fixed membership) in jobs of 2 and 3 ranks: see workers/elastic_worker.py."""

import pytest

import harness

CASES = harness.case_names("elastic_worker")


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request):
    return harness.run_job(request.param, "elastic_worker.py", timeout=300,
                           extra_env={"HORA_STALL_TIMEOUT_SECONDS": "2"})


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
