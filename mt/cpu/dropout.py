"""Dropout that is cheap on CPU.

nn.Dropout on CPU draws its mask with `bernoulli_`, one generator call per element, a visible
share of a CPU training step. Here each 64-bit draw of the same generator is cut into four 16-bit
numbers, each kept when it clears a threshold, so one call serves four elements; the drop
probability is rounded to a multiple of 1/65536. bf16 activations get a bf16 mask of zeros and
ones (a boolean one costs a conversion in every multiplication); fp32 ones keep booleans. Masks
come from torch's default generator, so `torch.manual_seed` repeats them, or from a thread's own
(`own_generator`) where threads compute side by side. Other devices use nn.Dropout's kernel.
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
