"""Gradient buckets for DistributedOptimizer, as torch DDP's reducer does them.

Parameters are put into flat buckets in reverse registration order (the order backward
produces their gradients), one dtype and device per bucket, each at most a byte cap
(HORA_BUCKET_CAP_MB, default 64 MiB). After synchronize() every p.grad is a view of its
slot in the bucket (DDP's gradient_as_bucket_view), so later passes accumulate straight into
the bucket. A gradient that is not the view (the first pass, or after
zero_grad(set_to_none=True)) is copied into its slot when it is ready, and p.grad is pointed
back at the slot. When every gradient of a bucket is ready, the whole bucket goes out as ONE
in-place allreduce_async_: a handful of submissions per step instead of one per tensor, no
fusion copies in the runtime.
"""

import os

import torch

from .compression import Compression
from .mpi_ops import _TORCH_DTYPES, allreduce_async_, synchronize as _synchronize_handle

DEFAULT_CAP_MB = 64
CAP_ENV = "HORA_BUCKET_CAP_MB"


def sparse_reduce(grad, name, op, set_id):
    """Starts the reduction of a sparse gradient as Horovod does (sparse_as_dense=False):
    allgathers of its indices and values. Returns a callable that waits for the result."""
    from .collective_ops import sparse_allreduce_async
    return sparse_allreduce_async(grad, name=name, op=op, process_set=set_id)


def cap_bytes():
    """The bucket cap in bytes from HORA_BUCKET_CAP_MB (MiB, may be fractional); 0 turns
    bucketing off (one allreduce per parameter)."""
    raw = os.environ.get(CAP_ENV, "").strip()
    if not raw:
        return DEFAULT_CAP_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0:  # also rejects nan
        raise ValueError("%s must be a non-negative number of MiB (0 turns gradient "
                         "bucketing off), got %r" % (CAP_ENV, raw))
    return int(mb * (1 << 20))


def applicable(params, compression, groups, cap):
    """Whether the bucket path can serve these parameters: no compression, no explicit
    groups, a positive cap, every parameter on one device and of a dtype hora reduces."""
    if cap <= 0 or not params or compression is not Compression.none:
        return False
    if groups is not None and groups != 0:
        return False
    device = params[0].device
    return all(p.device == device and p.dtype in _TORCH_DTYPES and not p.is_sparse
               for p in params)


def _is_view(grad, view):
    return (grad is not None and not grad.is_sparse and grad.dtype == view.dtype
            and grad.device == view.device and grad.data_ptr() == view.data_ptr()
            and grad.shape == view.shape and grad.stride() == view.stride())


class _Bucket(object):
    __slots__ = ("index", "name", "params", "nbytes", "flat", "ready", "handle")

    def __init__(self, index):
        self.index = index
        self.name = "DistributedOptimizer.bucket.%d" % index
        self.params, self.nbytes = [], 0
        self.flat = None
        self.ready = set()
        self.handle = None


class BucketReducer(object):
    """The bucket state of one DistributedOptimizer. The optimizer calls grad_ready() and
    launch_rest() under its own lock; wait() outside it."""

    def __init__(self, params, cap, sparse_as_dense, set_id=0, names=None):
        self.sparse_as_dense = sparse_as_dense
        self.set_id = set_id
        self.names = names or {}
        # this step's sparse gradients: p -> callable (sparse reduction in flight) or None
        # (reduced densely in its slot, made sparse again afterwards)
        self.sparse = {}
        self.params = list(params)
        self.buckets, filling = [], {}
        for p in reversed(self.params):
            key = (p.dtype, p.device)
            n = p.numel() * p.element_size()
            b = filling.get(key)
            if b is None or (b.params and b.nbytes + n > cap):
                b = filling[key] = _Bucket(len(self.buckets))
                self.buckets.append(b)
            b.params.append(p)
            b.nbytes += n
        self.bucket_of, self.view_of = {}, {}
        with torch.no_grad():
            for b in self.buckets:
                p0 = b.params[0]
                b.flat = torch.zeros(sum(p.numel() for p in b.params), dtype=p0.dtype,
                                     device=p0.device)
                off = 0
                for p in b.params:
                    self.view_of[p] = b.flat[off:off + p.numel()].view(p.shape)
                    self.bucket_of[p] = b
                    off += p.numel()

    def in_flight(self):
        return any(b.handle is not None for b in self.buckets)

    def discard(self):
        """Forgets the step's reductions without waiting (their job is gone: hvd.elastic's
        restart after a failure)."""
        for b in self.buckets:
            b.handle = None
            b.ready.clear()
        self.sparse = {}

    def launched(self, p):
        return self.bucket_of[p].handle is not None

    def _fill(self, p, scale):
        """Puts p's current gradient (zeros when it has none) into its slot. A sparse
        gradient goes densely in its slot (sparse_as_dense) or, as in Horovod, through its
        own sparse reduction (its slot then holds zeros)."""
        view, grad = self.view_of[p], p.grad
        with torch.no_grad():
            if grad is None:
                view.zero_()
            elif grad.is_sparse:
                if self.sparse_as_dense:
                    view.copy_(grad.to_dense())
                    self.sparse[p] = None
                else:
                    view.zero_()
                    self.sparse[p] = sparse_reduce(grad, self.names.get(p), scale[2],
                                                   self.set_id)
            elif not _is_view(grad, view):
                view.copy_(grad)
                p.grad = view

    def grad_ready(self, p, scale):
        """p's gradient is final for this step; starts its bucket when it is the last."""
        b = self.bucket_of[p]
        self._fill(p, scale)
        b.ready.add(p)
        if len(b.ready) == len(b.params):
            self._launch(b, scale)

    def _launch(self, b, scale):
        prescale, postscale, op = scale
        b.handle = allreduce_async_(b.flat, name=b.name, op=op, prescale_factor=prescale,
                                    postscale_factor=postscale, process_set=self.set_id)

    def launch_rest(self, scale):
        """Starts every bucket not started yet (parameters unused in this step go as their
        current gradient, or zeros); returns the buckets to wait for and resets the step."""
        error = None
        try:
            for b in self.buckets:
                if b.handle is None:
                    for p in b.params:
                        if p not in b.ready:
                            self._fill(p, scale)
                    self._launch(b, scale)
        except Exception as e:
            error = e
        started = [(b, b.handle) for b in self.buckets if b.handle is not None]
        for b in self.buckets:
            b.handle = None
            b.ready.clear()
        if error is not None:
            for _, handle in started:  # let what did start finish before raising
                try:
                    _synchronize_handle(handle)
                except Exception:
                    pass
            raise error
        return started

    def wait(self, started):
        """Waits for the buckets; then every p.grad is the view of its reduced slot."""
        first_error = None
        for _, handle in started:
            try:
                _synchronize_handle(handle)
            except Exception as e:
                if first_error is None:
                    first_error = e
        sparse, self.sparse = self.sparse, {}
        for p, pending in sparse.items():
            try:
                p.grad = self.view_of[p].to_sparse() if pending is None else pending()
            except Exception as e:
                if first_error is None:
                    first_error = e
        if first_error is not None:
            raise first_error
        for p in self.params:
            view = self.view_of[p]
            if p not in sparse and not _is_view(p.grad, view):
                p.grad = view
