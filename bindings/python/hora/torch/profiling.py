"""torch.profiler ranges for hora.torch: every public collective (its enqueue, or the whole
blocking call) and synchronize() show in traces and in prof.key_averages() as "hora.<name>"
(hora.allreduce_async, hora.synchronize, ...). A range costs a few microseconds when no
profiler runs."""

import functools

import torch


def ranged(fn):
    label = "hora." + fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.autograd.profiler.record_function(label):
            return fn(*args, **kwargs)

    wrapper.__hora_ranged__ = True
    return wrapper


def wrap(namespace, names):
    """Replaces each function `names` in the module dict `namespace` by its ranged version."""
    for n in names:
        fn = namespace[n]
        if not getattr(fn, "__hora_ranged__", False):
            namespace[n] = ranged(fn)
