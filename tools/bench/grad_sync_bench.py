#!/usr/bin/env python3
"""Per-step gradient synchronization: Hora's DistributedOptimizer hooks vs torch DDP (gloo)
vs one flat allreduce, side by side in one job.

    horarun -np 2 -x MASTER_PORT=29611 /usr/bin/python3 tools/bench/grad_sync_bench.py

Gradient lists with real per-layer shapes:
  resnet50   161 tensors, 25.56 M float32 (torchvision's ResNet-50, from examples/resnet_shapes)
  bert-base  199 tensors, 109.5 M float32 (BERT-base: embeddings, 12 layers, pooler)

The model's forward is sum_i c * p_i.sum() over the parameters in layer order, so backward
is nothing but producing each gradient, last layer first, and the hooks (Hora) or the
reducer (DDP) fire as each gradient becomes ready, as in a real backward, without the
compute that would hide the communication. Methods, each with its own model instance:

  backward    plain model, no communication: the cost of backward itself
  hora        hora.torch.DistributedOptimizer: backward + optimizer.synchronize()
  hora_g<N>   the same with groups=N (optional; e.g. hora_g1: all allreduces submitted
              together at the end of backward, so the runtime can fuse them)
  hora_bucket<MB>  (optional) a prototype, not hora.torch: gradients as views in flat
              buckets of <MB> MiB (default 25), one hvd.allreduce_async_ per bucket from
              gradient hooks, as DDP does (see FlatBucketHooks)
  ddp         DistributedDataParallel(gloo, bucket_cap_mb=25): backward (the reducer's wait
              is inside it)
  ddp_view    the same with gradient_as_bucket_view=True
  flat_gloo   torch.distributed.all_reduce of one preallocated flat tensor of all gradients
  flat_hora   hvd.allreduce_ of the same flat tensor

Every timed step starts after a barrier (outside the timing); a step's time is the slowest
rank's. Rank 0 prints a table (median, p90, sync = method - backward) and, with --json, writes
every sample. --probe adds a Hora run that records when each gradient's allreduce was
submitted and completed, and infers the buckets the runtime formed (tensors completing
together).

MASTER_ADDR/MASTER_PORT (torch.distributed's rendezvous) come from the environment:
pass a free port with horarun -x MASTER_PORT=<port>.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples"))

import hora.torch as hvd  # noqa: E402

METHODS = ["backward", "hora", "ddp", "ddp_view", "flat_gloo", "flat_hora"]


# ---- gradient shapes ----

def resnet50_shapes():
    import resnet_shapes
    model = resnet_shapes.build("resnet50")
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()]


def bert_base_shapes(vocab=30522, hidden=768, layers=12, inter=3072, max_pos=512, types=2):
    s = [("embeddings.word_embeddings.weight", (vocab, hidden)),
         ("embeddings.position_embeddings.weight", (max_pos, hidden)),
         ("embeddings.token_type_embeddings.weight", (types, hidden)),
         ("embeddings.LayerNorm.weight", (hidden,)),
         ("embeddings.LayerNorm.bias", (hidden,))]
    for i in range(layers):
        pre = "encoder.layer.%d." % i
        for part in ("query", "key", "value"):
            s += [(pre + "attention.self.%s.weight" % part, (hidden, hidden)),
                  (pre + "attention.self.%s.bias" % part, (hidden,))]
        s += [(pre + "attention.output.dense.weight", (hidden, hidden)),
              (pre + "attention.output.dense.bias", (hidden,)),
              (pre + "attention.output.LayerNorm.weight", (hidden,)),
              (pre + "attention.output.LayerNorm.bias", (hidden,)),
              (pre + "intermediate.dense.weight", (inter, hidden)),
              (pre + "intermediate.dense.bias", (inter,)),
              (pre + "output.dense.weight", (hidden, inter)),
              (pre + "output.dense.bias", (hidden,)),
              (pre + "output.LayerNorm.weight", (hidden,)),
              (pre + "output.LayerNorm.bias", (hidden,))]
    s += [("pooler.dense.weight", (hidden, hidden)), ("pooler.dense.bias", (hidden,))]
    return s


def small200_shapes():
    """200 gradients of 1,024 floats (4 KiB): where a fused bucket of small tensors beats an
    agreement per tensor across hosts (docs/benchmarks-steady.md "Fused buckets")."""
    return [("small.%d" % i, (1024,)) for i in range(200)]


SHAPES = {"resnet50": resnet50_shapes, "bert-base": bert_base_shapes, "small200": small200_shapes}


class ShapeModel(nn.Module):
    """Parameters with the given shapes; forward() = sum_i c * p_i.sum() in layer order, so
    backward yields the gradients last layer first, each as soon as it is computed. Each
    gradient arrives as an expanded scalar and is accumulated into the existing p.grad
    (zero_grad(set_to_none=False)): one write pass over the gradients, no allocations, the
    least a real backward could cost."""

    def __init__(self, shapes, fill=0.01):
        super().__init__()
        self.params = nn.ParameterList(
            [nn.Parameter(torch.full(shape, fill, dtype=torch.float32)) for _, shape in shapes])
        self.shape_names = [n for n, _ in shapes]

    def forward(self):
        loss = None
        for p in self.params:
            t = p.sum() * 0.5
            loss = t if loss is None else loss + t
        return loss

    def named_for_hora(self):
        return list(zip(self.shape_names, self.params))


class FlatBucketHooks(object):
    """A prototype of DDP-style bucketing on top of Hora's public API (what
    DistributedOptimizer could do): the gradients live as views in flat buckets of at most
    `cap` bytes, in the order backward produces them (last layer first); a gradient
    accumulator hook counts the ready gradients of each bucket and submits the whole bucket
    as ONE in-place hvd.allreduce_async_ once the last of them is ready. No fusion copies, a
    handful of submissions per step."""

    def __init__(self, model, cap, tag):
        params = [p for p in model.parameters() if p.requires_grad][::-1]
        self.buckets, cur, size = [], [], 0
        for p in params:
            n = p.numel() * p.element_size()
            if cur and size + n > cap:
                self.buckets.append(cur)
                cur, size = [], 0
            cur.append(p)
            size += n
        if cur:
            self.buckets.append(cur)
        self.flats, self.bucket_of = [], {}
        for b, members in enumerate(self.buckets):
            flat = torch.zeros(sum(p.numel() for p in members), dtype=torch.float32)
            off = 0
            for p in members:
                p.grad = flat[off:off + p.numel()].view_as(p)
                off += p.numel()
                self.bucket_of[p] = b
            self.flats.append(flat)
        self.names = ["%s.bucket%d" % (tag, b) for b in range(len(self.buckets))]
        self.pending = [len(m) for m in self.buckets]
        self.handles = {}
        self.lock = threading.Lock()
        self.accs = []
        with torch.enable_grad():
            for p in params:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._hook(p))
                self.accs.append(acc)

    def _hook(self, p):
        def hook(*unused):
            b = self.bucket_of[p]
            with self.lock:
                self.pending[b] -= 1
                if self.pending[b] == 0:
                    self.handles[b] = hvd.allreduce_async_(self.flats[b], name=self.names[b])
        return hook

    def synchronize(self):
        for b in range(len(self.buckets)):
            if b not in self.handles:
                self.handles[b] = hvd.allreduce_async_(self.flats[b], name=self.names[b])
        for b in sorted(self.handles):
            hvd.synchronize(self.handles[b])
        self.handles.clear()
        self.pending = [len(m) for m in self.buckets]


# ---- timing ----

def now():
    return time.perf_counter()


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Runner(object):
    """One method on one gradient list: set up once, then step() -> seconds."""

    def __init__(self, method, shapes, tag):
        self.method = method
        self.tag = tag
        self.numel = sum(int(torch.Size(s).numel()) for _, s in shapes)
        self.backward_s = []   # hora: time until backward returned (hooks submitted all)
        if method in ("flat_gloo", "flat_hora"):
            self.flat = torch.full((self.numel,), 0.01, dtype=torch.float32)
            return
        self.model = ShapeModel(shapes)
        if method == "backward":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.0)
        elif method == "hora" or method.startswith("hora_g"):
            # hora_g<N>: DistributedOptimizer(groups=N): a group's allreduces start together
            # once all its gradients are ready (hora_g1: everything at the end of backward).
            groups = int(method[len("hora_g"):]) if method != "hora" else None
            opt = torch.optim.SGD(self.model.parameters(), lr=0.0)
            self.opt = hvd.DistributedOptimizer(
                opt, named_parameters=[("%s.%s.%s" % (tag, method, n), p)
                                       for n, p in self.model.named_for_hora()],
                groups=groups)
        elif method.startswith("hora_bucket"):
            cap = int(method[len("hora_bucket"):] or 25)
            self.bucketer = FlatBucketHooks(self.model, cap << 20, "%s.%s" % (tag, method))
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.0)
        elif method in ("ddp", "ddp_view"):
            self.ddp = nn.parallel.DistributedDataParallel(
                self.model, bucket_cap_mb=25, gradient_as_bucket_view=(method == "ddp_view"))
            self.opt = torch.optim.SGD(self.ddp.parameters(), lr=0.0)
        else:
            raise ValueError("unknown method %r" % method)

    def step(self):
        m = self.method
        if m == "flat_gloo":
            dist.barrier()
            t0 = now()
            dist.all_reduce(self.flat)
            return now() - t0
        if m == "flat_hora":
            dist.barrier()
            t0 = now()
            hvd.allreduce_(self.flat, name="flat." + self.tag)
            return now() - t0
        self.opt.zero_grad(set_to_none=False)
        loss = self.ddp() if m.startswith("ddp") else self.model()
        dist.barrier()
        t0 = now()
        loss.backward()
        if m.startswith("hora_bucket"):
            self.backward_s.append(now() - t0)
            self.bucketer.synchronize()
        elif m.startswith("hora"):
            self.backward_s.append(now() - t0)
            self.opt.synchronize()
        return now() - t0

    def close(self):
        for a in ("model", "ddp", "opt", "flat", "bucketer"):
            if hasattr(self, a):
                delattr(self, a)


def slowest_rank(samples):
    """Per step, the largest time over ranks."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, samples)
    return [max(col) for col in zip(*gathered)]


