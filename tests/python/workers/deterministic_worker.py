"""HORA_DETERMINISTIC through hora.torch: allreduce results against numpy's left-to-right sum
in rank order (np.float32 accumulation), grouped and one tensor at a time, several times (the
coordinator's inline reduction, the steady path, the data plane). argv[1]: "arg"
(hvd.init(deterministic=True)), "env" (HORA_DETERMINISTIC=1 set by the test) or "off" (the
option off: the backend's own order, which must miss numpy's bits somewhere)."""

import ctypes
import sys

import numpy as np
import torch

import hora.torch as hvd
import cases
from cases import case, check

MODE = sys.argv[1] if len(sys.argv) > 1 else "arg"
RUNS = 6  # past the steady path's warm-up (3)
SIZES = [1, 5, 1001, 4097, 65537, 300007]


def _inputs(rank, dtype):
    """Rank `rank`'s tensors: magnitudes 2^-12 .. 2^12, both signs (sums that round)."""
    rng = np.random.default_rng(1000 + rank)
    return [(rng.uniform(-1, 1, n) * np.exp2(rng.integers(-12, 13, n))).astype(dtype)
            for n in SIZES]


def _numpy_reference(dtype, average):
    """The documented formula: acc = x[0]; acc = acc + x[r] for r = 1 .. n-1; then / n."""
    n = hvd.size()
    every = [_inputs(r, dtype) for r in range(n)]
    out = []
    for i in range(len(SIZES)):
        acc = every[0][i].copy()
        for r in range(1, n):
            acc = acc + every[r][i]  # np.float32 + np.float32 -> np.float32, rounded each time
        if average:
            acc = acc / dtype(n)
        out.append(acc)
    return out


def _bytes(t):
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _results(dtype, op, grouped, tag):
    """RUNS times: the allreduce of this rank's tensors, as bytes per run and tensor."""
    mine = [torch.from_numpy(a) for a in _inputs(hvd.rank(), dtype)]
    runs = []
    for _ in range(RUNS):
        if grouped:
            outs = hvd.grouped_allreduce(mine, op=op, name="g.%s" % tag)
        else:
            outs = [hvd.allreduce(t, op=op, name="s.%s.%d" % (tag, i))
                    for i, t in enumerate(mine)]
        runs.append([_bytes(o) for o in outs])
    return runs


def _mismatches(dtype, op, grouped, tag):
    want = [a.tobytes() for a in _numpy_reference(dtype, op == hvd.Average)]
    wrong = []
    for k, run in enumerate(_results(dtype, op, grouped, tag)):
        for i, got in enumerate(run):
            if got != want[i]:
                wrong.append("run %d tensor %d (%d elements)" % (k, i, SIZES[i]))
    return wrong


def _equal_case(dtype, op, grouped, tag):
    wrong = _mismatches(dtype, op, grouped, tag)
    check(not wrong, "%d results are not numpy's rank-order sum: %s" % (len(wrong), wrong[:4]))


if MODE == "off":
    @case
    def without_the_option_some_bits_differ():
        wrong = (_mismatches(np.float32, hvd.Sum, True, "f32sum") +
                 _mismatches(np.float32, hvd.Sum, False, "f32sum"))
        check(wrong, "every result equals numpy's rank-order sum without HORA_DETERMINISTIC: "
              "the comparison proves nothing")
else:
    @case
    def float32_sum_grouped():
        _equal_case(np.float32, hvd.Sum, True, "f32sum")

    @case
    def float32_sum_per_tensor():
        _equal_case(np.float32, hvd.Sum, False, "f32sum")

    @case
    def float32_average_grouped():
        _equal_case(np.float32, hvd.Average, True, "f32avg")

    @case
    def float32_average_per_tensor():
        _equal_case(np.float32, hvd.Average, False, "f32avg")

    @case
    def float64_sum_grouped():
        _equal_case(np.float64, hvd.Sum, True, "f64sum")

    @case
    def float16_sum_per_tensor():
        _equal_case(np.float16, hvd.Sum, False, "f16sum")


if __name__ == "__main__":
    def init():
        hvd.init(deterministic=True) if MODE == "arg" else hvd.init()

    cases.run_all(init, hvd.shutdown, only=sys.argv[2:])
