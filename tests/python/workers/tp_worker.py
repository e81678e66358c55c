"""hora.torch tensor parallelism against one process. Runs on each rank.

Every rank builds the single-process model with the same seed (the reference) and checks
that the parallel layers hold its slices, compute its outputs and gradients, and after a
few SGD / Adam steps hold the slices of its parameters: TP over the whole job, TP x DP on a
grid (2 x 1, 1 x 2 at 2 ranks; 2 x 2 at 4), and errors for bad use."""


import torch
import torch.nn as nn
import torch.nn.functional as F

import hora.torch as hvd
import cases
from cases import case, check, close, raises

V, D, H = 8, 6, 12   # divisible by 2 and 4
STEPS = 3


def init():
    hvd.init()


def reference_model(seed=0):
    torch.manual_seed(seed)
    return nn.ModuleDict({"emb": nn.Embedding(V, D), "fc1": nn.Linear(D, H),
                          "fc2": nn.Linear(H, D), "ln": nn.LayerNorm(D),
                          "head": nn.Linear(D, V), "ln1": nn.LayerNorm(D)})


class TPModel(nn.Module):
    """The reference with every layer but the LayerNorm split over `ps`."""

    def __init__(self, ps, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = hvd.VocabParallelEmbedding(V, D, process_set=ps)
        self.fc1 = hvd.ColumnParallelLinear(D, H, gather_output=False, process_set=ps)
        self.fc2 = hvd.RowParallelLinear(H, D, input_is_parallel=True, process_set=ps)
        self.ln = nn.LayerNorm(D)
        self.head = hvd.ColumnParallelLinear(D, V, gather_output=True, process_set=ps)

    def forward(self, ids):
        x = self.emb(ids)
        x = x + self.fc2(F.gelu(self.fc1(x)))
        return self.head(self.ln(x))


class SPModel(nn.Module):
    """TPModel with sequence parallelism: between the blocks each rank holds 1/T of the
    sequence (dim 0 inside: the ids are transposed), and a LayerNorm (ln1) sits before fc1,
    where plain TP would hold the whole activation."""

    def __init__(self, ps, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        sp = dict(process_set=ps, sequence_parallel=True)
        self.emb = hvd.VocabParallelEmbedding(V, D, **sp)
        self.fc1 = hvd.ColumnParallelLinear(D, H, gather_output=False, **sp)
        self.fc2 = hvd.RowParallelLinear(H, D, input_is_parallel=True, **sp)
        self.ln = nn.LayerNorm(D)
        self.head = hvd.ColumnParallelLinear(D, V, gather_output=True, **sp)
        self.ln1 = nn.LayerNorm(D)
        hvd.mark_sequence_parallel(self.ln, ps)
        hvd.mark_sequence_parallel(self.ln1, ps)

    def forward(self, ids):
        x = self.emb(ids.t())
        x = x + self.fc2(F.gelu(self.fc1(self.ln1(x))))
        return self.head(self.ln(x)).transpose(0, 1)


def reference_forward(m, ids, ln1=False):
    x = m["emb"](ids)
    x = x + m["fc2"](F.gelu(m["fc1"](m["ln1"](x) if ln1 else x)))
    return m["head"](m["ln"](x))


def slice_of(name, ref_param, n, r):
    """The slice rank r of n holds of a reference parameter."""
    layer, kind = name.split(".")
    if layer in ("emb", "fc1", "head"):           # split by rows
        k = ref_param.shape[0] // n
        return ref_param[r * k:(r + 1) * k]
    if layer == "fc2" and kind == "weight":       # split by columns
        k = ref_param.shape[1] // n
        return ref_param[:, r * k:(r + 1) * k]
    return ref_param                              # replicated


def compare(tp, ref, n, r, atol=1e-5, grads=False, what=""):
    refs = dict(ref.named_parameters())
    check(all(name in refs for name, _ in tp.named_parameters()), "names")
    for name, p in tp.named_parameters():
        q = refs[name].grad if grads else refs[name].detach()
        mine = p.grad if grads else p.detach()
        close(mine, slice_of(name, q, n, r), atol=atol, rtol=1e-4, msg="%s %s" % (what, name))


def batch(step, rows):
    g = torch.Generator().manual_seed(50 + step)
    return torch.randint(V, (rows, 8), generator=g), torch.randint(V, (rows, 8), generator=g)


def loss_fn(logits, y):
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


@case
def layers_hold_the_reference_slices():
    n, r = hvd.size(), hvd.rank()
    compare(TPModel(hvd.global_process_set), reference_model(), n, r, atol=0, what="init")


def forward_and_gradients(model):
    """`model` over the whole job against the reference: logits and gradients."""
    n, r = hvd.size(), hvd.rank()
    tp, ref = model(hvd.global_process_set), reference_model()
    ids, y = batch(0, 4)
    out = tp(ids)
    want = reference_forward(ref, ids, ln1=model is SPModel)
    close(out, want, msg="logits")
    loss_fn(out, y).backward()
    loss_fn(want, y).backward()
    compare(tp, ref, n, r, grads=True, what="grad")
    return tp


@case
def forward_and_gradients_match():
    forward_and_gradients(TPModel)


def train_grid(grid, kind, steps=STEPS, model=TPModel):
    """TP over grid.tp_set, DistributedOptimizer over grid.dp_set; DP rank d takes rows
    [4d, 4d+4) of the global batch."""
    tp = model(grid.tp_set)
    sp = model is SPModel
    opt = (torch.optim.SGD(tp.parameters(), lr=0.5, momentum=0.9) if kind == "sgd"
           else torch.optim.Adam(tp.parameters(), lr=0.02))
    opt = hvd.DistributedOptimizer(opt, named_parameters=tp.named_parameters(),
                                   process_set=grid.dp_set)
    d = grid.dp_rank
    for s in range(steps):
        opt.zero_grad()
        ids, y = batch(s, 4 * grid.dp)
        loss_fn(tp(ids[4 * d:4 * d + 4]), y[4 * d:4 * d + 4]).backward()
        opt.step()
    ref = reference_model()
    ropt = (torch.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9) if kind == "sgd"
            else torch.optim.Adam(ref.parameters(), lr=0.02))
    for s in range(steps):
        ropt.zero_grad()
        ids, y = batch(s, 4 * grid.dp)
        loss_fn(reference_forward(ref, ids, ln1=sp), y).backward()
        ropt.step()
    compare(tp, ref, grid.tp, grid.tp_rank, atol=2e-5, what="%s tp %d dp %d" % (
        kind, grid.tp, grid.dp))


GRIDS = {}


def grid(tp):
    if tp not in GRIDS:
        GRIDS[tp] = hvd.make_grid(tp=tp)
    return GRIDS[tp]


@case
def grid_sets_are_megatron_ordered():
    n, r = hvd.size(), hvd.rank()
    g = grid(2)
    check(g.tp == 2 and g.dp == n // 2 and g.pp == 1, repr(g))
    check(g.tp_rank == r % 2 and g.dp_rank == r // 2, repr(g))
    tp_ranks = list(range(n)) if g.tp_set is hvd.global_process_set else g.tp_set.ranks
    check(tp_ranks == [r - r % 2, r - r % 2 + 1], "tp set %s" % tp_ranks)
    dp_ranks = list(range(n)) if g.dp_set is hvd.global_process_set else g.dp_set.ranks
    check(dp_ranks == list(range(r % 2, n, 2)), "dp set %s" % dp_ranks)
    check(hvd.make_grid(tp=2).tp_set.process_set_id == g.tp_set.process_set_id,
          "a second grid reuses the sets")


@case
def tp_sgd():
    train_grid(grid(hvd.size()), "sgd")


@case
def tp_adam():
    train_grid(grid(hvd.size()), "adam")


@case
def tp2_x_dp_adam():
    train_grid(grid(2), "adam")


@case
def tp2_x_dp_sgd():
    train_grid(grid(2), "sgd")


@case
def dp_only_grid():
    train_grid(grid(1), "adam")


@case
def sequence_parallel_forward_and_gradients_match():
    sp = forward_and_gradients(SPModel)
    n, ids = hvd.size(), batch(0, 4)[0]
    check(sp.ln1.weight.sequence_parallel and sp.fc2.bias.sequence_parallel, "marked")
    # each rank's activations between the blocks: its 1/T of the sequence
    check(sp.emb(ids.t()).shape == (8 // n, 4, D), "embedding slice")


@case
def sequence_parallel_tp_sgd():
    train_grid(grid(hvd.size()), "sgd", model=SPModel)


@case
def sequence_parallel_tp2_x_dp_adam():
    train_grid(grid(2), "adam", model=SPModel)


@case
def sequence_parallel_bad_input():
    n = hvd.size()
    raises(ValueError, hvd.RowParallelLinear, 2 * n, D, sequence_parallel=True,
           contains="sequence_parallel needs input_is_parallel=True")
    x = torch.ones(4 * n + 1, 2)
    raises(ValueError, hvd.scatter_to_sequence_parallel, x, hvd.global_process_set,
           contains="the sequence (dim 0, length %d) does not divide by the tensor-parallel "
           "size %d" % (4 * n + 1, n))
    raises(ValueError, hvd.reduce_scatter_to_sequence_parallel, torch.ones(2, 4 * n + 1),
           hvd.global_process_set, 1, contains="dim 1, length %d" % (4 * n + 1))
    raises(ValueError, hvd.scatter_to_sequence_parallel, torch.ones(4), hvd.global_process_set,
           3, contains="dim 3 is not a dimension")
    # a rank outside the set
    if n > 2:
        ps = hvd.add_process_set([0, n - 1])
        if 0 < hvd.rank() < n - 1:
            raises(ValueError, hvd.mark_sequence_parallel, nn.LayerNorm(D), ps,
                   contains="is not a member")
        hvd.remove_process_set(ps)


@case
def fused_qkv_keeps_heads_together():
    # a fused q|k|v projection: each rank holds its slice of q, of k and of v
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(3)
    ref = nn.Linear(D, 3 * 4 * n)
    col = hvd.ColumnParallelLinear.from_linear(ref, gather_output=False, chunks=3)
    x = torch.randn(2, D)
    q, k, v = ref(x).split(4 * n, dim=-1)
    want = torch.cat([t[:, 4 * r:4 * r + 4] for t in (q, k, v)], dim=-1)
    close(col(x), want, msg="qkv slice")
    emb = nn.Embedding(V, D)
    close(hvd.VocabParallelEmbedding.from_embedding(emb)(torch.arange(V)), emb.weight,
          msg="from_embedding")
    row = nn.Linear(H, D)
    close(hvd.RowParallelLinear.from_linear(row)(torch.ones(3, H)), row(torch.ones(3, H)),
          msg="row, whole input")


@case
def sizes_that_do_not_divide_are_errors():
    n = hvd.size()
    ps = hvd.global_process_set
    raises(ValueError, hvd.ColumnParallelLinear, D, 4 * n + 1, process_set=ps,
           contains="out_features %d is not divisible by the tensor-parallel size %d"
           % (4 * n + 1, n))
    raises(ValueError, hvd.RowParallelLinear, 4 * n + 1, D, process_set=ps,
           contains="in_features %d is not divisible by the tensor-parallel size %d"
           % (4 * n + 1, n))
    raises(ValueError, hvd.VocabParallelEmbedding, 4 * n + 1, D, process_set=ps,
           contains="num_embeddings %d is not divisible" % (4 * n + 1))
    raises(ValueError, hvd.ColumnParallelLinear, D, 4 * n + 2, chunks=4,
           contains="not divisible by chunks 4")
    row = hvd.RowParallelLinear(2 * n, D, input_is_parallel=True)
    raises(ValueError, row, torch.ones(2, 2 * n), contains="this rank's slice is 2")
    raises(ValueError, hvd.make_grid, tp=3, contains="does not divide")
    raises(ValueError, hvd.make_grid, tp=1, pp=1, dp=n + 1, contains="the job has %d" % n)


def vocab_loss_against_full(ps, n, r, vocab, width, **kw):
    """vocab_parallel_cross_entropy on rank r's `width` columns against F.cross_entropy on
    the first `vocab` of all n * width: the loss, and the gradient of this rank's slice."""
    g = torch.Generator().manual_seed(7)
    full = (3 * torch.randn(3, 5, n * width, generator=g)).requires_grad_()
    target = torch.randint(vocab, (3, 5), generator=g)
    target[0, 1] = target[2, 4] = -100                 # ignored tokens
    mine = full.detach()[..., r * width:(r + 1) * width].clone().requires_grad_()
    got = hvd.vocab_parallel_cross_entropy(mine, target, process_set=ps, vocab_size=vocab, **kw)
    want = F.cross_entropy(full[..., :vocab].reshape(-1, vocab), target.reshape(-1), **kw)
    want = want.reshape(3, 5) if kw.get("reduction") == "none" else want
    close(got, want, atol=1e-5, msg="loss %s" % kw)
    (got * torch.arange(1.0, got.numel() + 1).reshape(got.shape)).sum().backward()
    (want * torch.arange(1.0, want.numel() + 1).reshape(want.shape)).sum().backward()
    close(mine.grad, full.grad[..., r * width:(r + 1) * width], atol=1e-5,
          msg="gradient %s" % kw)


@case
def vocab_parallel_cross_entropy_is_the_full_loss():
    n, r = hvd.size(), hvd.rank()
    ps = hvd.global_process_set
    for kw in ({}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.1},
               {"reduction": "none", "label_smoothing": 0.2}):
        vocab_loss_against_full(ps, n, r, 4 * n, 4, **kw)
        vocab_loss_against_full(ps, n, r, 4 * n - 3, 4, **kw)    # padded head: 3 columns
    one = grid(1).tp_set                                           # a set of one: no split
    vocab_loss_against_full(one, 1, 0, 6, 8, reduction="none", label_smoothing=0.1)
    vocab_loss_against_full(one, 1, 0, 8, 8)


@case
def vocab_parallel_head_trains_as_the_full_head():
    """The TP model with its head left split (gather_output=False) and the vocab-parallel
    loss: the reference's loss and gradients."""
    n, r = hvd.size(), hvd.rank()
    tp, ref = TPModel(hvd.global_process_set), reference_model()
    tp.head.gather_output = False
    ids, y = batch(1, 4)
    loss = hvd.vocab_parallel_cross_entropy(tp(ids), y)
    want = loss_fn(reference_forward(ref, ids), y)
    close(loss, want, msg="loss")
    loss.backward()
    want.backward()
    compare(tp, ref, n, r, grads=True, what="grad")


@case
def vocab_parallel_cross_entropy_bad_input():
    """Errors every member raises alike before any collective; the next call works."""
    n = hvd.size()
    logits, target = torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long)
    f = hvd.vocab_parallel_cross_entropy
    raises(ValueError, f, logits, target[:, :2], contains="target's shape [2, 2] is not")
    raises(ValueError, f, logits, target.float(), contains="must be an integer tensor")
    raises(ValueError, f, logits.long(), target, contains="must be a floating-point")
    raises(ValueError, f, logits, target + 4 * n, contains="target %d is out of range" % (4 * n))
    raises(ValueError, f, logits, target, vocab_size=4 * n - 4,
           contains="vocab_size %d does not fit" % (4 * n - 4))
    raises(ValueError, f, logits, target, reduction="avg", contains="reduction must be")
    close(f(logits, target), torch.tensor(float(torch.log(torch.tensor(4.0 * n)))),
          msg="uniform logits")


if __name__ == "__main__":
    import sys
    cases.run_all(init, hvd.shutdown, only=sys.argv[1:] or None)
