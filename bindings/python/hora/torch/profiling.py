"""torch.profiler ranges for hora.torch: every public collective (its enqueue, or the whole
blocking call) and synchronize() show in traces and in prof.key_averages() as "hora.<name>"
(hora.allreduce_async, hora.synchronize, ...). A range costs a few microseconds; with no
profiler running, none is opened."""

import functools

import torch

record_function = torch.autograd.profiler.record_function
_profiler_enabled = torch.autograd._profiler_enabled


def ranged(fn):
    label = "hora." + fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _profiler_enabled():  # no profiler: no range to record
            return fn(*args, **kwargs)
        with record_function(label):
            return fn(*args, **kwargs)

    wrapper.__hora_ranged__ = True
    return wrapper


def wrap(namespace, names):
    """Replaces each function `names` in the module dict `namespace` by its ranged version."""
    for n in names:
        fn = namespace[n]
        if not getattr(fn, "__hora_ranged__", False):
            namespace[n] = ranged(fn)
