#!/bin/bash
# Training-side benchmarks of hora.torch against torch DDP (gloo), and the report
# docs/benchmarks-training.md:
#   1. grad_sync_bench.py at -np 2: ResNet-50- and BERT-base-shaped gradients, Hora's
#      DistributedOptimizer hooks vs DDP (25 MB buckets, with/without gradient_as_bucket_view)
#      vs one flat allreduce (gloo and hora), side by side in one job;
#   2. train_step_bench.py at -np 2: examples/gpt_char_lm.py's step time, Hora vs DDP;
#   3. grad_sync_bench.py at -np 4, ResNet-50 only (NP4=0 skips it);
#   4. with SWEEP=1, Hora's knobs (fusion threshold, cycle time, inline threshold) on the
#      ResNet-50 list, one job per setting.
#
#   tools/bench/run_training_bench.sh                 # ~6 min on 2 cores
#   PARTS=sweep tools/bench/run_training_bench.sh     # only the knob sweep (~5 min); the
#                                                     # report keeps the other parts' results
#
# Environment: PARTS (default "np2 train np4"; any of np2 (= resnet bert) resnet bert train
# np4 sweep), OUT (results
# folder, default /tmp/hora-training-bench; a part's old results there are replaced, the
# others' kept for the report), REPORT (default docs/benchmarks-training.md; REPORT= to skip),
# GS_STEPS (12), BERT_STEPS (6), TS_STEPS (30), PYTHON (/usr/bin/python3),
# HORA_BENCH_EXTRA_X (extra NAME=VALUE pairs for horarun -x, e.g. Hora knobs).
# The machine is shared: compare the ratios within one run, not times across runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-/tmp/hora-training-bench}
REPORT=${REPORT-docs/benchmarks-training.md}
GS_STEPS=${GS_STEPS:-12}
BERT_STEPS=${BERT_STEPS:-6}
TS_STEPS=${TS_STEPS:-30}
PARTS=" ${PARTS:-np2 train np4} "
mkdir -p "$OUT"
has() { [[ "$PARTS" == *" $1 "* ]]; }
has np2 && rm -f "$OUT"/grad_sync_np2*
has resnet && rm -f "$OUT"/grad_sync_np2_resnet50.*
has bert && rm -f "$OUT"/grad_sync_np2_bert.*
has train && rm -f "$OUT"/train_step_np2.*
has np4 && rm -f "$OUT"/grad_sync_np4.*
has sweep && rm -f "$OUT"/sweep_*

echo "== building libhora.so" >&2
bazel build //bindings/c:libhora.so >&2
LIB=$ROOT/bazel-bin/bindings/c/libhora.so
export PYTHONPATH=$ROOT/bindings/python${PYTHONPATH:+:$PYTHONPATH}
export HORA_LIBRARY=$LIB

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

date -u +"%Y-%m-%d %H:%M UTC" > "$OUT/date.txt"
uptime > "$OUT/uptime_start.txt"
T0=$(date +%s)

# run NAME NP [horarun args...] -- SCRIPT [args...]: one job, rank 0's output to NAME.log,
# the command line to NAME.cmd.
run() {
  local name=$1 np=$2
  shift 2
  local xargs=()
  while [ "$1" != "--" ]; do xargs+=("$1"); shift; done
  shift
  local port
  port=$(free_port)
  local cmd=("$PYTHON" tools/launcher/horarun -np "$np" -x MASTER_PORT="$port" "${xargs[@]}"
             "$PYTHON" "$@")
  echo "PYTHONPATH=bindings/python HORA_LIBRARY=\$PWD/bazel-bin/bindings/c/libhora.so ${cmd[*]}" \
    | sed "s|$ROOT/||g; s|MASTER_PORT=$port|MASTER_PORT=<free port>|" > "$OUT/$name.cmd"
  echo "== $name ($(uptime | sed 's/.*load/load/'))" >&2
  local t=$(date +%s)
  if ! "${cmd[@]}" > "$OUT/$name.all.log" 2>&1; then
    echo "FAILED: $name; see $OUT/$name.all.log" >&2
    tail -20 "$OUT/$name.all.log" >&2
    return 1
  fi
  grep '^\[0\]<stdout>' "$OUT/$name.all.log" | sed 's/^\[0\]<stdout>: //' | tee "$OUT/$name.log" >&2
  echo "   ($(( $(date +%s) - t )) s)" >&2
}

EXTRA=()
for x in ${HORA_BENCH_EXTRA_X:-}; do EXTRA+=(-x "$x"); done

ALL=backward,hora,hora_g1,hora_bucket,hora_bucket64,ddp,ddp_view,flat_gloo,flat_hora
FEW=backward,hora,hora_bucket64,ddp,ddp_view,flat_gloo,flat_hora
if has np2 || has resnet; then
  # ResNet-50: every model stays alive; 3 rounds over the methods, each round starting a
  # method with one untimed step.
  run grad_sync_np2_resnet50 2 "${EXTRA[@]}" -- tools/bench/grad_sync_bench.py \
    --models resnet50 --methods "$ALL" --steps "$GS_STEPS" --rounds 3 --warmup 2 \
    --json "$OUT/grad_sync_np2_resnet50.json"
