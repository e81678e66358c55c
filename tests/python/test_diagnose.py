"""The hang diagnosis (docs/failure-model.md "Diagnosis"), through horarun with 3 ranks:
rank 1 sleeps in a named Python function, or is wedged in a C call that holds the GIL, while
ranks 0 and 2 wait in allreduce 'grad.7'; with a 10 s stall timeout the job ends within 45 s
(the bound issue 33 names) and horarun's output names rank 1, the tensor and what rank 1 is
doing. `horarun --diagnose` on a healthy job prints every rank's state and the job ends as
it would have, with every result checked by the ranks."""

import os
import re
import subprocess
import time

import harness

WORKER = os.path.join(harness.WORKERS, "diagnose_worker.py")
TENSOR = "allreduce 'allreduce.grad.7'"  # the numpy API's name for name="grad.7"


def _stalled_job(mode, tmp_path, extra_env=None):
    report = str(tmp_path / "diagnosis.txt")
    start = time.monotonic()
    job = harness.run_job(3, "diagnose_worker.py", args=[mode], timeout=45,
                          extra_env=dict({"HORA_STALL_TIMEOUT_SECONDS": "10",
                                          "HORA_DIAGNOSE_FILE": report}, **(extra_env or {})))
    elapsed = time.monotonic() - start
    assert not job.timed_out, "the job still ran after 45 s:\n" + job.tail()
    assert elapsed < 45, elapsed
    out = job.stdout + job.stderr
    pid1 = re.search(r"READY rank=1 pid=(\d+)", out)
    assert pid1, job.tail()
    # The one message from rank 0, and every waiting rank's error.
    named = [l for l in job.lines.get(0, []) if re.search(re.escape(
        "never submitted %s: " % TENSOR), l) and ("pid %s)" % pid1.group(1)) in l
        and l.lstrip().startswith("rank 1 (host ")]
    assert named, "rank 0 did not name rank 1:\n" + job.tail(80)
    assert "ranks 0,2 have waited for it in %s for " % TENSOR in named[0], named[0]
    for r in (0, 2):
        failed = [l for l in job.lines.get(r, []) if l.startswith("FAILED rank=%d" % r)]
        assert failed and "never submitted %s" % TENSOR in failed[0], job.tail(80)
    with open(report) as f:
        whole = f.read()
    assert "=== end of hora diagnosis" in whole, whole
    for r in range(3):
        assert "== rank %d (host " % r in whole, whole
    return named[0], whole, elapsed


