"""A rank SIGKILLed inside a pipeline step, a ZeRO-3 allgather, a ZeRO-1/2 reducescatter or a
tensor-parallel allreduce: every survivor raises HoraPeerFailureError naming the lost rank,
within the hang bound of the heartbeat timeout (workers/parallel_fault_worker.py)."""

import pytest

import harness

HEARTBEAT_S = 10
# the project's hang bound for a wait the product ends after the deadline (failure-model.md,
# tests/harness/hang_bound.h): loose for a loaded machine, tight enough to fail a hang
BOUND_S = 4 * HEARTBEAT_S + 10
MODES = ["pipeline", "zero3", "zero1", "zero2", "tp"]


def victim_of(mode, np):
    if mode == "pipeline":   # the stage holding the Killer module
        return 1 if np == 2 else 2
    return np - 1


def stamp(lines, prefix):
    for l in lines:
        if l.startswith(prefix):
            return float(l.split("t=")[1])
    return None


@pytest.mark.parametrize("np", [2, 4], ids=["np2", "np4"])
@pytest.mark.parametrize("mode", MODES)
def test_survivors_name_the_lost_rank(mode, np):
    job = harness.run_job(np, "parallel_fault_worker.py", [mode], timeout=180,
                          launcher_args=["--keep-going"],
                          extra_env={"HORA_HEARTBEAT_TIMEOUT_SECONDS": str(HEARTBEAT_S)})
    victim = victim_of(mode, np)
    assert not job.timed_out, job.tail()
    killed = stamp(job.lines.get(victim, []), "KILLING ")
    assert killed is not None, "rank %d did not reach its kill:\n%s" % (victim, job.tail())
    for r in range(np):
        if r == victim:
            continue
        said = [l for l in job.lines.get(r, []) if l.startswith("SURVIVOR ")]
        assert said, "rank %d printed no verdict:\n%s" % (r, job.tail())
        assert said[0].startswith("SURVIVOR HoraPeerFailureError: "), said[0]
        assert "rank %d " % victim in said[0], said[0]
        took = stamp(job.lines[r], "SURVIVOR_AT ") - killed
        print("%s np%d: rank %d raised %.3f s after the kill: %s" % (mode, np, r, took,
                                                                    said[0][:200]))
        assert took <= BOUND_S, "rank %d took %.1f s" % (r, took)
