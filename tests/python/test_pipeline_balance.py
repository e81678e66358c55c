"""Pipeline.from_sequential(balance="profile"): the partition against tables (no job), and
an uneven nn.Sequential in jobs of 2 and 4 ranks (workers/pipeline_balance_worker.py)."""

import itertools
import sys

import pytest

import harness

harness.case_names("pipeline_balance_worker")
CASES = [fn.__name__ for fn in sys.modules["pipeline_balance_worker"].cases.CASES
         if fn.__module__ == "pipeline_balance_worker"]

from hora.torch.pipeline_balance import (interleaved_partition, partition,  # noqa: E402
                                          stage_memory, in_flight)
from hora.torch.pipeline_schedule import simulate  # noqa: E402


def brute(costs, stages, fits=lambda a, b, s: True):
    """Every contiguous split, the best largest stage cost (None if none fits)."""
    import itertools
    n, best = len(costs), None
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = (0,) + cuts + (n,)
        if not all(fits(bounds[s], bounds[s + 1], s) for s in range(stages)):
            continue
        worst = max(sum(costs[bounds[s]:bounds[s + 1]]) for s in range(stages))
        best = worst if best is None else min(best, worst)
    return best


def largest(costs, balance):
    out, a = [], 0
    for k in balance:
        out.append(sum(costs[a:a + k]))
        a += k
    return max(out)


@pytest.mark.parametrize("costs,stages,want", [
    ([10, 10, 1, 1, 1, 1, 1, 1], 2, [1, 7]),
    ([10, 10, 1, 1, 1, 1, 1, 1], 4, [1, 1, 3, 3]),
    ([1, 1, 1, 1], 4, [1, 1, 1, 1]),
    ([1, 1, 1, 1, 1, 1, 9], 2, [6, 1]),
    ([5], 1, [1]),
])
def test_partition_table(costs, stages, want):
    b = partition(costs, stages)
    assert sum(b) == len(costs) and min(b) >= 1
    assert largest(costs, b) == largest(costs, want)


def test_partition_is_optimal_against_brute_force():
    import random
    rnd = random.Random(7)
    for _ in range(200):
        n = rnd.randint(1, 9)
        stages = rnd.randint(1, n)
        costs = [rnd.choice([0.5, 1, 2, 3, 10]) * rnd.random() for _ in range(n)]
        b = partition(costs, stages)
        assert len(b) == stages and sum(b) == n and min(b) >= 1
        assert abs(largest(costs, b) - brute(costs, stages)) < 1e-12


def test_partition_honours_the_memory_limit():
    costs = [10, 10, 1, 1, 1, 1]
    mem = [1, 1, 1, 1, 1, 1]

    def memory(a, b, s):
        return sum(mem[a:b])

    # unconstrained: [1, 5] (10 vs 14); 3 bytes per stage forbids 5 modules on one stage
    assert partition(costs, 2) == [1, 5]
    b = partition(costs, 2, memory, memory_limit=3)
    assert max(b) <= 3 and b == [3, 3]
    assert largest(costs, b) == brute(costs, 2, lambda a, c, s: memory(a, c, s) <= 3)
    with pytest.raises(ValueError, match="within memory_limit=2 bytes"):
        partition(costs, 2, memory, memory_limit=2)


def test_partition_bad_stage_count():
    with pytest.raises(ValueError, match="cannot cut 2 modules into 3 stages"):
        partition([1, 1], 3)


def _rows(fwd):
    return [{"forward_s": f, "backward_s": 2 * f, "loss_s": 0.0} for f in fwd]


def _replayed(fwd, balance, stages, chunks, m):
    spans, a = [], 0
    for k in balance:
        spans.append((a, a + k))
        a += k
    return simulate("interleaved", stages, m, chunks, forward=[sum(fwd[a:b]) for a, b in spans],
                    backward=[2 * sum(fwd[a:b]) for a, b in spans])[0]


def test_interleaved_cut_is_the_fastest_replay():
    # the example GPT's modules at 2 layers: embedding, attention, MLP, attention, MLP, head
    fwd = [1, 20, 28, 20, 28, 6]
    by_part = partition([3 * f for f in fwd], 4)   # the largest part as small as it can be
    got = interleaved_partition(_rows(fwd), 2, 2, 4)
    assert sum(got) == 6 and len(got) == 4 and min(got) >= 1
    every = [list(b) for b in itertools.product(range(1, 4), repeat=4) if sum(b) == 6]
    fastest = min(_replayed(fwd, b, 2, 2, 4) for b in every)
    assert _replayed(fwd, got, 2, 2, 4) == fastest
    # the stage holding parts 1 and 3 of the largest-part cut waits: this one is faster
    assert _replayed(fwd, got, 2, 2, 4) < _replayed(fwd, by_part, 2, 2, 4)


def test_interleaved_cut_honours_the_memory_limit():
    fwd = [1, 20, 28, 20, 28, 6]

    def memory(a, b, part):
        return b - a

    got = interleaved_partition(_rows(fwd), 2, 2, 4, memory, memory_limit=2)
    assert max(got) <= 2 and sum(got) == 6
    every = [list(b) for b in itertools.product(range(1, 3), repeat=4) if sum(b) == 6]
    assert _replayed(fwd, got, 2, 2, 4) == min(_replayed(fwd, b, 2, 2, 4) for b in every)
    with pytest.raises(ValueError, match="within memory_limit=1 bytes"):
        interleaved_partition(_rows(fwd), 2, 2, 4, memory, memory_limit=1)


def test_memory_model():
    rows = [{"parameter_bytes": 100, "activation_bytes": 10}] * 2
    assert stage_memory(rows, 3) == 2 * (200 + 30)
    assert in_flight("gpipe", 0, 4, 8) == 8
    assert in_flight("1f1b", 0, 4, 8) == 4 and in_flight("1f1b", 3, 4, 8) == 1


@pytest.fixture(scope="module", params=[2, 4], ids=["np2", "np4"])
def job(request):
    result = harness.run_job(request.param, "pipeline_balance_worker.py", timeout=600)
    for line in result.lines.get(0, []):
        if line.startswith("TIMING"):
            print(line)          # the measured ratio (never asserted: the machine is shared)
    return result


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