def test_a_rank_asleep_in_python_is_named_with_its_function(tmp_path):
    timeline = str(tmp_path / "t.json")
    line, whole, elapsed = _stalled_job("python", tmp_path, {"HORA_TIMELINE": timeline})
    assert re.search(r"it is in stuck_in_data_loader \(diagnose_worker\.py:\d+\) <- main "
                     r"\(diagnose_worker\.py:\d+\)", line), line
    assert 'in stuck_in_data_loader\n    time.sleep(120)' in whole, whole
    assert "allreduce 'allreduce.grad.7' 4 B, pending for" in whole, whole
    # The same diagnosis in rank 0's timeline, as hora-timeline shows it.
    shown = subprocess.run([harness.PYTHON, os.path.join(harness.REPO, "tools", "timeline",
                                                         "hora-timeline"),
                            "report", timeline, "--no-png"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    assert shown.returncode == 0, shown.stdout
    section = shown.stdout[shown.stdout.find("Diagnoses"):]
    assert section.startswith("Diagnoses") and "it is in stuck_in_data_loader" in section, \
        shown.stdout
    print("\nDIAGNOSE python: job ended after %.1f s; %s" % (elapsed, line))


def test_a_rank_wedged_in_c_is_named_with_its_last_operation(tmp_path):
    line, whole, elapsed = _stalled_job("c", tmp_path)
    assert "it is wedged outside Python: its Python threads did not answer within" in line, line
    assert "its last completed operation was allreduce 'allreduce.warmup' 4 B" in line, line
    assert "hora-control" in whole, whole  # Hora's own threads, by name
    print("\nDIAGNOSE c: job ended after %.1f s; %s" % (elapsed, line))


def test_a_lost_rank_is_diagnosed_with_what_the_survivors_wait_for(tmp_path):
    report = str(tmp_path / "diagnosis.txt")
    # --keep-going: horarun would stop the survivors as soon as rank 1 dies, before they
    # print what this test reads.
    job = harness.run_job(3, "diagnose_worker.py", args=["kill"], timeout=60,
                          extra_env={"HORA_DIAGNOSE_FILE": report},
                          launcher_args=["--keep-going"])
    assert not job.timed_out, job.tail()
    lines = job.lines.get(0, [])
    head = [l for l in lines if "coordinator: diagnosis (rank 1 (host " in l and " is lost: " in l]
    assert head, "no diagnosis of the lost rank in rank 0's log:\n" + job.tail(80)
    for r in (0, 2):
        assert any(re.match(r"^  rank %d \(host [^,]+, pid \d+\): 1 pending \(%s 4 B, "
                            r"pending for [0-9.]+ s\); it is in wait_for_grad "
                            r"\(diagnose_worker\.py:\d+\)" % (r, re.escape(TENSOR)), l)
                   for l in lines), job.tail(80)
    assert any(re.match(r"^  rank 1 \(host [^,]+, pid \d+\) never submitted %s: it is lost"
                        % re.escape(TENSOR), l) for l in lines), job.tail(80)
    for r in (0, 2):
        failed = [l for l in job.lines.get(r, []) if l.startswith("FAILED rank=%d" % r)]
        assert failed and "rank 1 (host " in failed[0] and " is lost: " in failed[0], job.tail()
    with open(report) as f:
        assert "== rank 2 (host " in f.read()


def test_diagnose_on_a_healthy_job_prints_every_rank_and_changes_nothing(tmp_path):
    cmd = [harness.horarun(), "-np", "3", harness.PYTHON, WORKER, "healthy", "400"]
    proc = subprocess.Popen(cmd, cwd=harness.REPO, env=harness.job_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while sum("READY rank=" in l for l in lines) < 3 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert sum("READY rank=" in l for l in lines) == 3, "".join(lines)
        diag = subprocess.run([harness.horarun(), "--diagnose", str(proc.pid)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + rest
    assert diag.returncode == 0, diag.stdout + diag.stderr
    report = diag.stdout
    assert "diagnosis (asked by rank 0 " in report, report
    for r in range(3):
        assert re.search(r"^  rank %d \(host [^,]+, pid \d+\): (nothing pending|\d+ pending "
                         r"\(.*\)); it is in " % r, report, re.M), report
        assert "== rank %d (host " % r in report, report
    assert proc.returncode == 0, text
    for r in range(3):
        assert "DONE rank=%d steps=400" % r in text, text


def test_diagnose_refuses_what_is_not_a_running_horarun():
    bad = subprocess.run([harness.horarun(), "--diagnose", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    assert bad.returncode == 1 and "--diagnose 1: no horarun runs with that process id" in \
        bad.stderr, bad.stderr
    usage = subprocess.run([harness.horarun(), "--diagnose", "abc"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    assert usage.returncode == 2 and "--diagnose 'abc': expected the process id" in \
        usage.stderr, usage.stderr


def test_the_c_api_refuses_bad_diagnosis_arguments():
    import ctypes
    import hora._lib as lib_mod
    lib = lib_mod.lib()
    request = ctypes.c_int64()
    assert lib.hora_diagnosis_wait(-1.0, ctypes.byref(request)) == 1  # INVALID_ARGUMENT
    assert "timeout -1.000000 s is not in [0, 3600]" in lib_mod.last_error()
    assert lib.hora_diagnosis_wait(1.0, None) == 1
    assert "request is NULL" in lib_mod.last_error()
    assert lib.hora_diagnosis_answer(0, b"", b"") == 1
    assert "request 0 is not positive" in lib_mod.last_error()
    assert lib.hora_diagnose() == 2  # FAILED_PRECONDITION: not initialized
    assert "not initialized" in lib_mod.last_error()
