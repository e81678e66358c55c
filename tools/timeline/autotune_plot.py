"""Reads the autotuner's CSV log (HORA_AUTOTUNE_LOG, written by rank 0's coordinator) and
draws it: one bar per trial, its score in MB/s, labelled with its settings, the chosen trial
highlighted. Format (coordinator/autotune_log.h):

    trial,stage,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s,samples,chosen

Standard library only, except matplotlib for the picture.
"""

import csv

HEADER = ["trial", "stage", "fusion_threshold_bytes", "cycle_time_ms", "score_bytes_per_s",
          "samples", "chosen"]


def read_log(path):
    """The trials as dicts with numbers; ValueError naming the file and line when the log is
    not the autotuner's (wrong header, a bad field, more than one chosen row)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != HEADER:
        raise ValueError("%s: not an autotune log: the header must be %s" % (path, ",".join(HEADER)))
    trials = []
    for line, r in enumerate(rows[1:], start=2):
        if len(r) != len(HEADER):
            raise ValueError("%s line %d: %d fields, expected %d" % (path, line, len(r), len(HEADER)))
        try:
            trials.append({"trial": int(r[0]), "stage": int(r[1]),
                           "fusion_threshold_bytes": int(r[2]), "cycle_time_ms": float(r[3]),
                           "score_bytes_per_s": float(r[4]), "samples": int(r[5]),
                           "chosen": r[6] == "1"})
        except ValueError as e:
            raise ValueError("%s line %d: %s" % (path, line, e))
    if sum(t["chosen"] for t in trials) > 1:
        raise ValueError("%s: more than one chosen row" % path)
    return trials


def label(t):
    mib = t["fusion_threshold_bytes"] / float(1 << 20)
    return "%g MiB\n%g ms" % (mib, t["cycle_time_ms"])


def plot(trials, png):
    """Writes the picture; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(trials) + 2), 4))
    xs = list(range(len(trials)))
    colors = ["#d62728" if t["chosen"] else ("#1f77b4" if t["stage"] == 1 else "#2ca02c")
              for t in trials]
    ax.bar(xs, [t["score_bytes_per_s"] / 1e6 for t in trials], color=colors)
    ax.set_xticks(xs)
    ax.set_xticklabels([label(t) for t in trials], fontsize=8)
    ax.set_ylabel("allreduce throughput (MB/s)")
    ax.set_title("Hora autotune: blue = fusion threshold sweep, green = cycle time sweep, "
                 "red = chosen", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return True


def summary(trials):
    chosen = [t for t in trials if t["chosen"]]
    if not chosen:
        return "%d trials, none chosen yet (the search is still running)" % len(trials)
    c = chosen[0]
    return "%d trials; chosen: fusion threshold %d bytes, cycle time %g ms (%.1f MB/s)" % (
        len(trials), c["fusion_threshold_bytes"], c["cycle_time_ms"], c["score_bytes_per_s"] / 1e6)
