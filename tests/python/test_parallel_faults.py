"""A rank SIGKILLed inside a pipeline step or a ZeRO-3 allgather: every survivor raises
HoraPeerFailureError naming the lost rank (workers/parallel_fault_worker.py)."""

import pytest

import harness

VICTIM = {("pipeline", 2): 1, ("pipeline", 4): 2, ("zero3", 2): 1, ("zero3", 4): 3}


@pytest.mark.parametrize("np", [2, 4], ids=["np2", "np4"])
@pytest.mark.parametrize("mode", ["pipeline", "zero3"])
def test_survivors_name_the_lost_rank(mode, np):
    job = harness.run_job(np, "parallel_fault_worker.py", [mode], timeout=180,
                          launcher_args=["--keep-going"])
    victim = VICTIM[(mode, np)]
    assert not job.timed_out, job.tail()
    for r in range(np):
        if r == victim:
            continue
        said = [l for l in job.lines.get(r, []) if l.startswith("SURVIVOR ")]
        assert said, "rank %d printed no verdict:\n%s" % (r, job.tail())
        assert said[0].startswith("SURVIVOR HoraPeerFailureError: "), said[0]
        assert "rank %d " % victim in said[0], said[0]
