#!/usr/bin/python3
"""Merges the CSV rows of the allreduce benchmarks into one markdown report.

  combine.py --csv-dir DIR [--out docs/benchmarks.md] [--command "..."] [--notes FILE]

Reads every *.csv in DIR (rows as printed by hora_allreduce_bench, mpi_allreduce_bench and
torch_gloo_allreduce_bench.py with --csv; lines that are not rows are ignored, so raw
launcher output with "[0]<stdout>: " prefixes works too), and writes, per world size, the
side-by-side bandwidth table (nccl-tests columns) with the ratio Hora busbw / torch-gloo
busbw, then the 4-byte latency table with Hora / torch-gloo ratios. The report goes to
stdout and, with --out, to that file.
"""
import argparse
import csv
import datetime
import glob
import io
import os
import platform
import re
import sys

FIELDS = ["kind", "impl", "np", "bytes", "count", "type", "op", "iters", "time_us", "algbw_gbs",
          "busbw_gbs", "p50_us", "p90_us", "min_us", "extra_us", "wrong"]
ROW = re.compile(r"((?:bw|lat),[A-Za-z0-9_.-]+,\d+,.*)$")
ORDER = ["hora", "hora-poll", "hora-mpi", "hora-mpi-poll", "torch-gloo", "mpi-shm", "mpi-tcp"]
LABELS = {
    # The backend is HORA_CPU_OPERATIONS's choice: shm for ranks on one host since it is built.
    "hora": "Hora (%s)" % os.environ.get("HORA_CPU_OPERATIONS", "auto: shm on one host"),
    "hora-poll": "Hora, hora_poll spin",
    "hora-mpi": "Hora (HORA_CPU_OPERATIONS=mpi)",
    "torch-gloo": "torch gloo",
    "mpi-shm": "Open MPI (shm, vader)",
    "mpi-tcp": "Open MPI (TCP lo)",
}
BASELINE = "torch-gloo"


