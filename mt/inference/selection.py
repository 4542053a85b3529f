"""The largest entries of each row of a (B, V) score matrix, faster than `argmax` and `topk` on CPU.

PyTorch's CPU argmax walks a row one element at a time, keeping the index beside the maximum: for
64 rows of an 8,000-word vocabulary it took 0.6 ms, against 0.03 ms for the vectorised `amax`.
Cutting each row into blocks, taking every block's `amax`, and running `argmax` only over the block
maxima and then inside the one winning block gives the same index (the first of equal maxima, as
`argmax`) for about a fifth of the time, once per greedy decoding step.

`topk` is slow for the same reason (3.9 ms for beam search's 320 rows x 8,000, k = 10, on one
thread), and the same cut works: a row's k largest entries lie in the k blocks with the largest
maxima, so `topk` needs to look only at those k blocks (2.1 ms in all).
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


TOPK_BLOCK = 64  # entries per block: a multiple of the vector width, where `amax` is fastest


def topk_rows(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) -> (B, k) values and indices of each row's k largest entries, largest first: the
    values of `scores.topk(k, dim=-1)`, and the same indices where values differ (`topk` orders
    equal values in no documented way). Entries past the last whole block are candidates too."""
    rows, vocab = scores.shape
    blocks = vocab // TOPK_BLOCK
    if scores.device.type != "cpu" or not scores.is_contiguous() or blocks < 4 * k:
        return scores.topk(k, dim=-1)
    body = scores[:, : blocks * TOPK_BLOCK].view(rows, blocks, TOPK_BLOCK)
    best = body.amax(dim=-1).topk(k, dim=-1).indices  # (B, k) the blocks that hold the k largest
    candidates = body[torch.arange(rows, device=scores.device)[:, None], best].view(rows, -1)
    in_blocks = candidates.size(1)
    if vocab > blocks * TOPK_BLOCK:
        candidates = torch.cat([candidates, scores[:, blocks * TOPK_BLOCK :]], dim=1)
    values, pick = candidates.topk(k, dim=-1)
    block = best.gather(1, (pick // TOPK_BLOCK).clamp(max=k - 1))
    in_tail = pick - in_blocks + blocks * TOPK_BLOCK
    index = torch.where(pick < in_blocks, block * TOPK_BLOCK + pick % TOPK_BLOCK, in_tail)
    return values, index
