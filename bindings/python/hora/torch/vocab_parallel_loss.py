"""Cross-entropy over logits split by the vocabulary across a tensor-parallel set.

A language model's head as a ColumnParallelLinear(d, V, gather_output=False) leaves rank r
of the T members with the logits of vocabulary ids [r * V/T, (r+1) * V/T). Gathering them
to call F.cross_entropy moves T times the logits and holds the whole [tokens, V] matrix on
every member. vocab_parallel_cross_entropy computes the same loss from the slices with two
allreduces of a few values per token (the maximum; then the sum of exponentials and the
target's logit together), and its backward is local: the slice of softmax minus one-hot that belongs to the
rank (Megatron-LM's vocab-parallel cross-entropy).
"""

import torch
import torch.nn.functional as F

from .mpi_ops import Max, Sum, global_process_set
from .parallel_ops import allreduce
from .process_sets import _members

__all__ = ["vocab_parallel_cross_entropy"]


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token loss; ignored tokens (keep False) have loss 0 and no gradient."""

    @staticmethod
    def forward(ctx, logits, target, keep, start, vocab_size, smoothing, process_set):
        # Five passes over the slice (the max, the shift, exp, its sum; the backward's
        # product): at large vocabularies the loss is bound by memory, not arithmetic.
        width = logits.shape[-1]
        real = max(min(vocab_size - start, width), 0)  # columns past it are padding
        x = logits.detach()
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        top = (x[..., :real] if real < width else x).max(dim=-1).values
        x = x - allreduce(top, process_set, Max).unsqueeze(-1)
        if real < width:
            x[..., real:] = float("-inf")
        mine = keep & (target >= start) & (target < start + width)
        local = (target - start).clamp(0, width - 1)
        picked = x.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(~mine, 0.0)
        mean = x[..., :real].sum(dim=-1) if smoothing else None
        exp = x.exp_()
        sums = [exp.sum(dim=-1), picked] + ([mean] if smoothing else [])
        sums = allreduce(torch.stack(sums), process_set, Sum)  # one call for the three
        log_z = sums[0].log()
        loss = log_z - sums[1]
        if smoothing:
            loss = (1.0 - smoothing) * loss + smoothing * (log_z - sums[2] / vocab_size)
        loss = loss.masked_fill(~keep, 0.0)
        ctx.save_for_backward(exp, sums[0], mine, local, keep)
        ctx.smoothing, ctx.real, ctx.vocab_size = smoothing, real, vocab_size
        ctx.dtype = logits.dtype
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        exp, total, mine, local, keep = ctx.saved_tensors
        # (softmax - (1 - smoothing) * one-hot - smoothing / V) x the token's gradient; out of
        # place, so that a second backward (retain_graph) reads the saved exp again
        scale = grad.float() * keep
        g = exp * (scale / total).unsqueeze(-1)
        hit = (-(1.0 - ctx.smoothing) * scale * mine).unsqueeze(-1)
        g.scatter_add_(-1, local.unsqueeze(-1), hit)
        if ctx.smoothing:
            g[..., :ctx.real] -= (ctx.smoothing / ctx.vocab_size * scale).unsqueeze(-1)
        return g.to(ctx.dtype), None, None, None, None, None, None


def vocab_parallel_cross_entropy(logits, target, process_set=global_process_set,
                                 vocab_size=None, ignore_index=-100, reduction="mean",
                                 label_smoothing=0.0):
    """F.cross_entropy(full_logits, target) from this member's slice of the last dimension.

    logits: [..., V/T], the slice rank r of the set holds (columns r * V/T onward, as
        ColumnParallelLinear(..., gather_output=False) leaves them; floating point).
    target: [...] integer class ids in [0, vocab_size), the same on every member;
        `ignore_index` marks tokens without a loss.
    vocab_size: the real vocabulary when the head was padded to a multiple of T: the
        columns past it take no part (default: all T * V/T columns).
    reduction: "mean" (over the tokens not ignored), "sum" or "none" (per token).
    Collective over `process_set`: every member calls it with the same shapes.
    """
    n, r = _members(process_set)
    if not torch.is_tensor(logits) or not logits.is_floating_point() or logits.dim() < 1:
        raise ValueError("vocab_parallel_cross_entropy: logits must be a floating-point "
                         "tensor with the vocabulary slice last, got %r"
                         % (getattr(logits, "dtype", type(logits)),))
    if not torch.is_tensor(target) or target.is_floating_point() or target.is_complex():
        raise ValueError("vocab_parallel_cross_entropy: target must be an integer tensor of "
                         "class ids, got %r" % (getattr(target, "dtype", type(target)),))
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError("vocab_parallel_cross_entropy: target's shape %s is not logits' %s "
                         "without its last dimension" % (list(target.shape),
                                                         list(logits.shape)))
    width = logits.shape[-1]
    full = width * n
    vocab_size = full if vocab_size is None else int(vocab_size)
    if not full - width < vocab_size <= full:
        raise ValueError("vocab_parallel_cross_entropy: vocab_size %d does not fit the %d "
                         "columns of %d members of %d (padding must be less than one slice)"
                         % (vocab_size, full, n, width))
    if reduction not in ("mean", "sum", "none"):
        raise ValueError("vocab_parallel_cross_entropy: reduction must be 'mean', 'sum' or "
                         "'none', got %r" % (reduction,))
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError("vocab_parallel_cross_entropy: label_smoothing must be in [0, 1], "
                         "got %r" % (label_smoothing,))
    target = target.long()
    if n == 1:  # the whole vocabulary here
        return F.cross_entropy(logits[..., :vocab_size].reshape(-1, vocab_size),
                               target.reshape(-1), ignore_index=ignore_index,
                               reduction=reduction, label_smoothing=label_smoothing
                               ).reshape(target.shape if reduction == "none" else ())
    keep = target != ignore_index
    bad = keep & ((target < 0) | (target >= vocab_size))
    if bad.any():
        raise ValueError("vocab_parallel_cross_entropy: target %d is out of range [0, %d)"
                         % (int(target[bad][0]), vocab_size))
    loss = _VocabParallelCrossEntropy.apply(logits, target, keep, r * width, vocab_size,
                                            float(label_smoothing), process_set)
    if reduction == "none":
        return loss
    total = loss.sum()
    return total if reduction == "sum" else total / keep.sum()
