"""Dropout that is cheap on CPU.

nn.Dropout on CPU draws its mask with `bernoulli_`, one generator call per element: about 7.6 ns
an element on the 2-core CPUs mt is tuned for, about 2 ms for one (1024, 256) activation, and 8%
of the CPU translation recipe's fp32 training step (profiled) once every embedding, residual and
feed-forward output is dropped. Here the mask comes from 64-bit draws of the same generator cut
into four 16-bit numbers, each kept when it clears a threshold, so one call serves four
elements; the mask is kept as booleans for the backward pass (a byte an element, not four).

The drop probability is rounded to a multiple of 1/65536 (0.1 becomes 0.1000061). Masks come from
torch's default CPU generator, so `torch.manual_seed` makes them repeatable as before; they are
different masks from nn.Dropout's. A thread that computes micro-batches beside others draws from a
generator of its own instead (`own_generator`): threads sharing one would take its numbers in
whatever order they happen to run. On other devices the module is nn.Dropout's own kernel.
"""

from __future__ import annotations

import contextlib
import math
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

_LEVELS = 1 << 16  # a mask element is one 16-bit slice of a 64-bit draw
_thread = threading.local()


@contextlib.contextmanager
def own_generator(seed: int):
    """Within the block, this thread's CPU dropout masks come from a generator of its own, seeded
    with `seed`, so they do not depend on what other threads draw meanwhile."""
    previous = thread_generator()
    _thread.generator = torch.Generator().manual_seed(seed)
    try:
        yield
    finally:
        _thread.generator = previous


def thread_generator() -> torch.Generator | None:
    """The generator `own_generator` gave this thread, or None (torch's default generator)."""
    return getattr(_thread, "generator", None)


def keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> torch.Tensor:
    """A CPU boolean tensor of `shape`, each element True with probability 1 - p (p rounded to
    a multiple of 1/65536)."""
    n = math.prod(shape)
    draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None, generator=thread_generator())
    slices = draws.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767]
    return slices >= round(p * _LEVELS) - _LEVELS // 2


class _MaskedScale(torch.autograd.Function):
    """x * mask / (1 - p), and the same for the gradient, with the mask saved as booleans."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """F.dropout(x, p, training), with CPU masks drawn as described above."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    return _MaskedScale.apply(x, keep_mask(x.shape, p), 1.0 / (1.0 - p))


class Dropout(nn.Module):
    """nn.Dropout's drop-in: the same behaviour, masks drawn by `dropout` above."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
