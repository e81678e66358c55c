"""The steady path through hora.torch in real processes, 2 and 3 ranks on one host (shm):
bit-for-bit results against the coordinator path, the path really taken (its counters),
fallback on a changed shape, a mismatch still naming the ranks."""

import pytest

import harness

CASES = harness.case_names("steady_worker")


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request):
    return harness.run_job(request.param, "steady_worker.py", timeout=300,
                           extra_env={"HORA_STEADY": "auto"})


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
