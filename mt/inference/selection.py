"""The largest entry of each row of a (B, V) score matrix, faster than `argmax` on CPU.

PyTorch's CPU argmax walks a row one element at a time, keeping the index beside the maximum: for
64 rows of an 8,000-word vocabulary it took 0.6 ms, against 0.03 ms for the vectorised `amax`.
Cutting each row into blocks, taking every block's `amax`, and running `argmax` only over the block
maxima and then inside the one winning block gives the same index (the first of equal maxima, as
`argmax`) for about a fifth of the time, once per greedy decoding step.
"""

from __future__ import annotations

import functools
import math

import torch


@functools.cache
def _block_size(vocab: int) -> int | None:
    """A divisor of `vocab` near its square root (blocks and block count both small), or None."""
    root = math.isqrt(vocab)
    for size in sorted(range(max(2, root // 2), 2 * root + 1), key=lambda s: abs(s - root)):
        if vocab % size == 0:
            return size
    return None


def argmax_rows(scores: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B,) the index of each row's maximum, equal to `scores.argmax(dim=-1)`."""
    rows, vocab = scores.shape
    size = _block_size(vocab) if scores.device.type == "cpu" and scores.is_contiguous() else None
    if size is None:
        return scores.argmax(dim=-1)
    blocks = scores.view(rows, vocab // size, size)
    block = blocks.amax(dim=-1).argmax(dim=-1)  # (B,) the first block holding the row's maximum
    inside = blocks[torch.arange(rows, device=scores.device), block].argmax(dim=-1)  # (B,)
    return block * size + inside
