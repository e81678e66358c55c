"""hora_timeline on made-up rank files: rank file names, a file left open by a dead rank,
merge (a process per rank, one shift for all), and the report's arithmetic."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hora_timeline  # noqa: E402

T = hora_timeline.TENSOR_TRACKS


def rank_events(rank, waits, last, step_ts):
    """Two rounds of tensor "w" (bucket 0 and 1) and steps starting at step_ts."""
    ev = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
           "args": {"name": "rank %d" % rank}},
          {"name": "thread_name", "ph": "M", "pid": rank, "tid": T, "args": {"name": "w"}}]
    for bucket in (0, 1):
        ts = 1000 + bucket * 10000
        ev.append({"name": "NEGOTIATE_ALLREDUCE", "ph": "X", "pid": rank, "tid": T, "ts": ts,
                   "dur": waits[bucket] + 10,
                   "args": {"last_rank": last[bucket], "lag_us": max(waits), "bucket": bucket,
                            "wait_us": waits[bucket], "process_set": 0,
                            "collective": "allreduce"}})
        ev.append({"name": "ALLREDUCE", "ph": "X", "pid": rank, "tid": T,
                   "ts": ts + waits[bucket] + 10, "dur": 100, "args": {"bucket": bucket}})
    for i, s in enumerate(step_ts):
        ev.append({"name": "step", "ph": "X", "pid": rank, "tid": 0, "ts": s, "dur": 10000,
                   "args": {"step": i}})
    return ev


def write_ranks(tmp_path, open_last=False):
    base = str(tmp_path / "t.json")
    # Round 0: rank 2 came last (0 waited 500, 1 waited 300); round 1: rank 0 (1 waited 50).
    per_rank = {0: [500, 0], 1: [300, 50], 2: [0, 20]}
    for r, waits in per_rank.items():
        events = rank_events(r, waits, [2, 0], [500, 10500])
        text = "[\n" + ",\n".join(json.dumps(e) for e in events)
        text += ",\n" if (open_last and r == 2) else "\n]\n"
        name = "t.json" if r == 0 else "t.rank%d.json" % r
        with open(str(tmp_path / name), "w") as f:
            f.write(text)
    return base


def test_rank_files_sorted_by_rank(tmp_path):
    """Rank 0's file is the path itself (Horovod's place for it); a stray .rank0 is not."""
    for r in (10, 2, 0):
        (tmp_path / ("t.rank%d.json" % r)).write_text("[]")
    (tmp_path / "t.json").write_text("[]")
    files = hora_timeline.rank_files(str(tmp_path / "t.json"))
    assert [os.path.basename(f) for f in files] == ["t.json", "t.rank2.json", "t.rank10.json"]
    (tmp_path / "u").write_text("[]")
    (tmp_path / "u.rank1").write_text("[]")
    assert [os.path.basename(f) for f in hora_timeline.rank_files(str(tmp_path / "u"))] == [
        "u", "u.rank1"]
    assert hora_timeline.rank_files(str(tmp_path / "none.json")) == []


def test_a_file_left_open_is_read(tmp_path):
    base = write_ranks(tmp_path, open_last=True)
    events = hora_timeline.load_events(base[:-5] + ".rank2.json")
    assert any(e["name"] == "step" for e in events)


def test_merge_one_process_per_rank_aligned(tmp_path):
    base = write_ranks(tmp_path, open_last=True)
    out, ranks, n = hora_timeline.merge(base)
    assert out == str(tmp_path / "t.merged.json") and ranks == 3
    with open(out) as f:
        merged = json.load(f)
    events = merged["traceEvents"]
    assert len(events) == n
    assert {e["pid"] for e in events} == {0, 1, 2}
    assert min(e["ts"] for e in events if "ts" in e) == 0
    first = [e["ts"] for e in events
             if e["name"] == "NEGOTIATE_ALLREDUCE" and e["args"]["bucket"] == 0]
    assert first == [500, 500, 500]  # the same shift for every rank


def test_report_names_who_the_others_waited_for(tmp_path):
    base = write_ranks(tmp_path)
    events, files = hora_timeline.inputs(base)
    assert len(files) == 3
    s = hora_timeline.analyze(events)
    per = {p["rank"]: p for p in s["per_rank"]}
    assert per[2]["waited_for_us"] == 800 and per[2]["last_arrivals"] == 1
    assert per[0]["waited_for_us"] == 70 and per[0]["last_arrivals"] == 1
    assert per[1]["waited_for_us"] == 0 and per[1]["last_share"] == 0
    assert s["straggler"] == 2
    assert [row["wait_caused_us"] for row in s["steps"]] == [{2: 800}, {0: 70}]
    assert s["slowest_tensors"][0]["name"] == "w"
    assert s["slowest_tensors"][0]["count"] == 6
    text = "\n".join(hora_timeline.report_text(s))
    assert "Straggler: rank 2" in text


def test_report_shows_the_diagnoses_in_time_order(tmp_path):
    base = write_ranks(tmp_path)
    events, _ = hora_timeline.inputs(base)
    for ts, what in ((9000, "diagnosis (stall timeout):\n  rank 1 never submitted 'w'"),
                     (4000, "diagnosis (stall warning):\n  rank 1 is in load")):
        events.append({"name": "diagnosis", "ph": "i", "s": "g", "pid": 0, "tid": 999999,
                       "ts": ts, "args": {"summary": what, "report": "whole"}})
    s = hora_timeline.analyze(events)
    assert [d["ts"] for d in s["diagnoses"]] == [4000, 9000]
    text = "\n".join(hora_timeline.report_text(s))
    # From the first event (ts 500): 3.5 ms and 8.5 ms.
    assert "  at 3.500 ms: diagnosis (stall warning):\n      rank 1 is in load" in text, text
    assert "  at 8.500 ms: diagnosis (stall timeout):\n      rank 1 never submitted 'w'" in text
    assert "Diagnoses" not in "\n".join(hora_timeline.report_text(hora_timeline.analyze(
        hora_timeline.inputs(base)[0])))


def test_cli_report_json_and_picture(tmp_path):
    base = write_ranks(tmp_path)
    png = str(tmp_path / "r.png")
    tool = os.path.join(HERE, "hora-timeline")
    p = subprocess.run([sys.executable, tool, "report", base, "--json", "--png", png],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["straggler"] == 2
    try:
        import matplotlib  # noqa: F401
        assert os.path.getsize(png) > 1000
    except ImportError:
        assert "matplotlib is missing" in p.stderr
    missing = subprocess.run([sys.executable, tool, "report", str(tmp_path / "none.json")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
    assert missing.returncode == 1 and "no timeline" in missing.stderr
