"""Dropout that is cheap on CPU.

nn.Dropout on CPU draws its mask with `bernoulli_`, one generator call per element: about 7.6 ns
an element on the 2-core CPUs mt is tuned for, about 2 ms for one (1024, 256) activation, and 8%
of the CPU translation recipe's fp32 training step (profiled) once every embedding, residual and
feed-forward output is dropped. Here the mask comes from 64-bit draws of the same generator cut
into four 16-bit numbers, each kept when it clears a threshold, so one call serves four
elements. Both passes multiply by the mask and then by 1 / (1 - p). For bf16 activations the
comparison writes the mask as zeros and ones in bf16: a boolean mask costs a conversion in every
multiplication, which made applying it about four times as slow as the multiplication itself; the
two-byte mask made the general recipe's bf16 step 1.035x as fast, with the same results to the bit.
fp32 activations keep boolean masks: there a four-byte mask gained 1% for four times the memory.

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


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """A CPU tensor of `shape`, each element kept (True, or 1 in `dtype`; else False or 0) with
    probability 1 - p (p rounded to a multiple of 1/65536). The same draws give the same mask in
    every dtype."""
    n = math.prod(shape)
    draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None, generator=thread_generator())
    slices = draws.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767]
    return torch.ge(slices, round(p * _LEVELS) - _LEVELS // 2, out=torch.empty(shape, dtype=dtype))


class _MaskedScale(torch.autograd.Function):
    """x * mask / (1 - p), and the same for the gradient, with the mask saved (booleans, or x's
    dtype where that is two bytes: see above)."""

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
    mask_dtype = x.dtype if x.element_size() == 2 else torch.bool  # see the module's docstring
    return _MaskedScale.apply(x, keep_mask(x.shape, p, mask_dtype), 1.0 / (1.0 - p))


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