fi
if has np2 || has bert; then
  # BERT-base: 418 MiB models are rebuilt per round (2 rounds); fewer methods, no probe.
  run grad_sync_np2_bert 2 "${EXTRA[@]}" -- tools/bench/grad_sync_bench.py \
    --models bert-base --methods "$FEW" --bert-steps "$BERT_STEPS" --bert-rounds 2 \
    --warmup 2 --json "$OUT/grad_sync_np2_bert.json"
fi
if has train; then
  run train_step_np2 2 "${EXTRA[@]}" -- tools/bench/train_step_bench.py --steps "$TS_STEPS" \
    --warmup 5 --json "$OUT/train_step_np2.json"
fi
if has np4; then
  run grad_sync_np4 4 "${EXTRA[@]}" -- tools/bench/grad_sync_bench.py --models resnet50 \
    --methods "$FEW" --steps 10 --rounds 2 --warmup 2 --json "$OUT/grad_sync_np4.json"
fi
if has sweep; then
  sweep() {
    local name=$1; shift
    run "sweep_$name" 2 "$@" -- tools/bench/grad_sync_bench.py --models resnet50 \
      --methods hora,hora_g1,flat_hora --steps 8 --rounds 2 --warmup 2 --probe \
      --label "$name" --json "$OUT/sweep_$name.json"
  }
  sweep default
  sweep inline0 -x HORA_INLINE_THRESHOLD=0
  sweep cycle5 -x HORA_CYCLE_TIME_MS=5
  sweep cycle10_inline0 -x HORA_CYCLE_TIME_MS=10 -x HORA_INLINE_THRESHOLD=0
  sweep fusion16 -x HORA_FUSION_THRESHOLD=16777216
  sweep fusion32 -x HORA_FUSION_THRESHOLD=33554432
  sweep fusion0 -x HORA_FUSION_THRESHOLD=0
fi
uptime > "$OUT/uptime_end.txt"
echo $(( $(date +%s) - T0 )) > "$OUT/seconds.txt"
echo "== done in $(cat "$OUT/seconds.txt") s; results in $OUT" >&2

[ -n "$REPORT" ] || exit 0
"$PYTHON" - "$OUT" "$REPORT" <<'EOF'
import glob, json, os, platform, subprocess, sys

out, report = sys.argv[1], sys.argv[2]
MARK = "<!-- findings: kept by run_training_bench.sh -->"

def read(name, default=""):
    p = os.path.join(out, name)
    return open(p).read().strip() if os.path.exists(p) else default

def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None

cpu = "unknown"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
try:
    commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
except Exception:
    commit = "?"
kept = ""
if os.path.exists(report):
    text = open(report).read()
    if MARK in text:
        kept = text[text.index(MARK):]

L = []
w = L.append
w("# Training benchmarks: hora.torch vs torch DDP (gloo)")
w("")
w("Generated by `tools/bench/run_training_bench.sh` (do not edit the measured part by hand; "
  "the findings section at the end is kept across runs).")
w("")
w("- Date: %s; commit %s" % (read("date.txt"), commit))
w("- Machine: %d cores (`nproc`), %s; %s; torch %s" % (
    os.cpu_count(), cpu, platform.platform(), subprocess.check_output(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], text=True).strip()))
w("- Load: start `%s`; end `%s`; the whole run took %s s" % (
    read("uptime_start.txt"), read("uptime_end.txt"), read("seconds.txt", "?")))
w("- The machine is shared with other builds: compare ratios within one table only.")
w("")

METHOD_DOC = {
    "backward": "backward alone, no communication",
    "hora": "Hora DistributedOptimizer hooks: backward + synchronize()",
    "hora_g1": "the same with groups=1 (all allreduces submitted at the end of backward)",
    "hora_bucket": "prototype (not hora.torch): grads as views in 25 MiB flat buckets, one hvd.allreduce_async_ per bucket from hooks",
    "hora_bucket64": "the same prototype with 64 MiB buckets",
    "ddp": "DDP gloo, bucket_cap_mb=25",
    "ddp_view": "DDP gloo, bucket_cap_mb=25, gradient_as_bucket_view=True",
    "flat_gloo": "one torch.distributed.all_reduce of a flat tensor of all gradients",
    "flat_hora": "one hvd.allreduce_ of the same flat tensor",
}

