"""hora-timeline: merge the ranks' timeline files and report who the others waited for.

Every rank of a job started with HORA_TIMELINE=FILE (or horarun --timeline-filename FILE, or
hvd.start_timeline(FILE)) writes its own Chrome trace under Horovod's event names: rank 0
FILE itself, rank N > 0 FILE with ".rankN" before ".json" (runtime/timeline.h says what is in
it). This module reads them (a file a killed rank left
without its closing bracket too), merges them into one trace with a process per rank, and
computes the straggler report: per rank, how long the other ranks waited for it in all, its
share of last arrivals, and the slowest tensors and steps, as text, JSON and a PNG picture.

Standard library only, except matplotlib (Debian's python3-matplotlib) for the picture.
"""

import glob
import json
import os
import re

RANK_FILE = re.compile(r"\.rank(\d+)(\.json)?$")
TENSOR_TRACKS = 1000000  # tids from here on are tensors' tracks (runtime/timeline.cc)


def rank_files(path):
    """The ranks' files of base path `path`, sorted by rank: rank 0's is `path` itself (as
    Horovod's timeline), rank N's "t.json" -> t.rankN.json ("t" -> t.rankN)."""
    if path.endswith(".json"):
        pattern = glob.escape(path[:-len(".json")]) + ".rank*.json"
    else:
        pattern = glob.escape(path) + ".rank*"
    found = [(0, path)] if os.path.exists(path) else []
    for f in glob.glob(pattern):
        m = RANK_FILE.search(f)
        if m and int(m.group(1)) > 0:
            found.append((int(m.group(1)), f))
    return [f for _, f in sorted(found)]


def merged_path(path):
    """Where `merge` writes by default: "t.json" -> t.merged.json ("t" -> t.merged.json)."""
    return (path[:-len(".json")] if path.endswith(".json") else path) + ".merged.json"


