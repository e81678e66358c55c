"""init / shutdown cycles in one job (Horovod's own tests re-initialize between tests)."""

import pytest

import harness


@pytest.mark.parametrize("np", [2, 3])
def test_shutdown_and_init_again(np):
    job = harness.run_job(np, "reinit_worker.py", timeout=240)
    assert job.rc == 0, job.tail()
    job.assert_case("reinit")
