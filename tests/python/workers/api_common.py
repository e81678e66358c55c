"""What api_worker.py and api_extras.py share: the rank, the size, every rank's input."""

import torch

import hora.torch as hvd


def R():
    return hvd.rank()


def N():
    return hvd.size()


def inputs(shape=(3, 4), dtype=torch.float32):
    """Every rank's input, known to every rank, for the references."""
    return [(torch.arange(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape) % 7
             + r + 1).to(dtype) for r in range(N())]
