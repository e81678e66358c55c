"""HORA_AUTOTUNE=1 on a 2- and 3-rank hora.torch job: every rank ends with the same settings,
the CSV log parses with one row per trial and exactly one chosen row, which is what the ranks
report; gradients stay correct throughout (checked by the worker at every step)."""

import csv
import json
import os
import sys

import pytest

import harness

# Small samples so the search (9 trials with the default candidates) ends in about 60 of the
# 300 steps.
KNOBS = ["--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "2",
         "--autotune-samples-per-trial", "3"]
HEADER = ["trial", "stage", "fusion_threshold_bytes", "cycle_time_ms", "score_bytes_per_s",
          "samples", "chosen"]


@pytest.fixture(scope="module", params=[2, 3], ids=["np2", "np3"])
def job(request, tmp_path_factory):
    log = tmp_path_factory.mktemp("autotune") / "autotune.csv"
    result = harness.run_job(request.param, "autotune_worker.py", args=["300"], timeout=300,
                             launcher_args=["--autotune", "--autotune-log-file", str(log)] + KNOBS)
    return result, log


def states(result):
    out = {}
    for rank, lines in result.lines.items():
        for text in lines:
            if text.startswith("AUTOTUNE_STATE "):
                out[rank] = json.loads(text[len("AUTOTUNE_STATE "):])
    return out


def test_job_exits_cleanly(job):
    result, _ = job
    assert result.rc == 0, result.tail()
    result.assert_case("training_under_autotune")


def test_every_rank_reports_the_same_final_settings(job):
    result, _ = job
    got = states(result)
    assert sorted(got) == list(range(result.np)), result.tail()
    finals = {(s["fusion_threshold_bytes"], s["cycle_time_ms"], s["trial"], s["done"])
              for s in got.values()}
    assert len(finals) == 1, got
    for s in got.values():
        assert s["done"] is True
        assert s["trial"] == 9  # 5 thresholds + 5 cycle times - the shared start point
        assert s["settings_seen"] >= 2, "the ranks never saw a trial's settings: %r" % s


def test_log_parses_with_one_chosen_row(job):
    result, log = job
    with open(str(log)) as f:
        rows = list(csv.reader(f))
    assert rows[0] == HEADER
    body = [dict(zip(HEADER, r)) for r in rows[1:]]
    assert len(body) == 9
    assert [int(r["trial"]) for r in body] == list(range(9))
    assert [int(r["stage"]) for r in body] == [1] * 5 + [2] * 4
    for r in body:
        assert float(r["score_bytes_per_s"]) > 0
        assert int(r["samples"]) == 3
        assert int(r["fusion_threshold_bytes"]) > 0 and float(r["cycle_time_ms"]) > 0
    chosen = [r for r in body if r["chosen"] == "1"]
    assert len(chosen) == 1, rows
    best = max(float(r["score_bytes_per_s"]) for r in body)
    assert float(chosen[0]["score_bytes_per_s"]) == best
    # The first trial is the configured default (64 MiB, 1 ms).
    assert (int(body[0]["fusion_threshold_bytes"]), float(body[0]["cycle_time_ms"])) == (
        64 << 20, 1.0)
    # The shipped reader (hora-timeline autotune-plot) parses it too.
    sys.path.insert(0, os.path.join(harness.REPO, "tools", "timeline"))
    import autotune_plot
    parsed = autotune_plot.read_log(str(log))
    assert [t["chosen"] for t in parsed] == [r["chosen"] == "1" for r in body]
    state = states(result)[0]
    assert int(chosen[0]["fusion_threshold_bytes"]) == state["fusion_threshold_bytes"]
    assert float(chosen[0]["cycle_time_ms"]) == pytest.approx(state["cycle_time_ms"])
