"""hora.torch.plan: the candidate layouts and the table (no job), and the planner on the
example GPT in a job of 4 ranks (workers/plan_worker.py)."""

import os
import subprocess
import sys

import pytest

import harness

harness.case_names("plan_worker")
CASES = [fn.__name__ for fn in sys.modules["plan_worker"].cases.CASES
         if fn.__module__ == "plan_worker"]

from hora.torch import plan as planner  # noqa: E402


def test_candidates_of_four_ranks(monkeypatch):
    monkeypatch.setattr(planner.core, "size", lambda: 4)
    got = [str(c) for c in planner.candidates(4, 16)]
    assert got == ["DP 4", "DP 4 ZeRO-1", "DP 4 ZeRO-2", "DP 4 ZeRO-3", "TP 2 x DP 2",
                   "TP 4 x DP 1", "PP 2 (M=2) x DP 2", "PP 2 (M=4) x DP 2",
                   "PP 2 (M=8) x DP 2", "PP 2 (M=2) x DP 2 ZeRO-1", "PP 2 (M=4) x DP 2 ZeRO-1",
                   "PP 2 (M=8) x DP 2 ZeRO-1", "PP 4 (M=4) x DP 1", "PP 4 (M=8) x DP 1",
                   "TP 2 x PP 2 (M=2) x DP 1", "TP 2 x PP 2 (M=4) x DP 1",
                   "TP 2 x PP 2 (M=8) x DP 1", "PP 2 (M=2, interleaved x2) x DP 2",
                   "PP 2 (M=4, interleaved x2) x DP 2", "PP 2 (M=8, interleaved x2) x DP 2",
                   "PP 4 (M=4, interleaved x2) x DP 1", "PP 4 (M=8, interleaved x2) x DP 1"]
    # 2 rows: DP 4 cannot split them, PP 2 x DP 2 has 1 row per DP rank, PP 4 needs M >= 4
    got = [str(c) for c in planner.candidates(4, 2)]
    assert got == ["TP 2 x DP 2", "TP 4 x DP 1", "TP 2 x PP 2 (M=2) x DP 1"]


def test_table_marks_the_fastest_measured():
    rows = [{"layout": "A", "predicted_s": 0.2, "measured_s": 0.3, "memory_bytes": 2 ** 20,
             "fits": True},
            {"layout": "B", "predicted_s": 0.1, "measured_s": 0.25, "memory_bytes": 2 ** 21,
             "fits": True},
            {"layout": "C", "predicted_s": 0.05, "measured_s": None, "memory_bytes": 2 ** 30,
             "fits": False}]
    lines = planner.table(rows).splitlines()
    assert lines[2].startswith("| C | 0.050 | - | 1024.0 MiB (over budget)")
    assert lines[3] == "| B | 0.100 | 0.250 | 2.0 MiB | chosen |"
    assert lines[4] == "| A | 0.200 | 0.300 | 1.0 MiB |  |"


def _rows(*predicted):
    return [{"layout": str(i), "predicted_s": p, "fits": p is not None and p < 1.0,
             "memory_bytes": 1, "measured_s": None}
            for i, p in enumerate(predicted)]


def test_confirms_every_layout_within_the_margin_at_least_three():
    rows = _rows(0.30, 0.20, 2.0, 0.24, 0.26, 0.21)   # 2.0 does not fit
    assert [r["layout"] for r in planner.to_confirm(rows)] == ["1", "5", "3"]   # <= 0.25
    assert [r["layout"] for r in planner.to_confirm(rows, margin=0.35)] == ["1", "5", "3", "4"]
    assert [r["layout"] for r in planner.to_confirm(rows, margin=0.5)] == ["1", "5", "3", "4",
                                                                             "0"]
    assert [r["layout"] for r in planner.to_confirm(rows, confirm=2)] == ["1", "5"]
    assert [r["layout"] for r in planner.to_confirm(_rows(0.1, 0.5, 0.9))] == ["0", "1", "2"]
    assert planner.to_confirm(_rows(3.0)) == []


@pytest.mark.parametrize("kwargs,message", [
    ({"confirm": -1}, "confirm must be None or an int >= 0, got -1"),
    ({"confirm": 2.5}, "confirm must be None or an int >= 0, got 2.5"),
    ({"margin": -0.1}, "margin must be a fraction >= 0, got -0.1"),
    ({"margin": float("nan")}, "margin must be a fraction >= 0, got nan")])
def test_bad_confirm_or_margin_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        planner.plan(None, None, None, 8, **kwargs)


def test_command_rejects_a_bad_spec():
    env = harness.job_env()
    p = subprocess.run([harness.PYTHON, "-m", "hora.torch.plan", "no_colon", "--global-batch",
                        "8"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    assert p.returncode != 0 and "expected FILE.py:FUNCTION, got 'no_colon'" in p.stderr


@pytest.fixture(scope="module")
def job():
    result = harness.run_job(4, "plan_worker.py", timeout=600)
    for line in result.lines.get(0, []):
        if line.startswith("PLAN"):
            print(line[5:])
    return result


def test_job_exits_cleanly(job):
    assert job.rc == 0, job.tail()


@pytest.mark.parametrize("case", CASES)
def test_case(job, case):
    job.assert_case(case)