def grad_table(res):
    st = res["stats_ms"]
    bwd = st.get("backward", {}).get("median", 0.0)
    w("| method | median ms | p90 ms | sync ms (median - backward) | steps | what |")
    w("|---|---|---|---|---|---|")
    for m, s in st.items():
        sync = "-" if m == "backward" else "%.1f" % (
            s["median"] if m.startswith("flat") else s["median"] - bwd)
        w("| %s | %.1f | %.1f | %s | %d | %s |" % (m, s["median"], s["p90"], sync, s["n"],
                                                  METHOD_DOC.get(m, "")))
    w("")
    pairs = [("hora", "ddp"), ("hora", "ddp_view"), ("hora", "flat_gloo"), ("hora", "flat_hora"),
             ("hora_g1", "ddp"), ("hora_bucket", "ddp"), ("hora_bucket64", "ddp"),
             ("hora_bucket64", "flat_hora"), ("flat_hora", "flat_gloo"), ("ddp", "flat_gloo")]
    cells = ["%s / %s = **%.2f**" % (a, b, st[a]["median"] / st[b]["median"])
             for a, b in pairs if a in st and b in st]
    w("Ratios of medians: " + "; ".join(cells) + ".")
    w("")
    for m, pr in sorted(res.get("probe", {}).items()):
        bs = pr["buckets"]
        sizes = sorted((b["bytes"] for b in bs), reverse=True)
        w("Bucket probe, %s (a separate run with a thread polling every handle, which slows "
          "it; only the grouping is meaningful): %d tensors completed in >= %d groups, %d of "
          "them single tensors; largest groups %s MiB." % (
              m, sum(b["tensors"] for b in bs), len(bs),
              sum(1 for b in bs if b["tensors"] == 1),
              ", ".join("%.1f" % (x / 2**20) for x in sizes[:5])))
        w("")

for name, title in (("grad_sync_np2_resnet50", "Gradient synchronization, ResNet-50, 2 ranks"),
                    ("grad_sync_np2_bert", "Gradient synchronization, BERT-base, 2 ranks"),
                    ("grad_sync_np4", "Gradient synchronization, ResNet-50, 4 ranks (2 cores: oversubscribed)")):
    data = load(name + ".json")
    if not data:
        continue
    w("## %s" % title)
    w("")
    w("```")
    w(read(name + ".cmd"))
    w("```")
    w("")
    w("%d ranks, %d torch thread(s) each. A step: barrier (not timed), then backward (+ "
      "synchronize for Hora); the slowest rank's time counts; methods interleaved in rounds, "
      "each round starting a method with one untimed step."
      % (data["size"], data["threads"]))
    w("")
    for model, res in data["models"].items():
        w("### %s: %d tensors, %.2f M float32 (%.1f MiB)" % (
            model, res["tensors"], res["numel"] / 1e6, res["numel"] * 4 / 2**20))
        w("")
        grad_table(res)

ts = load("train_step_np2.json")
if ts:
    w("## Training step of examples/gpt_char_lm.py, 2 ranks")
    w("")
    w("```")
    w(read("train_step_np2.cmd"))
    w("```")
    w("")
    w("Model: %d tensors, %.3f M parameters (the example's defaults); AdamW; the same "
      "batches and initial state for every method; a step is zero_grad + forward + backward + "
      "step; methods interleaved in 3 blocks, each starting with one untimed step." % (ts["tensors"], ts["params"] / 1e6))
    w("")
    w("| method | median ms/step | p90 ms | steps |")
    w("|---|---|---|---|")
    for m, s in ts["stats_ms"].items():
        w("| %s | %.2f | %.2f | %d |" % (m, s["median"], s["p90"], s["n"]))
    w("")
    st = ts["stats_ms"]
    cells = ["%s / %s = **%.3f**" % (a, b, st[a]["median"] / st[b]["median"])
             for a, b in (("hora", "ddp"), ("hora", "local"), ("ddp", "local"))
             if a in st and b in st]
    w("Ratios of medians: " + "; ".join(cells) + ".")
    if ts.get("check"):
        w("")
        w("Largest parameter difference between the Hora and the DDP model after the run: %.3g."
          % ts["check"]["max_abs_diff_hora_vs_ddp"])
    w("")

sweeps = sorted(glob.glob(os.path.join(out, "sweep_*.json")), key=os.path.getmtime)
if sweeps:
    w("## Hora knobs on the ResNet-50 list, 2 ranks (one job per setting)")
    w("")
    w("```")
    w(read(os.path.basename(sweeps[0])[:-5] + ".cmd"))
    w("```")
    w("")
    w("Each row is its own job: compare the hora / flat_hora ratio across rows, not times.")
    w("")
    w("| setting | hora ms | hora_g1 ms | flat_hora ms | hora / flat_hora | hora_g1 / flat_hora | groups seen (hora, hora_g1) |")
    w("|---|---|---|---|---|---|---|")
    for p in sweeps:
        d = json.load(open(p))
        r = d["models"]["resnet50"]
        st = r["stats_ms"]
        pr = r.get("probe", {})
        w("| %s | %.1f | %.1f | %.1f | %.2f | %.2f | %s |" % (
            d.get("label") or os.path.basename(p), st["hora"]["median"],
            st["hora_g1"]["median"], st["flat_hora"]["median"],
            st["hora"]["median"] / st["flat_hora"]["median"],
            st["hora_g1"]["median"] / st["flat_hora"]["median"],
            ", ".join(str(len(pr[m]["buckets"])) for m in ("hora", "hora_g1") if m in pr)))
    w("")

text = "\n".join(L) + "\n"
if kept:
    text += "\n" + kept
else:
    text += "\n" + MARK + "\n\n## Findings\n\n(none recorded yet)\n"
open(report, "w").write(text)
print("wrote " + report, file=sys.stderr)
EOF