def read_rows(csv_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(csv_dir, "*.csv"))):
        with open(path, errors="replace") as f:
            for line in f:
                m = ROW.search(line.strip())
                if not m:
                    continue
                rec = next(csv.reader(io.StringIO(m.group(1))))
                if len(rec) != len(FIELDS):
                    continue
                rows.append(dict(zip(FIELDS, rec)))
    return rows


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def human_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return "%d %s" % (n // size, unit)
    return "%d B" % n


def fmt_time(us):
    if us is None:
        return "-"
    if us >= 100:
        return "%.0f" % us
    if us >= 10:
        return "%.1f" % us
    return "%.2f" % us


def fmt_bw(x):
    if x is None:
        return "-"
    if x >= 1:
        return "%.2f" % x
    if x >= 0.01:
        return "%.3f" % x
    return "%.4f" % x


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return "%.2fx" % (a / b)


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = ", %.0f GiB RAM" % (kb / (1 << 20))
    except (OSError, ValueError, IndexError):
        pass
    return "%d cores (nproc), %s%s, %s %s" % (os.cpu_count() or 0, model, mem, platform.system(),
                                              platform.release())


def impls_present(rows, kind, np):
    have = {r["impl"] for r in rows if r["kind"] == kind and r["np"] == np}
    return [i for i in ORDER if i in have] + sorted(have - set(ORDER))


def bandwidth_table(rows, np):
    bw = [r for r in rows if r["kind"] == "bw" and r["np"] == np]
    impls = [i for i in impls_present(rows, "bw", np) if not i.endswith("-poll")]
    if not bw:
        return []
    by = {(r["impl"], int(r["bytes"])): r for r in bw}
    sizes = sorted({int(r["bytes"]) for r in bw})
    head = ["size", "count", "type"]
    for i in impls:
        name = LABELS.get(i, i)
        head += ["%s time (us)" % name, "algbw (GB/s)", "busbw (GB/s)"]
    ratio = "hora" in impls and BASELINE in impls
    if ratio:
        head.append("Hora / torch gloo busbw")
    mpi_ratio = "hora-mpi" in impls and "mpi-shm" in impls
    if mpi_ratio:
        head.append("Hora mpi / MPI_Allreduce time")
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---:"] * len(head)) + "|"]
    for s in sizes:
        any_row = next(by[(i, s)] for i in impls if (i, s) in by)
        cells = [human_bytes(s), any_row["count"], "float32"]
        for i in impls:
            r = by.get((i, s))
            if r is None:
                cells += ["-", "-", "-"]
                continue
            wrong = int(fnum(r["wrong"]) or 0)
            t = fmt_time(fnum(r["time_us"])) + (" (WRONG: %d)" % wrong if wrong else "")
            cells += [t, fmt_bw(fnum(r["algbw_gbs"])), fmt_bw(fnum(r["busbw_gbs"]))]
        if ratio:
            # Same bytes and ranks: the busbw ratio is the inverse ratio of the times (exact
            # even where busbw rounds to 0 in the table).
            h, g = by.get(("hora", s)), by.get((BASELINE, s))
            cells.append(fmt_ratio(fnum(g["time_us"]) if g else None,
                                   fnum(h["time_us"]) if h else None))
        if mpi_ratio:
            h, m = by.get(("hora-mpi", s)), by.get(("mpi-shm", s))
            cells.append(fmt_ratio(fnum(h["time_us"]) if h else None,
                                   fnum(m["time_us"]) if m else None))
        out.append("| " + " | ".join(cells) + " |")
    return out


def latency_table(rows):
    lat = [r for r in rows if r["kind"] == "lat"]
    if not lat:
        return []
    out = ["| ranks | implementation | iterations | median (us) | p90 (us) | min (us) | mean (us) "
           "| median vs torch gloo | p90 vs torch gloo |",
           "|---:|:---|---:|---:|---:|---:|---:|---:|---:|"]
    for np in sorted({r["np"] for r in lat}, key=int):
        by = {r["impl"]: r for r in lat if r["np"] == np}
        base = by.get(BASELINE)
        for i in impls_present(rows, "lat", np):
            r = by[i]
            name = LABELS.get(i, i)
            enq = fnum(r["extra_us"])
            if enq is not None:
                name += " (enqueue call alone: median %s us)" % fmt_time(enq)
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                np, name, r["iters"], fmt_time(fnum(r["p50_us"])), fmt_time(fnum(r["p90_us"])),
                fmt_time(fnum(r["min_us"])), fmt_time(fnum(r["time_us"])),
                fmt_ratio(fnum(r["p50_us"]), fnum(base["p50_us"])) if base else "-",
                fmt_ratio(fnum(r["p90_us"]), fnum(base["p90_us"])) if base else "-"))
    return out


