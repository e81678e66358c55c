"""hora.torch.Pipeline (GPipe, 1F1B, PP x DP) against one process, in jobs of 2 and 4 ranks."""

import sys

import pytest

import harness

# This worker's cases only: workers/cases.py's list is shared by every worker module imported
# into this pytest process.
harness.case_names("pipeline_worker")
CASES = [fn.__name__ for fn in sys.modules["pipeline_worker"].cases.CASES
         if fn.__module__ == "pipeline_worker"]


@pytest.fixture(scope="module", params=[2, 4], ids=["np2", "np4"])
def job(request):
    return harness.run_job(request.param, "pipeline_worker.py", timeout=600)


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)


# ---- the schedules' task lists, replayed without a job (pipeline_schedule.simulate) ----

from hora.torch.pipeline_schedule import ideal_bubble, simulate, tasks  # noqa: E402


@pytest.mark.parametrize("schedule,chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                             ("interleaved", 3), ("interleaved", 4)])
def test_schedule_runs_every_task_once_without_deadlock(schedule, chunks):
    for stages in range(2 if chunks > 1 else 1, 9):
        for micro in ([stages * k for k in (1, 2, 3)] if chunks > 1 else range(1, 10)):
            for s in range(stages):
                t = tasks(schedule, s, stages, micro, chunks)
                want = {(kind, i, k) for kind in "FB" for i in range(micro)
                        for k in range(chunks)}
                assert len(t) == len(want) and set(t) == want
            simulate(schedule, stages, micro, chunks)     # raises on a deadlock


@pytest.mark.parametrize("stages,micro,chunks", [(2, 4, 1), (4, 4, 1), (4, 8, 1), (2, 4, 2),
                                                 (4, 4, 2), (4, 8, 2), (4, 8, 4), (8, 16, 2)])
def test_schedule_bubble_is_the_theory(stages, micro, chunks):
    schedule = "interleaved" if chunks > 1 else "1f1b"
    _, idle = simulate(schedule, stages, micro, chunks)
    assert abs(idle[0] - ideal_bubble(schedule, stages, micro, chunks)) < 1e-9
    if chunks > 1:   # interleaving shrinks 1F1B's bubble
        assert idle[0] < simulate("1f1b", stages, micro)[1][0]


def test_simulate_takes_each_chunks_measured_cost():
    """Per-chunk costs (tools/bench/pipeline_bubble.py's "this cut"): equal ones give the
    theory; a slower last stage idles the first one more than the theory says."""
    for schedule, stages, micro, chunks in (("1f1b", 2, 4, 1), ("1f1b", 4, 8, 1),
                                            ("interleaved", 2, 4, 2), ("gpipe", 3, 4, 1)):
        n = stages * chunks
        span, idle = simulate(schedule, stages, micro, chunks, [1.0 / chunks] * n,
                              [2.0 / chunks] * n)
        assert (span, idle) == simulate(schedule, stages, micro, chunks)
    _, idle = simulate("1f1b", 2, 4, 1, [1.0, 1.2], [2.0, 2.4])
    assert idle[0] > ideal_bubble("1f1b", 2, 4) + 0.1 and idle[1] < idle[0]
    with pytest.raises(ValueError, match="3 forward and 3 backward costs for 2 chunks"):
        simulate("1f1b", 2, 4, 1, [1.0] * 3, [2.0] * 3)


def test_interleaved_holds_fewer_activations_than_gpipe():
    """At most 2(S-s-1) + (v-1)S + 1 forwards run ahead of their backward on stage s."""
    stages, micro, chunks = 4, 8, 2
    for s in range(stages):
        ahead = peak = 0
        for kind, _, _ in tasks("interleaved", s, stages, micro, chunks):
            ahead += 1 if kind == "F" else -1
            peak = max(peak, ahead)
        assert peak == min(2 * (stages - s - 1) + (chunks - 1) * stages + 1, micro * chunks)
