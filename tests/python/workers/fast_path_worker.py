"""hora.torch's allreduce fast path (docs/benchmarks-steady.md "Lean Python path") against its
full path: the same results, the same errors, and the cases it must leave to the full path.
process_set=0 (an int, the same global set) always takes the full path, so each case compares
the two on the same inputs. Runs on each rank."""

import sys

import torch

import hora
import hora.torch as hvd
from hora.torch import mpi_ops
import cases
from cases import case, check, close, raises

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.int8, torch.uint8, torch.int16]
OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, None]


def _input(shape, dtype):
    n = torch.Size(shape).numel()
    return ((torch.arange(n, dtype=torch.float64) % 3) + hvd.rank() + 1).reshape(shape).to(dtype)


def _took_fast_path(shape, fn):
    """Runs fn() and says whether it took the fast path (mpi_ops._fast_submit made the handle)
    for a tensor of `shape`."""
    real, taken = mpi_ops._fast_submit, []

    def spy(tensor, name, op):
        got = real(tensor, name, op)
        if got is not None and tuple(tensor.shape) == shape:
            taken.append(True)
        return got

    mpi_ops._fast_submit = spy
    try:
        out = fn()
    finally:
        mpi_ops._fast_submit = real
    return bool(taken), out


@case
def same_results_every_dtype_and_op():
    for i, dt in enumerate(DTYPES):
        for op in OPS:
            shape = (2, 3, i + 1)
            x = _input(shape, dt)
            fast, y = _took_fast_path(shape, lambda: hvd.allreduce(x, name="f.%s.%s" % (dt, op),
                                                                   op=op))
            check(fast, "%s op %s did not take the fast path" % (dt, op))
            full = hvd.allreduce(x, name="s.%s.%s" % (dt, op), op=op, process_set=0)
            check(y.dtype == dt and y.shape == x.shape, "%s %s" % (y.dtype, y.shape))
            close(y, full, msg="%s op %s" % (dt, op))
            close(x, _input(shape, dt), msg="input modified")
            h = hvd.allreduce_async(x, op=op)  # unnamed: the counters of both paths agree
            close(hvd.synchronize(h), full, msg="async %s op %s" % (dt, op))
    fast, y = _took_fast_path((), lambda: hvd.allreduce(torch.tensor(2.0), op=hvd.Sum))
    check(fast and y.shape == (), "0-dim tensor")
    close(y, torch.tensor(2.0 * hvd.size()))


@case
def full_path_cases_stay_full():
    x = _input((4, 5), torch.float32)
    ref = hvd.allreduce(x, op=hvd.Sum, process_set=0)
    for what, fn in [
            ("non-contiguous", lambda: hvd.allreduce(
                _input((5, 4), torch.float32).t(), op=hvd.Sum)),
            ("prescale", lambda: hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0) / 2.0),
            ("fp16 compression", lambda: hvd.allreduce(
                x, op=hvd.Sum, compression=hvd.Compression.fp16)),
            ("average=False", lambda: hvd.allreduce(x, average=False))]:
        shape = (4, 5) if what != "non-contiguous" else (5, 4)
        fast, y = _took_fast_path(shape, fn)
        check(not fast, "%s took the fast path" % what)
        close(y.reshape(ref.shape) if what != "non-contiguous" else y, ref if what !=
              "non-contiguous" else hvd.allreduce(_input((5, 4), torch.float32).t().contiguous(),
                                                  op=hvd.Sum, process_set=0), msg=what)
    w = x.clone().requires_grad_()
    fast, y = _took_fast_path((4, 5), lambda: hvd.allreduce(w, op=hvd.Sum))
    check(not fast, "a tensor that needs a gradient took the fast path")
    y.sum().backward()
    close(w.grad, torch.full((4, 5), float(hvd.size())), msg="gradient")
    with torch.no_grad():
        fast, y = _took_fast_path((4, 5), lambda: hvd.allreduce(w, op=hvd.Sum))
    check(fast and not y.requires_grad, "no_grad: fast path, no graph")


@case
def same_errors():
    e = raises(ValueError, hvd.allreduce, torch.ones(2), name="fe", op=77)
    check("unknown reduce op 77" in str(e), str(e))
    h = hvd.allreduce_async(torch.ones(3), name="fe.held", op=hvd.Sum)
    e = raises(hora.HoraError, hvd.allreduce_async, torch.ones(3), name="fe.held")
    check(e.status == 3 and "fe.held" in e.message, "ALREADY_EXISTS: %r" % e.message)
    e = raises(hora.HoraError, hvd.allreduce, torch.ones(3), name="fe.held")
    check(e.status == 3, "ALREADY_EXISTS from allreduce too, got %r" % e.status)
    close(hvd.synchronize(h), torch.full((3,), float(hvd.size())))
    shape = (3,) if hvd.rank() == 0 else (4,)
    e = raises(hora.HoraMismatchError, hvd.allreduce, torch.ones(shape), name="fe.shape")
    check("fe.shape" in str(e), str(e))
    close(hvd.allreduce(torch.ones(2), name="fe.after", op=hvd.Sum),
          torch.full((2,), float(hvd.size())))


if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown, only=sys.argv[1:])