def summary_lines(rows):
    """One line per world size: where Hora's busbw stands against torch gloo."""
    out = []
    for np in sorted({r["np"] for r in rows if r["kind"] == "bw"}, key=int):
        h = {int(r["bytes"]): fnum(r["time_us"]) for r in rows
             if r["kind"] == "bw" and r["np"] == np and r["impl"] == "hora"}
        g = {int(r["bytes"]): fnum(r["time_us"]) for r in rows
             if r["kind"] == "bw" and r["np"] == np and r["impl"] == BASELINE}
        common = sorted(set(h) & set(g))
        if not common:
            continue
        ratios = [(s, g[s] / h[s]) for s in common if h[s]]  # = Hora busbw / gloo busbw
        if not ratios:
            continue
        lo = min(ratios, key=lambda x: x[1])
        hi = max(ratios, key=lambda x: x[1])
        big = ratios[-1]
        out.append("- %s ranks: Hora / torch gloo busbw from %.2fx (%s) to %.2fx (%s); at the "
                   "largest size (%s) %.2fx." % (np, lo[1], human_bytes(lo[0]), hi[1],
                                                 human_bytes(hi[0]), human_bytes(big[0]), big[1]))
    lat = [r for r in rows if r["kind"] == "lat"]
    for np in sorted({r["np"] for r in lat}, key=int):
        by = {r["impl"]: r for r in lat if r["np"] == np}
        if "hora" in by and BASELINE in by:
            out.append("- %s ranks: 4-byte latency, Hora median %s us vs torch gloo %s us (%s), "
                       "p90 %s us vs %s us (%s)." % (
                           np, fmt_time(fnum(by["hora"]["p50_us"])),
                           fmt_time(fnum(by[BASELINE]["p50_us"])),
                           fmt_ratio(fnum(by["hora"]["p50_us"]), fnum(by[BASELINE]["p50_us"])),
                           fmt_time(fnum(by["hora"]["p90_us"])),
                           fmt_time(fnum(by[BASELINE]["p90_us"])),
                           fmt_ratio(fnum(by["hora"]["p90_us"]), fnum(by[BASELINE]["p90_us"]))))
    wrong = [r for r in rows if int(fnum(r["wrong"]) or 0) != 0]
    if wrong:
        out.append("- WRONG RESULTS: " + ", ".join("%s np=%s %s" % (r["impl"], r["np"], r["bytes"])
                                                   for r in wrong))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv-dir", required=True)
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--command", default="tools/bench/run_allreduce_bench.sh")
    p.add_argument("--notes", help="a markdown file appended under 'Notes on this run'")
    p.add_argument("--preamble", help="a markdown file placed before the tables")
    p.add_argument("--appendix", help="a markdown file appended at the end (e.g. findings)")
    a = p.parse_args(argv)
    rows = read_rows(a.csv_dir)
    if not rows:
        sys.stderr.write("combine.py: no benchmark rows in %s/*.csv\n" % a.csv_dir)
        return 1
    lines = ["# Allreduce benchmarks", ""]
    lines += [
        "Allreduce of float32 sum, in place, through each implementation's public API, all ranks on",
        "one machine, measured side by side in one run. Columns as in nccl-tests: time per",
        "operation (us, slowest rank), algbw = bytes / time, busbw = algbw * 2(n-1)/n, in GB/s",
        "(1e9 B/s). Each size is filled with real values, checked once, warmed up, then timed over",
        "an iteration count chosen so that the size takes about the target time. Latency: a 4-byte",
        "allreduce from call (for Hora: enqueue) to done, per iteration, median and p90 of the",
        "slowest rank.",
        "",
        "- Hora: `tools/bench/hora_allreduce_bench` under `tools/launcher/horarun`, through",
        "  `hora.h` (enqueue, the data plane `HORA_CPU_OPERATIONS=auto` picks: shm for the",
        "  ranks of one host; an allreduce planned the same way 3 times runs on the steady",
        "  path without asking the coordinator; `hora_wait`).",
        "- torch gloo: `torch.distributed` 'gloo' backend (Debian's torch 1.13),",
        "  `tools/bench/torch_gloo_allreduce_bench.py`, GLOO_SOCKET_IFNAME=lo.",
        "- Open MPI 4.1.4 `MPI_Allreduce` (`tools/bench/mpi_allreduce_bench`): its default",
        "  (shared memory, vader) and TCP over loopback (`--mca btl tcp,self --mca",
        "  btl_tcp_if_include lo --mca oob_tcp_if_include lo`), since Gloo is TCP too.",
        "",
        "- Date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip(),
        "- Machine: %s" % machine(),
        "- Command: `%s`" % a.command,
        "",
    ]
    if a.preamble and os.path.exists(a.preamble):
        with open(a.preamble) as f:
            lines += [f.read().rstrip(), ""]
    summary = summary_lines(rows)
    if summary:
        lines += ["## Summary", ""] + summary + [""]
    for np in sorted({r["np"] for r in rows if r["kind"] == "bw"}, key=int):
        lines += ["## Bandwidth, %s ranks" % np, ""] + bandwidth_table(rows, np) + [""]
    lat = latency_table(rows)
    if lat:
        lines += ["## Latency of a 4-byte allreduce", ""] + lat + [""]
    if a.notes and os.path.exists(a.notes):
        with open(a.notes) as f:
            lines += ["## Notes on this run", "", f.read().rstrip(), ""]
    if a.appendix and os.path.exists(a.appendix):
        with open(a.appendix) as f:
            lines += [f.read().rstrip(), ""]
    text = "\n".join(lines)
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
