"""Strangers at a running 2-rank job's coordinator: a wrong and a missing token, garbage bytes,
an oversized message. Each is refused (tests/faults/stranger.cc checks the answers), the
coordinator logs the token refusals, and the job beside them completes with correct results."""

import os
import re

from faultlib import find, horarun_job

JOB = find("tests/faults/probe_job")
STRANGER = find("tests/faults/stranger")
MAX_BYTES = 1 << 20


def test_strangers_are_refused_and_the_job_completes(tmp_path):
    import subprocess
    stop = str(tmp_path / "stop")
    env = dict(os.environ, PROBE_STOP_FILE=stop)
    job = horarun_job(2, JOB, args=["loop", 2], env=env,
                      extra=["-x", "PROBE_STOP_FILE", "-x", "HORA_MAX_MESSAGE_BYTES=%d" % MAX_BYTES])
    try:
        assert job.wait_lines(lambda ls: sum("READY rank=" in l for l in ls) == 2, 60), job.text()
        m = re.search(r"COORDINATOR addr=(\S+) token=(\S+)", job.text())
        assert m, job.text()
        p = subprocess.run([STRANGER, m.group(1), m.group(2), str(MAX_BYTES)],
                           capture_output=True, timeout=120)
        out = p.stdout.decode()
        print(out)
        open(stop, "w").close()
        assert job.wait_lines(lambda ls: sum("DONE rank=" in l for l in ls) == 2, 150), job.text()
    finally:
        open(stop, "w").close()
        assert job.finish(60), "horarun did not exit:\n" + job.text()
    assert p.returncode == 0 and "9 passed, 0 failed" in out, out + p.stderr.decode()
    text = job.text()
    assert job.proc.returncode == 0, text
    done = re.findall(r"DONE rank=\d iterations=(\d+) bad=(\d+)", text)
    assert len(done) == 2 and all(bad == "0" for _, bad in done), text
    assert done[0][0] == done[1][0], text
    for method, why in (("Join", "a wrong job token"), ("StoreGet", "no job token"),
                        ("Session", "a wrong job token")):
        assert re.search(r"\[hora 0\] \[warning\] coordinator: refused %s from \S+: %s"
                         % (method, why), text), text
    assert "FAILED" not in text and "is lost" not in text, text