def probe_hora(shapes, tag, steps, groups=None):
    """Hora hooks with submission and completion time of every gradient; infers buckets.
    A polling thread watches the handles, which slows backward down: only the bucket
    structure (how many tensors complete together) is meaningful, not the times."""
    model = ShapeModel(shapes)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.0),
        named_parameters=[("%s.probe%s.%s" % (tag, groups, n), p)
                          for n, p in model.named_for_hora()], groups=groups)
    sizes = {id(p): p.numel() * 4 for p in model.params}
    reports = []
    for s in range(steps):
        opt.zero_grad(set_to_none=False)
        loss = model()
        dist.barrier()
        seen, order, done_at, stop = set(), [], {}, [False]
        t0 = now()

        def poller():
            # Buckets run in order: poll the pending handles oldest first and stop at the
            # first one not done (cheap, so that backward is slowed as little as possible).
            while not stop[0]:
                t = now()
                for entries in list(opt._launched.values()):
                    for e in entries:
                        if id(e[0]) not in seen:
                            seen.add(id(e[0]))
                            order.append((e[0], e[1], t))
                for p, h, _ in order:
                    if id(p) in done_at:
                        continue
                    try:
                        if not hvd.poll(h):
                            break
                    except ValueError:
                        break
                    done_at[id(p)] = now()
                time.sleep(0.0005)
        th = threading.Thread(target=poller, daemon=True)
        th.start()
        loss.backward()
        t_bwd = now()
        # wait until the poller saw everything complete, before synchronize() takes handles
        n = len(sizes)
        while len(done_at) < n and now() - t_bwd < 60:
            time.sleep(0.0005)
        stop[0] = True
        th.join()
        opt.synchronize()
        t_end = now()
        tensors = sorted((done_at.get(id(p), t_end) - t0, launched - t0, sizes[id(p)])
                         for p, _, launched in order)
        reports.append((t_bwd - t0, t_end - t0, tensors))
    del opt, model
    # Tensors the poller saw complete in the same sweep (within 0.3 ms) count as one bucket.
    t_bwd, t_end, tensors = reports[-1]
    if not tensors:
        sys.exit("--probe: DistributedOptimizer made no per-tensor handles (its bucket path "
                 "has none to poll); HORA_BUCKET_CAP_MB=0 selects the per-tensor path")
    buckets, cur = [], None
    for done, launched, nbytes in tensors:
        if cur is None or done - cur["done"] > 0.0003:
            cur = {"done": done, "first_launch": launched, "last_launch": launched,
                   "bytes": 0, "tensors": 0}
            buckets.append(cur)
        cur["done"] = done
        cur["bytes"] += nbytes
        cur["tensors"] += 1
        cur["first_launch"] = min(cur["first_launch"], launched)
        cur["last_launch"] = max(cur["last_launch"], launched)
    return {"backward_s": t_bwd, "total_s": t_end,
            "last_submit_s": max(u[1] for u in tensors), "buckets": buckets,
            "steps": [(r[0], r[1]) for r in reports]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,bert-base")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--steps", type=int, default=12, help="timed steps per method (ResNet)")
    ap.add_argument("--bert-steps", type=int, default=10, help="timed steps per method (BERT)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3,
                    help="the timed steps are split into this many rounds over all methods "
                         "(interleaving spreads machine-load drift over every method); "
                         "0: one round per step")
    ap.add_argument("--bert-rounds", type=int, default=2,
                    help="rounds for BERT, whose models are rebuilt every round (too big to "
                         "keep one per method alive)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: cores/ranks)")
    ap.add_argument("--probe", action="store_true", help="also infer Hora's buckets")
    ap.add_argument("--json", default="", help="write all samples here (rank 0)")
    ap.add_argument("--label", default="", help="free text put in the JSON")
    args = ap.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        sys.exit("set MASTER_PORT (horarun -x MASTER_PORT=<free port>)")
    dist.init_process_group("gloo", rank=rank, world_size=size)

    methods = [m for m in args.methods.split(",") if m]
    out = {"size": size, "threads": threads, "label": args.label,
           "env": {k: v for k, v in os.environ.items()
                   if k in ("HORA_FUSION_THRESHOLD", "HORA_CYCLE_TIME_MS")},
           "models": {}}
    for model_name in [m for m in args.models.split(",") if m]:
        shapes = SHAPES[model_name]()
        numel = sum(int(torch.Size(s).numel()) for _, s in shapes)
        steps = args.bert_steps if model_name.startswith("bert") else args.steps
        rounds = args.bert_rounds if model_name.startswith("bert") else args.rounds
        rounds = max(1, min(rounds or steps, steps))
        per_round = [steps // rounds + (1 if i < steps % rounds else 0) for i in range(rounds)]
        # Keep every model alive across rounds when memory allows (ResNet); BERT's 440 MB
        # models (x3 with DDP's buckets) are built per round and freed.
        keep = numel * 4 * len(methods) * 3 < (3 << 30) // size
        if rank == 0:
            print("# %s: %d tensors, %.2f M float32 (%.1f MiB); %d ranks, %d threads; "
                  "%d timed steps per method in %d round(s), %d warm-up"
                  % (model_name, len(shapes), numel / 1e6, numel * 4 / 2**20, size, threads,
                     steps, rounds, args.warmup), flush=True)
        samples = {m: [] for m in methods}
        hora_bwd = {m: [] for m in methods if m.startswith("hora")}
        runners = {}
        for r, n in enumerate(per_round):
            for m in methods:
                runner = runners.get(m)
                fresh = runner is None
                if fresh:
                    runner = Runner(m, shapes, "%s.r%d" % (model_name, r if not keep else 0))
                    if keep:
                        runners[m] = runner
                # Warm-up: a fresh model gets --warmup steps; a kept one gets one untimed
                # step per round, so that no timed step directly follows another method's
                # (the first step after a switch pays for what the previous method left
                # behind: DDP right after Hora's methods measured up to 7x slower).
                for _ in range(args.warmup if fresh and r == 0 else min(1, args.warmup)):
                    runner.step()
                runner.backward_s = []
                local = [runner.step() for _ in range(n)]
                samples[m] += slowest_rank(local)
                if m in hora_bwd:
                    hora_bwd[m] += slowest_rank(runner.backward_s)
                if not keep:
                    runner.close()
                    del runner
        for runner in runners.values():
            runner.close()
        runners.clear()
        res = {"tensors": len(shapes), "numel": numel, "samples_s": samples, "stats_ms": {}}
        for m in methods:
            xs = samples[m]
            res["stats_ms"][m] = {"median": 1e3 * statistics.median(xs),
                                  "p90": 1e3 * percentile(xs, 0.9), "n": len(xs)}
            if m in hora_bwd:
                res["stats_ms"][m]["backward_median"] = 1e3 * statistics.median(hora_bwd[m])
        if args.probe:
            res["probe"] = {}
            for m in methods:
                if m == "hora" or m.startswith("hora_g"):
                    g = int(m[len("hora_g"):]) if m != "hora" else None
                    res["probe"][m] = probe_hora(shapes, model_name, max(2, args.warmup), g)
        out["models"][model_name] = res
        if rank == 0:
            print_table(model_name, res, size)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    hvd.shutdown()


def print_table(model_name, res, size):
    st = res["stats_ms"]
    bwd = st.get("backward", {}).get("median", 0.0)
    print("| method | median ms | p90 ms | sync ms (median - backward) | backward returned ms | n |")
    print("|---|---|---|---|---|---|")
    for m, s in st.items():
        sync = s["median"] - bwd if not m.startswith("flat") else s["median"]
        print("| %s | %.1f | %.1f | %s | %s | %d |" % (
            m, s["median"], s["p90"], "-" if m == "backward" else "%.1f" % sync,
            "%.1f" % s["backward_median"] if "backward_median" in s else "-", s["n"]))

    def ratio(a, b):
        if a in st and b in st:
            print("%s / %s = %.2f" % (a, b, st[a]["median"] / st[b]["median"]))
    for a, b in (("hora", "ddp"), ("hora", "ddp_view"), ("hora", "flat_gloo"),
                 ("hora", "flat_hora"), ("flat_hora", "flat_gloo"), ("ddp", "flat_gloo")):
        ratio(a, b)
    for m, pr in sorted(res.get("probe", {}).items()):
        bs = pr["buckets"]
        sizes = sorted((b["bytes"] for b in bs), reverse=True)
        print("probe %s (slowed by its polling thread; last step): backward %.1f ms, last "
              "submit %.1f ms, synchronize done %.1f ms; >= %d buckets (tensors completing "
              "together): %d with 1 tensor, largest %s MiB"
              % (m, 1e3 * pr["backward_s"], 1e3 * pr["last_submit_s"], 1e3 * pr["total_s"],
                 len(bs), sum(1 for b in bs if b["tensors"] == 1),
                 ", ".join("%.1f" % (x / 2**20) for x in sizes[:5])))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
