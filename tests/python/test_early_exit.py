"""A rank that leaves early (it ran out of data, or raised under horarun --keep-going) while
the others wait for a tensor it will never submit: every waiting rank gets an error at once
that names the rank as shut down, the tensor and hvd.join(), instead of waiting for the stall
timeout (600 s). The job's own timeout is the hang bound."""

import re

import pytest

import harness

_LINE = re.compile(r"^EARLY_EXIT rank (\d+): ([0-9.]+) (.*)$")


@pytest.mark.parametrize("np,mode", [(2, "exit"), (3, "exit"), (2, "raise")])
def test_waiting_ranks_learn_at_once_that_a_rank_left(np, mode):
    job = harness.run_job(np, "early_exit_worker.py", args=[mode], timeout=120,
                          launcher_args=["--keep-going"] if mode == "raise" else [])
    assert not job.timed_out, "a rank still waited after 120 s:\n" + job.tail()
    leaver = np - 1
    for rank in range(np - 1):
        lines = [m for m in (_LINE.match(l) for l in job.lines.get(rank, [])) if m]
        assert lines, "rank %d printed no EARLY_EXIT line:\n%s" % (rank, job.tail())
        text = lines[0].group(3)
        assert "rank %d" % leaver in text and "shut down" in text, text
        assert ("'g'" in text or ".g'" in text) and "hvd.join()" in text, text
