"""The timeline in real jobs: horarun --timeline-filename at 2 and 3 ranks with one rank made
late (a sleep before its submissions), then hora-timeline merge and report.

Checks: every rank's file (rank 0's at the path given, as Horovod's) is valid JSON with
events of every kind of tensor under Horovod's names, each tensor's phases in order; the plans name the late rank as the last arrival; the report names it the
straggler and draws the picture; the timeline stopped and started again mid-job holds only
what came after. No time is asserted.
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.getcwd()
sys.path.insert(0, os.path.join(REPO, "tools", "timeline"))
import hora_timeline  # noqa: E402

JOB = "tests/timeline/timeline_job"
HORARUN = ["/usr/bin/python3", "tools/launcher/horarun"]
TOOL = ["/usr/bin/python3", "tools/timeline/hora-timeline"]
# A round on a tensor's track, in order: NEGOTIATE_<OP>, the <OP> span with the rest nested
# in it (QUEUE, the copies, <BACKEND>_<OP>); the index of each in a round.
OPS = {"ALLREDUCE", "BROADCAST", "ALLGATHER", "REDUCESCATTER", "ALLTOALL", "BARRIER", "SEND",
       "RECV"}
NESTED = ["QUEUE", "MEMCPY_IN_FUSION_BUFFER", None, "MEMCPY_OUT_FUSION_BUFFER"]  # None: the call
KINDS = {"allreduce", "allreduce (inline)", "broadcast", "allgather", "reducescatter",
         "alltoall", "barrier", "send"}


def job_binary():
    return JOB if os.access(JOB, os.X_OK) else os.path.join("bazel-bin", JOB)


def run_job(tmp_path, np, late):
    base = str(tmp_path / "trace.json")
    second = str(tmp_path / "second.json")
    cmd = HORARUN + ["-np", str(np), "--timeline-filename", base, job_binary(), str(late),
                     "40", second]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                       universal_newlines=True)
    assert p.returncode == 0, p.stdout
    return base, second


def tracks(events):
    """The tensors' tracks: (pid, tid) -> tensor name."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"
            and e["tid"] >= hora_timeline.TENSOR_TRACKS}


def phase(name):
    """A tensor-track event's place in its round: 0 NEGOTIATE_<OP>, 1 <OP>, 2.. NESTED."""
    if name.startswith("NEGOTIATE_"):
        assert name[len("NEGOTIATE_"):] in OPS, name
        return 0
    if name in OPS:
        return 1
    if name in NESTED:
        return 2 + NESTED.index(name)
    assert name.rsplit("_", 1)[-1] in OPS, name  # <BACKEND>_<OP>
    return 2 + NESTED.index(None)


def check_phase_order(events):
    """On every tensor track: rounds of NEGOTIATE_<OP>, then <OP> spanning the rest, each
    phase after the one before it."""
    by_track = {}
    for e in events:
        if e.get("ph") in ("X", "i") and e["tid"] >= hora_timeline.TENSOR_TRACKS:
            by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    assert by_track
    for key, evs in by_track.items():
        evs.sort(key=lambda e: (e["ts"], phase(e["name"])))
        at, span = -1, None
        for e in evs:
            i = phase(e["name"])
            assert e["ph"] == "X", e
            if i == 0:
                at, span = 0, None
                continue
            assert at >= 0 and i > at, (key, [x["name"] for x in evs])
            at = i
            if i == 1:
                span = e
            else:  # nested in the <OP> span
                assert span is not None, (key, [x["name"] for x in evs])
                assert span["ts"] <= e["ts"] and e["ts"] + e["dur"] <= span["ts"] + span["dur"]


