"""hora.torch tensor parallelism (column/row/embedding layers, TP x DP grids) against one
process, in jobs of 2 and 4 ranks."""

import sys

import pytest

import harness

# This worker's cases only: workers/cases.py's list is shared by every worker module imported
# into this pytest process.
harness.case_names("tp_worker")
CASES = [fn.__name__ for fn in sys.modules["tp_worker"].cases.CASES
         if fn.__module__ == "tp_worker"]


@pytest.fixture(scope="module", params=[2, 4], ids=["np2", "np4"])
def job(request):
    return harness.run_job(request.param, "tp_worker.py", timeout=600)


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