def load_events(path):
    """The events of one trace file: a JSON array (its closing bracket may be missing) or an
    object with "traceEvents"."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        # A rank that died left the array open: close it after the last complete event.
        cut = text.rstrip().rstrip(",")
        end = cut.rfind("}")
        data = json.loads(cut[:end + 1] + "\n]") if end >= 0 else []
    if isinstance(data, dict):
        data = data.get("traceEvents", [])
    return data


def inputs(path):
    """Events of every rank for `path`: the base path of rank files, or a merged file."""
    files = rank_files(path)
    if not files:
        raise FileNotFoundError("no timeline at %s" % path)
    events = []
    for f in files:
        events.extend(load_events(f))
    return events, files


def merge(path, out=None):
    """Writes every rank's events of base path `path` into one trace (`out`, default
    merged_path(path)),
    timestamps shifted so that the earliest event is at 0 (the same shift for every rank, so
    they stay aligned). Returns (out, number of ranks, number of events)."""
    files = rank_files(path)
    if not files:
        raise FileNotFoundError("no rank files for %s" % path)
    events = []
    for f in files:
        events.extend(load_events(f))
    stamps = [e["ts"] for e in events if "ts" in e]
    base = min(stamps) if stamps else 0
    for e in events:
        if "ts" in e:
            e["ts"] -= base
    out = out or merged_path(path)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms",
                   "otherData": {"tool": "hora-timeline merge", "ranks": len(files),
                                 "time_origin_us": base}}, f)
    return out, len(files), len(events)


def _names(events):
    """(pid, tid) -> track name."""
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e.get("args", {}).get("name", "")
    return names


def covered(spans):
    """The length of the union of (begin, end) intervals."""
    total = 0
    end = None
    for b, e in sorted(spans):
        if end is None or b > end:
            total += e - b
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def analyze(events, top=10):
    """The straggler report as a dict (see report_text for what each part means)."""
    names = _names(events)
    ranks = sorted({e["pid"] for e in events if "pid" in e})
    occurrences = {}  # (set, steady, bucket, name) -> {last_rank, lag_us, waits{rank: us}, ts}
    tensor_time = {}  # name -> [per rank and round: total us]
    steps = {}        # rank -> {step: (ts, dur)}
    phases = {}       # (pid, tid) -> [(ts, end, phase)] of tensor tracks
    diagnoses = []    # rank 0's diagnosis rounds (runtime/timeline.h)
    for e in events:
        if e.get("ph") == "i" and e.get("name") == "diagnosis":
            args = e.get("args", {})
            diagnoses.append({"ts": e.get("ts", 0), "summary": args.get("summary", ""),
                              "report": args.get("report", "")})
            continue
        if e.get("ph") != "X":
            continue
        pid, tid, args = e["pid"], e["tid"], e.get("args", {})
        if e["name"] == "step":
            steps.setdefault(pid, {})[args.get("step", 0)] = (e["ts"], e["dur"])
            continue
        if tid < TENSOR_TRACKS:
            continue  # the buckets' tracks
        phases.setdefault((pid, tid), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
        if not e["name"].startswith("NEGOTIATE_"):
            continue
        name = names.get((pid, tid), "?")
        # Steady buckets count apart from the coordinator's. Their lag is each rank's own wait
        # (the coordinator's plan gives every rank the same one): the largest is the lag.
        key = (args.get("process_set", 0), args.get("steady", 0), args.get("bucket", -1), name)
        o = occurrences.setdefault(key, {"name": name, "last_rank": args.get("last_rank", -1),
                                         "lag_us": args.get("lag_us", 0), "waits": {},
                                         "ts": e["ts"]})
        if args.get("lag_us", 0) > o["lag_us"]:
            o["lag_us"], o["last_rank"] = args.get("lag_us", 0), args.get("last_rank", -1)
        o["waits"][pid] = args.get("wait_us", 0)
        o["starts"] = o.get("starts", {})
        o["starts"][pid] = e["ts"]
        o["ts"] = min(o["ts"], e["ts"])
    # A tensor's time on a rank in one round: from its NEGOTIATE_<OP> to the end of its last phase
    # before the next one on the same track.
    for (pid, tid), evs in phases.items():
        evs.sort()
        name = names.get((pid, tid), "?")
        begin = end_so_far = None
        for ts, end, what in evs:
            if what.startswith("NEGOTIATE_"):
                if begin is not None:
                    tensor_time.setdefault(name, []).append(end_so_far - begin)
                begin = ts
            end_so_far = end
        if begin is not None:
            tensor_time.setdefault(name, []).append(end_so_far - begin)

    # How long the others waited for rank L: on each other rank r, the time covered by the
    # waits [r's submission, + r's wait] of the tensors where L came last (overlapping waits
    # of tensors submitted together count once), summed over r.
    waits = {}  # (last, waiting rank) -> [(begin, end)]
    last_count = {r: 0 for r in ranks}
    counted = 0
    for o in occurrences.values():
        last = o["last_rank"]
        if last < 0 or o["lag_us"] <= 0 or len(o["waits"]) < 2:
            continue
        counted += 1
        last_count[last] = last_count.get(last, 0) + 1
        for r, w in o["waits"].items():
            if r != last and w > 0:
                waits.setdefault((last, r), []).append((o["starts"][r], o["starts"][r] + w))
    waited_for = {r: 0 for r in ranks}
    for (last, r), spans in waits.items():
        waited_for[last] = waited_for.get(last, 0) + covered(spans)
    per_rank = []
    for r in sorted(set(ranks) | set(waited_for)):
        per_rank.append({"rank": r, "waited_for_us": waited_for.get(r, 0),
                         "last_arrivals": last_count.get(r, 0),
                         "last_share": (last_count.get(r, 0) / counted) if counted else 0.0})
    straggler = max(per_rank, key=lambda p: p["waited_for_us"]) if counted else None

    tensors = []
    for name, times in tensor_time.items():
        tensors.append({"name": name, "count": len(times), "mean_us": sum(times) / len(times),
                        "max_us": max(times)})
    tensors.sort(key=lambda t: -t["mean_us"])

    # Steps: the boundaries of the lowest rank that marked steps; each occurrence belongs to
    # the step in which it was first submitted.
    step_rows = []
    if steps:
        ref = steps[min(steps)]
        order = sorted(ref.items())
        for idx, (ts, dur) in order:
            row = {"step": idx, "duration_us": {}, "wait_caused_us": {}}
            for r, s in steps.items():
                if idx in s:
                    row["duration_us"][r] = s[idx][1]
            row["max_us"] = max(row["duration_us"].values())
            step_rows.append(row)
        for (last, r), spans in waits.items():
            for (idx, (ts, dur)), row in zip(order, step_rows):
                inside = [sp for sp in spans if ts <= sp[0] < ts + dur]
                if inside:
                    row["wait_caused_us"][last] = row["wait_caused_us"].get(last, 0) + \
                        covered(inside)
    slowest_steps = sorted(step_rows, key=lambda s: -s["max_us"])[:top]
    return {"ranks": ranks, "per_rank": per_rank, "counted_tensors": counted,
            "straggler": straggler["rank"] if straggler else None,
            "slowest_tensors": tensors[:top], "steps": step_rows,
            "slowest_steps": slowest_steps,
            "start_us": min((e["ts"] for e in events if "ts" in e), default=0),
            "diagnoses": sorted(diagnoses, key=lambda d: d["ts"])}


def _ms(us):
    return "%.3f ms" % (us / 1000.0)


def report_text(summary):
    """The report as text lines."""
    lines = []
    n = summary["counted_tensors"]
    lines.append("Hora timeline report: %d ranks, %d tensor rounds with a last arrival" % (
        len(summary["ranks"]), n))
    lines.append("")
    lines.append("Per rank: how long the other ranks waited for it (their time waiting for "
                 "tensors it submitted last, summed over them), and its share of last arrivals")
    lines.append("  %-6s %16s %14s %8s" % ("rank", "others waited", "last arrivals", "share"))
    for p in summary["per_rank"]:
        lines.append("  %-6d %16s %14d %7.1f%%" % (p["rank"], _ms(p["waited_for_us"]),
                                                 p["last_arrivals"], 100 * p["last_share"]))
    if summary["straggler"] is not None:
        lines.append("")
        lines.append("Straggler: rank %d" % summary["straggler"])
    lines.append("")
    lines.append("Slowest tensors (submission to completion, mean over ranks and rounds)")
    for t in summary["slowest_tensors"]:
        lines.append("  %-40s %12s mean %12s max  x%d" % (t["name"], _ms(t["mean_us"]),
                                                          _ms(t["max_us"]), t["count"]))
    lines.append("")
    if summary["steps"]:
        lines.append("Slowest steps (the slowest rank's time; who made the others wait)")
        for s in summary["slowest_steps"]:
            caused = sorted(s["wait_caused_us"].items(), key=lambda kv: -kv[1])
            who = ", ".join("rank %d %s" % (r, _ms(w)) for r, w in caused[:3]) or "nobody"
            lines.append("  step %-5d %12s   waited for: %s" % (s["step"], _ms(s["max_us"]), who))
    else:
        lines.append("No steps marked (a step starts when the first tensor name is submitted "
                     "again)")
    if summary["diagnoses"]:
        lines.append("")
        lines.append("Diagnoses (what every rank was doing when Hora asked; the whole text is "
                     "in HORA_DIAGNOSE_FILE)")
        for d in summary["diagnoses"]:
            # From the trace's first event, as the trace viewers count.
            lines.append("  at %s: %s" % (_ms(d["ts"] - summary["start_us"]),
                                         d["summary"].replace("\n", "\n    ")))
    return lines


def picture(summary, out):
    """The report as a PNG: per-rank time per step, the wait each rank caused per step, and
    the wait each rank caused in all. Returns False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ranks = summary["ranks"]
    steps = summary["steps"]
    from matplotlib.ticker import MaxNLocator
    fig, axes = plt.subplots(3, 1, figsize=(10, 11))
    for ax in axes[:2]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax = axes[0]
    if steps:
        xs = [s["step"] for s in steps]
        for r in ranks:
            ax.plot(xs, [s["duration_us"].get(r, 0) / 1000.0 for s in steps], marker="o",
                    markersize=3, label="rank %d" % r)
        ax.legend(loc="upper right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no steps marked", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("Time per step, per rank")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax = axes[1]
    if steps:
        xs = [s["step"] for s in steps]
        bottom = [0.0] * len(steps)
        for r in ranks:
            vals = [s["wait_caused_us"].get(r, 0) / 1000.0 for s in steps]
            ax.bar(xs, vals, bottom=bottom, label="rank %d" % r)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.legend(loc="upper right", fontsize="small")
    ax.set_title("Wait each rank caused the others, per step (it came last)")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax = axes[2]
    per = summary["per_rank"]
    bars = ax.bar([str(p["rank"]) for p in per], [p["waited_for_us"] / 1000.0 for p in per],
                  color=["tab:red" if p["rank"] == summary["straggler"] else "tab:blue"
                         for p in per])
    for b, p in zip(bars, per):
        ax.annotate("%.0f%% last" % (100 * p["last_share"]), (b.get_x() + b.get_width() / 2,
                                                               b.get_height()),
                    ha="center", va="bottom", fontsize="small")
    ax.set_title("In all: how long the others waited for each rank")
    ax.set_xlabel("rank")
    ax.set_ylabel("ms")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True
