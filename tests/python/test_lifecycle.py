"""init / shutdown cycles in one job (Horovod's own tests re-initialize between tests)."""

import pytest

import harness


@pytest.mark.parametrize("np", [2, 3])
def test_shutdown_and_init_again(np):
    job = harness.run_job(np, "reinit_worker.py", timeout=240)
    assert job.rc == 0, job.tail()
    job.assert_case("reinit")


@pytest.mark.parametrize("np", [2, 3])
def test_init_after_a_stall_timeout_starts_a_new_job(np):
    """The pattern that made every later test of Horovod's suite fail after one assertion:
    see workers/stall_recovery_worker.py. Three rounds, a different odd rank each time."""
    job = harness.run_job(np, "stall_recovery_worker.py", timeout=300,
                          extra_env={"HORA_STALL_TIMEOUT_SECONDS": "3"})
    for r in range(np):
        print("\n".join(l for l in job.lines.get(r, []) if l.startswith("DETECTION")))
    assert job.rc == 0, job.tail()
    job.assert_case("stall_recovery")