@pytest.mark.parametrize("np,late", [(2, 0), (3, 2)])
def test_timeline_job(tmp_path, np, late):
    base, second = run_job(tmp_path, np, late)
    files = hora_timeline.rank_files(base)
    # Rank 0's file is the one named (where Horovod's timeline is), the others' .rankN.
    assert [os.path.basename(f) for f in files] == ["trace.json"] + [
        "trace.rank%d.json" % r for r in range(1, np)]
    for r, f in enumerate(files):
        with open(f) as fh:
            events = json.load(fh)  # strict: the file was closed properly
        assert {e["pid"] for e in events} == {r}
        names = {e["name"] for e in events if e.get("ph") == "X"}
        kinds = {e["args"]["collective"] for e in events
                 if e.get("ph") == "X" and e["name"] in OPS}
        assert KINDS <= kinds, KINDS - kinds
        assert {"NEGOTIATE_" + op for op in OPS} <= names, names
        assert "step" in names
        assert not any(e["name"] == "CYCLE_START" for e in events)  # not asked for
        check_phase_order(events)
        t = tracks(events)
        assert not any(n.startswith("untraced.") or n.startswith("second.") for n in t.values())
        assert "hora.barrier.5" in t.values() and "hora.barrier.6" not in t.values()
        lasts = {}
        for e in events:
            if not e["name"].startswith("NEGOTIATE_"):
                continue
            assert e["args"]["last_rank"] in range(np)
            assert e["args"]["lag_us"] >= e["args"]["wait_us"] >= 0
            kind = e["args"]["collective"]
            if kind not in ("barrier", "send"):
                lasts.setdefault(e["args"]["last_rank"], 0)
                lasts[e["args"]["last_rank"]] += 1
        # The late rank sleeps 40 ms before each step; on a loaded machine another rank can
        # still be busy with the step before that long, so it is the last arrival of most
        # negotiations, not necessarily all (seen: {0: 48, 1: 6} at load 4).
        assert lasts.get(late, 0) * 3 >= 2 * sum(lasts.values()), lasts

    out = str(tmp_path / "merged.json")
    p = subprocess.run(TOOL + ["merge", base, "-o", out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    assert p.returncode == 0, p.stdout
    with open(out) as fh:
        merged = json.load(fh)
    assert {e["pid"] for e in merged["traceEvents"]} == set(range(np))
    assert min(e["ts"] for e in merged["traceEvents"] if "ts" in e) == 0

    png = str(tmp_path / "report.png")
    p = subprocess.run(TOOL + ["report", out, "--json", "--png", png], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["straggler"] == late, summary["per_rank"]
    per = {x["rank"]: x for x in summary["per_rank"]}
    assert per[late]["last_share"] > 0.5
    assert per[late]["waited_for_us"] == max(x["waited_for_us"] for x in per.values())
    assert len(summary["steps"]) >= 4
    try:
        import matplotlib  # noqa: F401
        assert os.path.getsize(png) > 0
    except ImportError:
        assert "matplotlib is missing" in p.stderr
    text = subprocess.run(TOOL + ["report", base, "--no-png"], stdout=subprocess.PIPE,
                          universal_newlines=True).stdout
    assert "Straggler: rank %d" % late in text

    # Stopped, then started again mid-job: the second timeline holds the second step alone.
    for r, f in enumerate(hora_timeline.rank_files(second)):
        with open(f) as fh:
            events = json.load(fh)
        names = set(tracks(events).values())
        user = {n for n in names if not n.startswith("hora.")}
        internal = names - user  # barriers and transfers are numbered: the 8th of each
        assert user and all(n.startswith("second.") for n in user), names
        assert internal and all(n.endswith(".7") for n in internal), internal
        # Started with mark_cycles: a CYCLE_START per plan received, on the steps track.
        cycles = [e for e in events if e["name"] == "CYCLE_START"]
        assert cycles and all(e["ph"] == "i" and e["tid"] == 0 for e in cycles), cycles[:3]


@pytest.mark.parametrize("steady", ["on", "off"])
def test_report_counts_every_late_step_on_either_path(tmp_path, steady):
    """The late rank's steps are each counted once, also on the steady path (whose bucket
    numbers restart at 0: keyed with the coordinator's, half the steps merged into others and
    their waits were lost)."""
    base = str(tmp_path / "late.json")
    env = dict(os.environ, HORA_STEADY=steady)
    p = subprocess.run(HORARUN + ["-np", "2", "--timeline-filename", base, "/usr/bin/python3",
                                  "tests/timeline/late_rank_worker.py"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                       universal_newlines=True, env=env)
    assert p.returncode == 0, p.stdout
    fast = [int(l.split("fast=")[1]) for l in p.stdout.splitlines() if "STEADY fast=" in l]
    assert len(fast) == 2 and (min(fast) >= 6 if steady == "on" else max(fast) == 0), fast
    r = subprocess.run(TOOL + ["report", base, "--json", "--no-png"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["straggler"] == 1, summary["per_rank"]
    # 12 steps with rank 1 late by 40 ms: each counted once (rank 0 would have to be 40 ms
    # late itself for one not to count; the steady path's first steps go the normal way).
    assert summary["counted_tensors"] >= 11, summary
    # The wait the report gives the late rank is at least what it slept (an uncounted or
    # merged step is one sleep less; 10 % for the clocks' alignment). Not more than half as
    # much again: a loaded machine delays the late rank beyond its sleep (546 ms reported
    # against 485 slept in one CI run), so how close it comes is measured (docs/timeline.md,
    # issue 31's 10 %), not asserted.
    slept = [int(l.split("us=")[1]) for l in p.stdout.splitlines() if "SLEPT us=" in l]
    waited = summary["per_rank"][1]["waited_for_us"]
    expected = slept[0] * summary["counted_tensors"] / 12.0
    assert 0.9 * expected <= waited <= 1.5 * expected, (waited, slept,
                                                         summary["counted_tensors"])


def test_torch_start_and_stop_timeline_mid_job(tmp_path):
    base = str(tmp_path / "torch.json")
    p = subprocess.run(HORARUN + ["-np", "2", "/usr/bin/python3",
                                  "tests/timeline/torch_timeline_worker.py", base],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                       universal_newlines=True)
    assert p.returncode == 0, p.stdout
    files = hora_timeline.rank_files(base)
    assert len(files) == 2
    for f in files:
        with open(f) as fh:
            events = json.load(fh)
        names = set(tracks(events).values())
        assert names == {"allreduce.during.%d" % i for i in range(3)}, names
        assert sum(e["name"] == "NEGOTIATE_ALLREDUCE" for e in events) == 9
        check_phase_order(events)


def test_horovod_timeline_variables_and_names(tmp_path):
    """HOROVOD_TIMELINE and HOROVOD_TIMELINE_MARK_CYCLES set in the script before init, as
    Horovod's own timeline test does: rank 0's file is at the path given and has Horovod's
    names (the tensor's "allreduce.<name>", NEGOTIATE_ALLREDUCE, CYCLE_START) while open."""
    path = str(tmp_path / "temp_test_file")
    p = subprocess.run(HORARUN + ["-np", "2", "/usr/bin/python3",
                                  "tests/timeline/horovod_timeline_worker.py", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                       universal_newlines=True)
    assert p.returncode == 0 and p.stdout.count("PASS") == 2, p.stdout
    assert os.path.exists(path + ".rank1")
    with open(path) as fh:
        events = json.load(fh)  # closed at shutdown
    assert {e["pid"] for e in events} == {0}
    check_phase_order(events)
